"""Fixtures of the scaling tests: the operator process fixtures of ``tests/operator`` (the real
``sparkrun-k8s operator run`` against the testbed, its log printed when a test fails) and the
process nodes' own pod network."""

from __future__ import annotations

from tests.operator.conftest import netns_network, operator_factory, pytest_runtest_makereport

__all__ = ["netns_network", "operator_factory", "pytest_runtest_makereport"]
