"""Executor deletes carry the UID of the object they read: a same-named replacement is never deleted.

Each executor that deletes runs against the testbed's apiserver through a client that, right
before its first delete of an object, deletes that object and creates a same-named copy (a new
UID): exactly the race a name-only delete loses. The replacement must survive, and the executor
must say so (a 409 ``Conflict``, a warning, or an entry that is not safe to remove).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.k8s.resources import JOBSETS, Resource
from sparkrun_operator.ops import kube as ops_kube
from sparkrun_operator.ops.executors import benchmarks, clusters, kubernetes
from sparkrun_operator.ops.executors.modelcache import inventory, steps
from sparkrun_operator.ops.executors.modelcache.location import CACHES
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_testbed import plane
from tests.testbed.test_jobset import jobset

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]
API = "sparkrun.dev/v1alpha1"


class ReplacingKube(Kube):
    """A real client whose first delete of each object is preceded by that object's replacement."""

    replaced: dict[str, str]

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **kwargs: Any
    ) -> bool:
        if name not in self.replaced:
            old = await self.get(resource, name, namespace)
            assert old is not None, name
            await Kube.delete(self, resource, name, namespace, propagation="Background")
            for _ in range(100):
                if await self.get(resource, name, namespace) is None:
                    break
                await asyncio.sleep(0.1)
            meta = old["metadata"]
            copy = {
                "apiVersion": old["apiVersion"],
                "kind": old["kind"],
                "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
                "spec": old["spec"],
            }
            new = await self.create(resource, copy, namespace)
            assert new["metadata"]["uid"] != meta["uid"]
            self.replaced[name] = new["metadata"]["uid"]
        return await Kube.delete(self, resource, name, namespace, **kwargs)


@pytest.fixture
async def rest(testbed: plane.Testbed) -> AsyncIterator[ReplacingKube]:
    client = ReplacingKube(
        await connect(kubeconfig=str(testbed.kubeconfig)), field_manager="sparkrun-operator"
    )
    client.replaced = {}
    try:
        yield client
    finally:
        await client.close()


def _ctx(rest: Kube, namespace: str, events: list[tuple[str, Any]] | None = None) -> OperationContext:
    async def emit(kind: str, data: Any) -> None:
        if events is not None:
            events.append((kind, data))

    return OperationContext(
        rest=rest, settings=Settings(namespace=namespace, poll_interval=0.1), principal="test", emit=emit
    )


async def _survivor(rest: ReplacingKube, resource: Resource, name: str, namespace: str | None) -> None:
    found = await rest.get(resource, name, namespace)
    assert found is not None, f"the replacement {name} was deleted"
    assert found["metadata"]["uid"] == rest.replaced[name]
    assert not found["metadata"].get("deletionTimestamp")


async def test_cluster_delete_spares_a_replacement(rest: ReplacingKube, namespace: str) -> None:
    name = "uid-" + secrets.token_hex(3)
    spec = {"nodes": {"names": ["gpu-0"]}}
    body = {"apiVersion": API, "kind": "InferenceCluster", "metadata": {"name": name}, "spec": spec}
    await rest.create(ops_kube.CLUSTERS, body)
    try:
        with pytest.raises(k8s_errors.KubeConflict):
            await clusters.delete(_ctx(rest, namespace), {"name": name})
        await _survivor(rest, ops_kube.CLUSTERS, name, None)
    finally:
        await Kube.delete(rest, ops_kube.CLUSTERS, name, propagation="Background")


async def test_stop_jobset_spares_a_replacement(rest: ReplacingKube, namespace: str) -> None:
    doc = jobset("uid-js")
    doc["metadata"]["namespace"] = namespace
    await rest.create(JOBSETS, doc, namespace)
    with pytest.raises(k8s_errors.KubeConflict):
        await kubernetes.stop_jobset(_ctx(rest, namespace), {"name": "uid-js"})
    await _survivor(rest, JOBSETS, "uid-js", namespace)


async def test_benchmark_cleanup_spares_a_replaced_workload(rest: ReplacingKube, namespace: str) -> None:
    body = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": "launched", "namespace": namespace},
        "spec": {"model": {"name": "m/m"}},
    }
    launched = await rest.create(ops_kube.WORKLOADS, body, namespace)
    events: list[tuple[str, Any]] = []
    assert not await benchmarks._delete(
        _ctx(rest, namespace, events), ops_kube.WORKLOADS, launched, "InferenceWorkload"
    )
    await _survivor(rest, ops_kube.WORKLOADS, "launched", namespace)
    assert events == [
        ("warning", {"message": "InferenceWorkload launched was replaced since it was read; left alone"})
    ]


async def test_cache_retirement_spares_a_replaced_modelcache(rest: ReplacingKube, namespace: str) -> None:
    body = {
        "apiVersion": API,
        "kind": "ModelCache",
        "metadata": {"name": "tracker", "namespace": namespace},
        "spec": {
            "source": {"huggingFace": {"repo": "org/tiny", "revision": "main"}},
            "storage": {"claimName": "models"},
        },
    }
    tracker = inventory.Tracker.of(await rest.create(CACHES, body, namespace))
    assert tracker.uid
    entry = inventory.Entry(repo="org/tiny", commit="0" * 40, snapshot="s", present=True, trackers=[tracker])
    for force in (False, True):
        rest.replaced.clear()
        safe = await steps.retire(_ctx(rest, namespace), [entry], force=force)
        assert safe == []  # a replacement tracks the location: its files are not removed
        assert entry.reason_code == "usage_changed_during_cleanup"
        await _survivor(rest, CACHES, "tracker", namespace)
        current = await rest.get(CACHES, "tracker", namespace)
        assert current is not None
        tracker = inventory.Tracker.of(current)
        entry.trackers = [tracker]
