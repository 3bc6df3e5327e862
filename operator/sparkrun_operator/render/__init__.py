"""Pure functions from resource specs (and observed state) to child manifests. No I/O."""
