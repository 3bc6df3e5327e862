"""The gateway's start never waits on a tenant's pool: a foreign InferencePool whose pods cannot
be listed (refused, or a list that never answers) costs the start at most its sync timeout, and
the start does not fail (second read of issue 30: one pool's pod watch used to fail it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from sparkrun_operator.gateway.pools import PoolWatch
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Listing
from sparkrun_operator.k8s.resources import INFERENCE_POOLS, PODS
from sparkrun_operator.render import keys

POOL = {
    "apiVersion": "inference.networking.k8s.io/v1",
    "kind": "InferencePool",
    "metadata": {
        "name": "theirs",
        "namespace": "team-b",
        "uid": "u-1",
        "resourceVersion": "1",
        "creationTimestamp": "2026-12-01T00:00:00Z",
        "annotations": {keys.ANNOTATION_POOL_MODEL: "their-model"},
    },
    "spec": {"selector": {"matchLabels": {"app": "llm"}}, "targetPorts": [{"number": 8000}]},
}


class SlowPods:
    """Pools list at once; the pods of a pool are refused (403) or never answered."""

    def __init__(self, pods: str) -> None:
        self.pods = pods
        self.pod_lists = 0

    async def list_versioned(self, resource: Any, namespace: str | None = None, **_: Any) -> Listing:
        if resource.plural == INFERENCE_POOLS.plural:
            return Listing(items=[POOL], resource_version="1")
        assert resource.plural == PODS.plural
        self.pod_lists += 1
        if self.pods == "refused":
            raise errors.KubeForbidden("pods is forbidden", status=403, method="GET")
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")

    async def watch(self, *_: Any, **__: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield "BOOKMARK", {}


async def _start(pods: str) -> tuple[PoolWatch, SlowPods, float]:
    kube = SlowPods(pods)
    watch = PoolWatch(kube, ["team-b"], on_change=lambda: None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(watch.start(sync_timeout=0.5), timeout=5)
    return watch, kube, loop.time() - began


async def test_a_pool_whose_pods_are_refused_does_not_fail_the_start() -> None:
    watch, kube, took = await _start("refused")
    try:
        assert kube.pod_lists >= 1
        assert took < 2
        assert list(watch.routed()) == [("team-b", "theirs")]
        assert [e.endpoints for e in watch.entries()] == [()]  # no pods listed: no endpoint yet
    finally:
        await watch.close()


async def test_a_pool_whose_pod_list_never_answers_costs_the_start_its_timeout_only() -> None:
    watch, kube, took = await _start("hangs")
    try:
        assert kube.pod_lists == 1
        assert 0.4 < took < 2
        assert [e.endpoints for e in watch.entries()] == [()]
    finally:
        await watch.close()
