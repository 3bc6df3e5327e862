"""``bench.scale``'s options for InferencePools (issue 30) and the pure parts of what it reads:
which runs the flags ask for, the operator's flag, the vendored CRD, the apiserver's watch-event
counters and the ``PoolAccepted`` tally."""

from __future__ import annotations

import argparse

import pytest

from bench import _pools
from bench.scale import modes_of


def _args(**flags: bool) -> argparse.Namespace:
    values = {"compare": False, "compare_pools": False, "autoscaling": False, "inference_pools": False}
    values.update(flags)
    return argparse.Namespace(**values)


def test_modes_of_the_flags() -> None:
    assert modes_of(_args()) == [(False, False)]
    assert modes_of(_args(inference_pools=True)) == [(False, True)]
    assert modes_of(_args(compare_pools=True)) == [(False, False), (False, True)]
    assert modes_of(_args(compare_pools=True, autoscaling=True)) == [(True, False), (True, True)]
    assert modes_of(_args(compare=True, inference_pools=True)) == [(False, True), (True, True)]
    with pytest.raises(SystemExit, match="one comparison"):
        modes_of(_args(compare=True, compare_pools=True))


def test_operator_flag_is_explicit_both_ways() -> None:
    assert _pools.operator_flags(True) == ["--inference-pools", "auto"]
    assert _pools.operator_flags(False) == ["--inference-pools", "off"]


def test_the_vendored_crd_is_the_v1_inferencepool() -> None:
    doc = _pools.crd()
    assert doc["metadata"]["name"] == "inferencepools.inference.networking.k8s.io"
    assert [v["name"] for v in doc["spec"]["versions"] if v["served"]] == ["v1"]
    assert _pools.POOLS.format(ns="x").endswith("/v1/namespaces/x/inferencepools")


def test_watch_events_by_resource_and_their_difference() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_watch_events_total ...",
            'apiserver_watch_events_total{group="apps",resource="deployments",version="v1"} 12',
            'apiserver_watch_events_sizes_sum{group="apps",resource="deployments",version="v1"} 4096',
            'apiserver_watch_events_total{group="",resource="services",version="v1"} 3',
            'apiserver_watch_events_total{group="",resource="events",version="v1"} 99',
            'apiserver_watch_events_total{group="",kind="Pod",version="v1"} 7',
        ]
    )
    seen = _pools.watch_events(text)
    assert seen["deployments"] == {"events": 12.0, "bytes": 4096.0}
    assert seen["services"]["events"] == 3.0
    assert seen["pods"]["events"] == 7.0  # an older apiserver's "kind" label
    assert "events" not in seen  # not a resource the pools' watches read
    later = {**seen, "deployments": {"events": 20.0, "bytes": 5000.0}}
    assert _pools.diff_watch(seen, later)["deployments"] == {"events": 8.0, "bytes": 904.0}


def test_pool_accepted_tally() -> None:
    def workload(*conditions: dict[str, str]) -> dict[str, object]:
        return {"status": {"conditions": list(conditions)}}

    tally = _pools.pool_reasons(
        [
            workload({"type": "PoolAccepted", "status": "Unknown", "reason": "NoParent"}),
            workload({"type": "PoolAccepted", "status": "Unknown", "reason": "NoParent"}),
            workload({"type": "Ready", "status": "True", "reason": "Ready"}),
            {},
        ]
    )
    assert tally == {"Unknown/NoParent": 2, "none": 2}


def test_a_foreign_deployment_carries_no_picker_label() -> None:
    doc = _pools.foreign_deployment("app-1", "foreign")
    labels = doc["metadata"]["labels"]
    assert "app.kubernetes.io/component" not in labels
    assert doc["spec"]["replicas"] == 0
    assert doc["spec"]["selector"]["matchLabels"] == doc["spec"]["template"]["metadata"]["labels"]
