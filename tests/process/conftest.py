"""Fixtures for process-node tests: the session testbed's process nodes and their pod network."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_testbed import plane
from sparkrun_testbed.topology import Topology
from tests.process import helpers


@pytest.fixture(scope="session")
def process_nodes(testbed: plane.Testbed) -> list[str]:
    """Names of the testbed's process nodes (the session topology has four)."""
    names = Topology.from_dict(testbed.state.topology).process_node_names()
    assert names, "the session testbed has no process nodes (tests/conftest.py SESSION_TOPOLOGY)"
    return names


@pytest.fixture(scope="session")
def pod_network(testbed: plane.Testbed, process_nodes: list[str]) -> str:
    """``netns`` (pods in their own network namespaces) or ``loopback`` (the fallback)."""
    return helpers.network_mode(testbed.run_dir)


@pytest.fixture
def netns_network(pod_network: str, require: Any) -> None:
    """Require real pod addresses: skipped without them, failed under CI=true."""
    require(
        pod_network == "netns",
        "pods run with loopback addresses here (no privilege for network namespaces; see "
        "docs/decisions/0004-testbed-pod-network.md)",
    )
