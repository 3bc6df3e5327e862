"""Which ModelCache a benchmark runner mounts (``plan/benchobserve.bench_cache``), issue 31 review:
a claim that admits one pod only (``ReadWriteOncePod``) is the engine's: a runner waiting for it
would stay Pending until its deadline, or hold it while the engine restarts and keep the engine
from starting. Such a cache is not mounted; the runner looks elsewhere (``runtime/bench.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.plan import benchobserve

COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"


def _cache(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}}, "storage": {"claimName": "pvc"}},
        "status": {"phase": "Ready", "resolvedRevision": COMMIT, **status},
    }


@pytest.mark.parametrize(
    "modes", [["ReadWriteOncePod"], ["ReadWriteOncePod", "ReadWriteOnce"]], ids=["rwop", "rwop-and-rwo"]
)
def test_a_claim_for_one_pod_is_never_mounted_by_a_runner(modes: list[str]) -> None:
    assert benchobserve.bench_cache(_cache({"accessModes": modes, "nodeName": "n1"}), "c") is None


def test_a_claim_for_one_node_is_mounted_on_that_node() -> None:
    cache = benchobserve.bench_cache(_cache({"accessModes": ["ReadWriteOnce"], "nodeName": "n1"}), "c")
    assert cache is not None
    assert (cache.claim_name, cache.node) == ("pvc", "n1")
