"""Pure planners: observed state -> next actions. No I/O, no clock reads (time is passed in)."""
