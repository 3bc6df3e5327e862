"""Benchmarks: ``python -m bench.<name>`` (see docs/performance.md)."""
