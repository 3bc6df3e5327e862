"""Foreign InferencePools in the gateway's table (``gateway/pools.py``, ``routing.py``), as data.

A pool another product created is routed by its ``sparkrun.dev/model-name`` annotation: its
Ready pods at ``targetPorts[0]``; a workload's name always wins, between pools the oldest; the
name policy applies to the pool's namespace; everything read from the pool is bounded. The
same against the real apiserver and real pods: ``test_inferencepool_testbed.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api import namepolicy
from sparkrun_operator.gateway.kube import build_entries
from sparkrun_operator.gateway.pools import (
    MAX_SELECTOR_LABELS,
    model_of,
    pool_entry,
    port_of,
    selector_of,
)
from sparkrun_operator.gateway.routing import RoutingTable
from sparkrun_operator.render import keys


def pool(
    namespace: str = "other",
    name: str = "llm",
    model: str | None = "their-model",
    created: str = "2026-01-01T00:00:00Z",
    labels: dict[str, str] | None = None,
    match: Any = None,
    ports: Any = None,
    **spec: Any,
) -> dict[str, Any]:
    annotations = {keys.ANNOTATION_POOL_MODEL: model} if model is not None else {}
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "creationTimestamp": created,
            "annotations": annotations,
            "labels": labels or {},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "llm"} if match is None else match},
            "targetPorts": [{"number": 8000}] if ports is None else ports,
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
            **spec,
        },
    }


def pod(ip: str, *, ready: bool = True, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p-{ip}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_ready_pods_at_the_first_target_port() -> None:
    pods = [pod("10.0.0.2"), pod("10.0.0.1"), pod("10.0.0.3", ready=False), pod("10.0.0.4", deleting=True)]
    pods += [pod("10.0.0.5", phase="Pending"), pod("fd00::7")]
    entry = pool_entry(pool(ports=[{"number": 8001}, {"number": 8002}]), pods)
    assert entry is not None
    assert entry.pool
    assert entry.key == "InferencePool/other/llm"
    assert entry.names == ("their-model",)
    assert entry.endpoints == ("http://10.0.0.1:8001", "http://10.0.0.2:8001", "http://[fd00::7]:8001")
    assert entry.routable
    assert not entry.wakeable  # never woken: without Ready pods it answers 404


@pytest.mark.parametrize(
    "obj",
    [
        pool(model=None),  # no annotation: not ours to route
        pool(labels={keys.LABEL_INFERENCE_POOL: "wl"}),  # the operator's own pool
        pool(model="bad\nname"),
        pool(model=" padded"),
        pool(model="x" * 257),
        pool(match={}),  # would select every pod of the namespace
        pool(match={"app": "a,b=c"}),  # a value no label can have: no selector is built from it
        pool(match={"a/b/c": "x"}),
        pool(match={f"k{i}": "v" for i in range(MAX_SELECTOR_LABELS + 1)}),
        pool(ports=[]),
        pool(ports=[{"number": 0}]),
        pool(ports=[{"number": True}]),
        pool(appProtocol="kubernetes.io/h2c"),
    ],
)
def test_what_is_not_routed(obj: dict[str, Any]) -> None:
    assert pool_entry(obj, [pod("10.0.0.1")]) is None


def test_selector_is_sorted_and_exact() -> None:
    excluded = f"!{keys.LABEL_INFERENCE_POOL},!{keys.LABEL_WORKLOAD}"  # the operator's pods
    assert selector_of(pool(match={"b": "2", "example.com/a": "1"})) == f"b=2,example.com/a=1,{excluded}"
    assert selector_of({"spec": "nonsense"}) is None
    assert port_of({"spec": {"targetPorts": "x"}}) is None
    assert model_of({"metadata": "x"}) is None


def _workload(namespace: str, name: str, served: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"model": {"name": "org/m", "servedName": served}},
    }


def test_a_workloads_name_wins_and_the_oldest_pool_keeps_one() -> None:
    # The pools are older than the workload, and still lose its name.
    wl = _workload("ml", "wl", "shared", "2026-06-01T00:00:00Z")
    first = pool_entry(pool(name="a", model="pooled", created="2026-01-01T00:00:00Z"), [pod("10.0.0.1")])
    second = pool_entry(pool(name="b", model="pooled", created="2026-02-01T00:00:00Z"), [pod("10.0.0.2")])
    squat = pool_entry(pool(name="c", model="shared", created="2025-01-01T00:00:00Z"), [pod("10.0.0.3")])
    assert first is not None
    assert second is not None
    assert squat is not None
    table = RoutingTable.build([*build_entries([wl], []), second, squat, first], 1)
    shared = table.lookup("shared")
    assert shared is not None
    assert not shared.pool
    assert shared.key == "ml/wl"
    pooled = table.lookup("pooled")
    assert pooled is not None
    assert pooled.key == "InferencePool/other/a"
    assert {(c.model, c.loser) for c in table.conflicts} == {
        ("shared", "InferencePool/other/c"),
        ("pooled", "InferencePool/other/b"),
    }


def test_a_pool_named_like_a_workload_does_not_shadow_it() -> None:
    # The same namespace/name as a workload (our key space): still two entries.
    wl = _workload("other", "llm", "wl-model", "2026-06-01T00:00:00Z")
    entry = pool_entry(pool(), [pod("10.0.0.1")])
    assert entry is not None
    table = RoutingTable.build([*build_entries([wl], []), entry], 1)
    assert table.lookup("wl-model").key == "other/llm"  # type: ignore[union-attr]
    assert table.lookup("their-model").key == "InferencePool/other/llm"  # type: ignore[union-attr]


def test_the_name_policy_applies_to_the_pools_namespace() -> None:
    policy = namepolicy.parse({"team-p": ["p-"], "*": []})
    assert pool_entry(pool(namespace="team-p", model="p-chat"), [], policy) is not None
    assert pool_entry(pool(namespace="team-p", model="q-chat"), [], policy) is None
    assert pool_entry(pool(namespace="elsewhere", model="p-chat"), [], policy) is None
