"""The gateway's Kubernetes source against the real apiserver of the testbed.

Objects are written by the test (no operator here): an InferenceWorkload, a selector-less
Service and an EndpointSlice, as the operator and the EndpointSlice controller would leave them.
The end-to-end path with real pods lives in the demo and operator tests.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from sparkrun_operator.gateway.kube import (
    ENDPOINT_SLICES,
    WORKLOADS,
    KubeRoutingSource,
    KubeWaker,
    SecretKeySource,
)
from sparkrun_operator.gateway.routing import RoutingTable
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONFIG_MAPS, SECRETS, SERVICES

T = TypeVar("T")

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]


def _workload(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": "qwen", "namespace": namespace},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B", "servedName": "qwen-test", "aliases": ["small"]}},
    }


def _slice(namespace: str, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "qwen-manual",
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": "qwen",
                "sparkrun.dev/workload": "qwen",
                "endpointslice.kubernetes.io/managed-by": "sparkrun-tests",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.9.9"], "conditions": {"ready": ready}}],
    }


async def _until(source: KubeRoutingSource, check: Any, within: float = 20.0) -> RoutingTable:
    async with asyncio.timeout(within):
        table = source.snapshot()
        while not check(table):
            table = await source.wait_changed(table.version)
        return table


async def test_routes_follow_workloads_and_endpoint_slices(k8s_api: Any, namespace: str) -> None:
    rest = Kube(k8s_api, field_manager="tests", owns_api=False)
    await rest.create(WORKLOADS, _workload(namespace), namespace)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "qwen", "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 8000}]},
    }
    await rest.create(SERVICES, service, namespace)
    await rest.create(ENDPOINT_SLICES, _slice(namespace, ready=True), namespace)

    source = KubeRoutingSource(rest, namespace=namespace)
    await source.start()
    try:
        table = await _until(source, lambda t: (w := t.lookup("qwen-test")) is not None and w.routable)
        entry = table.lookup("small")
        assert entry is not None
        assert entry.key == f"{namespace}/qwen"
        assert entry.endpoints == ("http://10.244.9.9:8000",)

        # Imperative aliases (the daemon API's proxy.add_alias) come from the alias ConfigMap.
        aliases = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "sparkrun-gateway-aliases", "namespace": namespace},
            "data": {"aliases.json": '{"speedy": "qwen-test"}'},
        }
        await rest.create(CONFIG_MAPS, aliases, namespace)
        table = await _until(source, lambda t: t.lookup("speedy") is not None)
        speedy = table.lookup("speedy")
        assert speedy is not None
        assert speedy.key == f"{namespace}/qwen"

        # Readiness flips are seen through the watch.
        await rest.apply(ENDPOINT_SLICES, _slice(namespace, ready=False), namespace=namespace)
        await _until(source, lambda t: (w := t.lookup("qwen-test")) is not None and not w.endpoints)

        # Stopped workloads are known but not routable; the waker asks for Running.
        await rest.merge_patch(WORKLOADS, "qwen", {"spec": {"state": "Stopped"}}, namespace)
        table = await _until(
            source, lambda t: (w := t.lookup("qwen-test")) is not None and w.state == "Stopped"
        )
        stopped = table.lookup("qwen-test")
        assert stopped is not None
        await KubeWaker(rest).wake(stopped)
        stored = await rest.get(WORKLOADS, "qwen", namespace)
        assert stored is not None
        assert stored["spec"]["state"] == "Running"
        # ADR 0011: the wake is written as the gateway, and it owns spec.state.
        wakes = [
            m
            for m in stored["metadata"]["managedFields"]
            if m["manager"] == "sparkrun-gateway" and m["operation"] == "Update"
        ]
        assert len(wakes) == 1
        assert "f:state" in wakes[0]["fieldsV1"]["f:spec"]
        await _until(source, lambda t: (w := t.lookup("qwen-test")) is not None and w.state == "Running")

        # Deleting the workload removes its names.
        await rest.delete(WORKLOADS, "qwen", namespace, propagation="Background")
        await _until(source, lambda t: t.lookup("qwen-test") is None and t.lookup("small") is None)
    finally:
        await source.close()


async def _eventually(probe: Callable[[], T | None], *, attempts: int = 200) -> T:
    """Poll ``probe`` every 0.1 s until it returns something other than None (bounded)."""
    for _ in range(attempts):
        found = probe()
        if found is not None:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met within {attempts / 10:.0f} s")


async def test_api_keys_come_from_labelled_secrets(k8s_api: Any, namespace: str) -> None:
    rest = Kube(k8s_api, field_manager="tests", owns_api=False)
    keys = SecretKeySource(rest, namespace=namespace)
    await keys.start()
    try:
        assert keys.lookup("sk-team-a") is None
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "team-a",
                "namespace": namespace,
                "labels": {"sparkrun.dev/gateway-key": "true"},
            },
            "data": {
                "key": base64.b64encode(b"sk-team-a").decode(),
                "models": base64.b64encode(b"qwen-test").decode(),
            },
        }
        await rest.create(SECRETS, secret, namespace)
        grant = await _eventually(lambda: keys.lookup("sk-team-a"))
        assert grant.allows("qwen-test", namespace)
        assert not grant.allows("other", namespace)
        assert not grant.allows("qwen-test", "elsewhere")
        await rest.delete(SECRETS, "team-a", namespace, propagation="Background")
        await _eventually(lambda: keys.lookup("sk-team-a") is None or None)
    finally:
        await keys.close()


def _named(namespace: str, name: str, served: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B", "servedName": served}},
    }


async def test_a_contested_name_freezes_nothing(k8s_api: Any, kube: Any, namespace: str) -> None:
    """Issue 15: two workloads in two namespaces claim one name. The older keeps it; every
    other change is still applied; a restarted gateway routes the winner at once."""
    rest = Kube(k8s_api, field_manager="tests", owns_api=False)
    other = f"{namespace}-b"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    dup, solo = f"dup-{namespace}", f"solo-{namespace}"
    sources: list[KubeRoutingSource] = []
    try:
        await rest.create(WORKLOADS, _named(namespace, "first", dup), namespace)
        await asyncio.sleep(1.1)  # creationTimestamp has one-second resolution
        await rest.create(WORKLOADS, _named(other, "second", dup), other)
        source = KubeRoutingSource(rest)  # every namespace, as the gateway runs by default
        sources.append(source)
        await source.start()
        table = await _until(source, lambda t: t.lookup(dup) is not None)
        assert table.lookup(dup).key == f"{namespace}/first"  # type: ignore[union-attr]
        # A third, unrelated workload is routed while the conflict lasts (before: the table froze).
        await rest.create(WORKLOADS, _named(namespace, "third", solo), namespace)
        table = await _until(source, lambda t: t.lookup(solo) is not None)
        assert table.lookup(dup).key == f"{namespace}/first"  # type: ignore[union-attr]
        assert any(c.model == dup and c.loser == f"{other}/second" for c in table.conflicts)
        # A restarted gateway (a fresh source) routes the winner (before: nothing at all).
        restarted = KubeRoutingSource(rest)
        sources.append(restarted)
        await restarted.start()
        table = await _until(restarted, lambda t: t.lookup(dup) is not None and t.lookup(solo) is not None)
        assert table.lookup(dup).key == f"{namespace}/first"  # type: ignore[union-attr]
        # The winner goes: the name passes to the other claim.
        await rest.delete(WORKLOADS, "first", namespace, propagation="Background")
        await _until(restarted, lambda t: (w := t.lookup(dup)) is not None and w.key == f"{other}/second")
    finally:
        for s in sources:
            await s.close()
        kube.delete("v1", "Namespace", other)
