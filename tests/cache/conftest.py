"""Fixtures of the model-cache tests: one local Hub (loopback) per module, reset per test.

The tests drive the real ``huggingface_hub`` against it; no Kubernetes is involved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrun_testbed.hfhub import TOKEN, Hub, default_repos


@pytest.fixture(scope="module")
def hub_server() -> Iterator[Hub]:
    with Hub(default_repos(lfs_mib=4, big=True), tokens=[TOKEN]) as hub:
        yield hub


@pytest.fixture
def hub(hub_server: Hub) -> Iterator[Hub]:
    hub_server.clear_faults()
    hub_server.reset_stats()
    yield hub_server
    hub_server.clear_faults()


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    root.mkdir()
    return root
