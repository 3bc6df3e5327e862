"""Benchmark-gated rollouts end to end (ADR 0029): the testbed, the real operator, a workload served
by the engine stand-in on process nodes, and the gate's InferenceBenchmark running the real
llama-benchy against the new revision's surge replica (its pod address: the testbed has no
cluster DNS or kube-proxy, and the gate never goes through the Service or the gateway anyway).

The stand-in's TTFT delay is the knob: a new revision whose delay keeps TTFT under the threshold
is promoted (the old replica goes only after the benchmark succeeded); one whose delay is far
over it is held (the old revision keeps serving alone) with ``Promoted=False`` naming the figure,
the bound and by how much; a further spec change starts over. Bad gates refused at admission:
the corpus (``tests/corpus.py``, offline and on the testbed's apiserver).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from sparkrun_testbed.hfhub import Hub
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, get_workload, wait_condition, workload
from tests.operator.test_benchmark import _engine, benchmark, pod_hub  # noqa: F401 (a fixture)
from tests.operator.test_modelcache import ON_PROCESS_NODES

Factory = Callable[..., OperatorProcess]
GATE_LABEL = "sparkrun.dev/gate-workload"
SCENARIO = {"name": "single", "concurrency": 1, "requests": 2, "inputTokens": 64, "outputTokens": 8}


def _gate(hub: Hub, thresholds: list[dict[str, Any]]) -> dict[str, Any]:
    template = benchmark("unused", "unused", hub, [SCENARIO])["spec"]
    template.pop("target")
    return {"benchmark": template, "thresholds": thresholds, "timeoutSeconds": 300}


def _serve(kube: KubeApi, namespace: str, engine: dict[str, Any], gate: dict[str, Any]) -> dict[str, Any]:
    kube.apply(
        workload(
            "tiny",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "tiny"},
            engine=engine,
            scheduling=ON_PROCESS_NODES,
            rollout={"maxSurge": 1, "gate": gate},
        )
    )
    return wait_condition(kube, namespace, "tiny", "Ready", timeout=120)


def _patch_engine(kube: KubeApi, namespace: str, engine: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="tiny"),
        json={"spec": {"engine": engine}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _jobset_revisions(kube: KubeApi, namespace: str) -> list[str]:
    items = kube.list_items(
        "jobset.x-k8s.io/v1alpha2", "JobSet", namespace=namespace, label_selector="sparkrun.dev/workload=tiny"
    )
    return sorted(
        js["metadata"]["labels"]["sparkrun.dev/revision"]
        for js in items
        if not js["metadata"].get("deletionTimestamp")
    )


def _gates(kube: KubeApi, namespace: str) -> list[dict[str, Any]]:
    return kube.list_items(
        API, "InferenceBenchmark", namespace=namespace, label_selector=f"{GATE_LABEL}=tiny"
    )


def _new_revision(kube: KubeApi, namespace: str, before: str) -> str:
    def moved() -> str | None:
        w = get_workload(kube, namespace, "tiny")
        revision = (w or {}).get("status", {}).get("revision")
        return revision if revision and revision != before else None

    return kube.wait(moved, timeout=30, what="a new serving revision")


def _gate_of(kube: KubeApi, namespace: str, revision: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        return next(
            (
                b
                for b in _gates(kube, namespace)
                if b["metadata"]["labels"]["sparkrun.dev/revision"] == revision
            ),
            None,
        )

    return kube.wait(found, timeout=120, what=f"the gate benchmark of revision {revision}")


def test_a_gated_rollout_that_meets_its_thresholds_is_promoted(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    pod_hub: Hub,  # noqa: F811
) -> None:
    operator_factory(namespace)
    thresholds = [
        {"metric": "ttftP50", "max": 2000},
        {"metric": "errors", "max": 0},
        {"metric": "outputTokensPerSecond", "scenario": "single", "min": 1},
    ]
    served = _serve(kube, namespace, _engine(0.02, 0.005), _gate(pod_hub, thresholds))
    old = served["status"]["revision"]
    assert condition(served, "Promoted") is None  # the first revision has nothing to be gated against
    assert _gates(kube, namespace) == []
    _patch_engine(kube, namespace, _engine(0.03, 0.005))
    new = _new_revision(kube, namespace, old)
    bench = _gate_of(kube, namespace, new)
    # measured while the old replica still serves
    assert _jobset_revisions(kube, namespace) == sorted([old, new])
    owner = bench["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("InferenceWorkload", "tiny")
    promoted = wait_condition(kube, namespace, "tiny", "Promoted", timeout=180)
    cond = condition(promoted, "Promoted")
    assert cond is not None
    assert cond["reason"] == "ThresholdsMet"
    assert bench["metadata"]["name"] in cond["message"]
    done = kube.get(API, "InferenceBenchmark", bench["metadata"]["name"], namespace=namespace)
    assert done is not None
    assert done["status"]["phase"] == "Succeeded"
    (result,) = done["status"]["results"]
    assert result["errors"] == 0
    assert 30 <= result["ttft"]["p50"] <= 2000
    kube.wait(lambda: _jobset_revisions(kube, namespace) == [new], timeout=60, what="the old replica gone")
    final = wait_condition(kube, namespace, "tiny", "Progressing", "False", reason="Stable", timeout=60)
    endpoint = final["status"]["endpoints"][0]
    assert done["spec"]["target"]["url"] == endpoint["url"]  # the new replica itself was measured


def test_a_gated_rollout_that_misses_is_held_and_a_new_change_starts_over(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    pod_hub: Hub,  # noqa: F811
) -> None:
    operator_factory(namespace)
    served = _serve(
        kube, namespace, _engine(0.02, 0.005), _gate(pod_hub, [{"metric": "ttftP50", "max": 150}])
    )
    old = served["status"]["revision"]
    old_url = served["status"]["endpoints"][0]["url"]
    _patch_engine(kube, namespace, _engine(0.5, 0.005))  # TTFT over three times the bound
    slow = _new_revision(kube, namespace, old)
    bench = _gate_of(kube, namespace, slow)
    held = wait_condition(kube, namespace, "tiny", "Promoted", "False", reason="ThresholdMissed", timeout=180)
    cond = condition(held, "Promoted")
    assert cond is not None
    done = kube.get(API, "InferenceBenchmark", bench["metadata"]["name"], namespace=namespace)
    assert done is not None
    p50 = done["status"]["results"][0]["ttft"]["p50"]
    assert p50 >= 500
    match = re.search(
        r"ttftP50 of scenario single is ([0-9.]+) ms, above the max 150 ms by ([0-9.]+) ms \(\+(\d+)%\)",
        cond["message"],
    )
    assert match is not None, cond["message"]
    assert float(match.group(1)) == pytest.approx(p50, rel=1e-3)
    assert float(match.group(2)) == pytest.approx(p50 - 150, rel=1e-3)
    assert cond["message"].startswith(f"revision {slow} held (benchmark {bench['metadata']['name']}): ")
    progressing = condition(held, "Progressing")
    assert progressing is not None
    assert (progressing["status"], progressing["reason"]) == ("False", "ThresholdMissed")
    # held: the new revision's replica goes, the old one keeps serving alone
    kube.wait(lambda: _jobset_revisions(kube, namespace) == [old], timeout=60, what="only the old revision")
    wait_condition(kube, namespace, "tiny", "Ready", timeout=30)

    def endpoints() -> list[tuple[str, bool]]:
        found = get_workload(kube, namespace, "tiny") or {}
        return [(e["url"], e["ready"]) for e in (found.get("status") or {}).get("endpoints") or []]

    # NB: the held revision's pod is deleted with the JobSet, but lists among the endpoints until
    # it is gone (its grace period; slower on a busy machine): the status converges on the old one
    kube.wait(lambda: endpoints() == [(old_url, True)], timeout=60, what="only the old revision's endpoint")
    serving = get_workload(kube, namespace, "tiny")
    assert serving is not None
    assert serving["status"]["phase"] == "Running"
    assert condition(serving, "Promoted")["reason"] == "ThresholdMissed"  # type: ignore[index]

    # a new spec change (a fast engine again) starts over: a new benchmark, promoted this time
    _patch_engine(kube, namespace, _engine(0.03, 0.005))
    fast = _new_revision(kube, namespace, slow)
    _gate_of(kube, namespace, fast)
    wait_condition(kube, namespace, "tiny", "Promoted", reason="ThresholdsMet", timeout=180)
    kube.wait(lambda: _jobset_revisions(kube, namespace) == [fast], timeout=60, what="the new revision alone")
    names = [
        b["metadata"]["name"] for b in _gates(kube, namespace) if not b["metadata"].get("deletionTimestamp")
    ]
    assert names == [_gate_of(kube, namespace, fast)["metadata"]["name"]]  # the held one's is gone
