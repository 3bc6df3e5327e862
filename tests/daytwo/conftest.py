"""Day two on the testbed (ADR 0046): the operator's fixtures (``tests/operator/conftest.py``)."""

from __future__ import annotations

from tests.operator.conftest import netns_network, operator_factory, pytest_runtest_makereport

__all__ = ["netns_network", "operator_factory", "pytest_runtest_makereport"]
