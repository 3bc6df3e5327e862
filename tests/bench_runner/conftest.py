"""The engine stand-in's fixtures (tests/engine/conftest.py) for the benchmark runner's tests."""

from tests.engine.conftest import start_engine

__all__ = ["start_engine"]
