"""The autoscaler and the idle policy with the real operator, on the testbed's process nodes running
the engine stand-in, driven by real requests (ADR 0045; docs/autoscaling.md).

- load: a queue on the leader (``--max-num-seqs 1``, a per-token delay, concurrent requests)
  brings a ScaleUp within the scrape interval plus the window; once the load stops, a ScaleDown
  after the down window. Each is an Event, ``spec.replicas`` written by ``sparkrun-autoscaler``,
  and ``status.scaling.lastDecision``;
- idle: a two-node group goes to Sleeping, then to zero replicas (every rank's pod gone) and
  comes back whole when ``spec.replicas`` is set again, as the gateway's wake writes it.
- a decision made on a workload that changed meanwhile is refused by its resourceVersion
  precondition and written once when made again (the real apiserver, no operator).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers.autoscale import Autoscaler, write
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.k8s.client import OPERATOR_MANAGER, Kube, connect
from sparkrun_operator.plan.autoscale import Sample, decide
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator import conftest as operator_fixtures
from tests.operator.conftest import API, OperatorProcess, get_workload, jobsets, wait_condition, workload
from tests.operator.test_workload_process import ON_PROCESS_NODES

Factory = Callable[..., OperatorProcess]
AUTOSCALER = "sparkrun-autoscaler"
GATEWAY = "sparkrun-gateway"
#: Pods with their own addresses (the operator scrapes them; ``tests/operator/conftest.py``).
netns_network = operator_fixtures.netns_network


def events(kube: KubeApi, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    """The Events of reason ``reason`` on the workload ``name``."""
    return [
        e
        for e in kube.list_items("v1", "Event", namespace=namespace)
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("name") == name
    ]


def wait_decision(kube: KubeApi, namespace: str, name: str, action: str, *, timeout: float) -> dict[str, Any]:
    """Wait for ``action``'s Event and ``status.scaling.lastDecision``; the workload then."""

    def probe() -> dict[str, Any] | None:
        obj = get_workload(kube, namespace, name)
        last = ((obj or {}).get("status") or {}).get("scaling", {}).get("lastDecision") or {}
        if obj is None or last.get("action") != action or not events(kube, namespace, name, action):
            return None
        return obj

    found: dict[str, Any] = kube.wait(
        probe, timeout=timeout, what=f"{namespace}/{name} {action}", interval=0.5
    )
    return found


def owner_of(obj: dict[str, Any], field: str) -> set[str]:
    """The field managers owning ``spec.<field>``."""
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if f"f:{field}" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    }


def pods_of(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.list_items("v1", "Pod", namespace=namespace, label_selector=f"sparkrun.dev/workload={name}")


@contextmanager
def load(url: str, model: str, *, clients: int) -> Iterator[list[int]]:
    """``clients`` threads sending chat completions to ``url`` back to back until the block ends;
    the statuses they got."""
    stop = threading.Event()
    statuses: list[int] = []

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                body = {"model": model, "messages": [{"role": "user", "content": "Count to ten."}]}
                try:
                    statuses.append(http.post(f"{url}/v1/chat/completions", json=body).status_code)
                except httpx.HTTPError:
                    statuses.append(0)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield statuses
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


@pytest.mark.usefixtures("netns_network")
def test_scale_up_on_a_queue_and_down_after_it(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    kube.apply(
        workload(
            "busy",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "busy"},
            engine={
                "args": ["--max-num-seqs", "1"],
                "env": [{"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": "0.1"}],
            },
            autoscaling={
                "mode": "Operator",
                "minReplicas": 1,
                "maxReplicas": 2,
                "target": {"waitingPerReplica": 1},
                "scrapeIntervalSeconds": 1,
                "scaleUpWindowSeconds": 2,
                "scaleDownWindowSeconds": 4,
                "cooldownSeconds": 0,
            },
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(kube, namespace, "busy", "Ready", timeout=90)
    url = obj["status"]["endpoints"][0]["url"]
    assert obj["spec"]["replicas"] == 1
    with load(url, "busy", clients=6) as statuses:
        started = time.monotonic()
        kube.wait(
            lambda: (get_workload(kube, namespace, "busy") or {})["spec"]["replicas"] == 2,
            timeout=30,
            what="spec.replicas 2",
            interval=0.1,
        )
        reaction = time.monotonic() - started
        obj = wait_decision(kube, namespace, "busy", "ScaleUp", timeout=20)
    # NB: no wall-clock bound here (a loaded CI machine); bench/autoscale.py measures the reaction
    print(f"autoscaler reaction to a load step: {reaction:.2f} s (goal: scrape 1 s + window 2 s)")
    assert statuses
    assert set(statuses) == {200}, set(statuses)
    decision = obj["status"]["scaling"]["lastDecision"]
    assert (decision["fromReplicas"], decision["toReplicas"]) == (1, 2)
    assert decision["figures"]["waiting"] >= 2
    assert decision["figures"]["windowSeconds"] == 2
    assert obj["spec"]["replicas"] == 2
    assert AUTOSCALER in owner_of(obj, "replicas")
    [up] = events(kube, namespace, "busy", "ScaleUp")
    assert "1 -> 2 replicas" in up["message"]
    assert "waiting" in up["message"]
    # the load is gone: down once both replicas answered quiet for the whole down window
    obj = wait_decision(kube, namespace, "busy", "ScaleDown", timeout=50)
    decision = obj["status"]["scaling"]["lastDecision"]
    assert (decision["fromReplicas"], decision["toReplicas"]) == (2, 1)
    assert decision["figures"]["replicasScraped"] == 2
    assert decision["figures"]["waiting"] <= 1  # the window's highest load: what one replica carries
    assert obj["spec"]["replicas"] == 1
    kube.wait(lambda: len(jobsets(kube, namespace, "busy")) == 1, timeout=30, what="one JobSet again")


def _patch_as(kube: KubeApi, namespace: str, name: str, manager: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
        params={"fieldManager": manager},
    )


@pytest.mark.usefixtures("netns_network")
def test_idle_group_sleeps_goes_to_zero_and_comes_back_whole(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    kube.apply(
        workload(
            "pair",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "pair"},
            engine={"enableSleepMode": True},
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            # NB: Sleeping lasts zeroAfterSeconds: long enough to observe on a loaded machine
            idle={"sleepAfterSeconds": 10, "zeroAfterSeconds": 30, "scrapeIntervalSeconds": 1},
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(kube, namespace, "pair", "Ready", timeout=150)
    url = obj["status"]["endpoints"][0]["url"]
    assert len(pods_of(kube, namespace, "pair")) == 2
    obj = wait_decision(kube, namespace, "pair", "Sleep", timeout=40)
    assert obj["spec"]["state"] == "Sleeping"
    assert obj["spec"]["replicas"] == 1
    assert AUTOSCALER in owner_of(obj, "state")
    wait_condition(kube, namespace, "pair", "Sleeping", timeout=30)
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": True}
    # zeroAfterSeconds more: zero replicas, state Running (not the user's Stopped)
    obj = wait_decision(kube, namespace, "pair", "ScaleToZero", timeout=70)
    assert (obj["spec"]["replicas"], obj["spec"]["state"]) == (0, "Running")
    assert obj["status"]["scaling"]["resumeReplicas"] == 1
    kube.wait(lambda: not pods_of(kube, namespace, "pair"), timeout=40, what="every rank's pod gone")
    kube.wait(lambda: not jobsets(kube, namespace, "pair"), timeout=30, what="the group's JobSet gone")
    kube.wait(
        lambda: (
            (get_workload(kube, namespace, "pair") or {}).get("status", {}).get("phase") == "ScaledToZero"
        ),
        timeout=20,
        what="phase ScaledToZero",
    )
    # a wake as the gateway writes it: the group comes back whole, and is not put back to zero
    _patch_as(kube, namespace, "pair", GATEWAY, {"replicas": 1})
    obj = wait_condition(
        kube, namespace, "pair", "Ready", timeout=60, extra=lambda o: o["spec"]["replicas"] == 1
    )
    pods = pods_of(kube, namespace, "pair")
    assert len(pods) == 2
    assert all(p["status"].get("phase") == "Running" for p in pods)
    assert (obj["spec"]["replicas"], obj["spec"]["state"]) == (1, "Running")
    assert len(events(kube, namespace, "pair", "ScaleToZero")) == 1
    time.sleep(2)  # NB: a negative check: two more scrape intervals (1 s) bring no second zero
    assert len(events(kube, namespace, "pair", "ScaleToZero")) == 1
    assert (get_workload(kube, namespace, "pair") or {})["spec"]["replicas"] == 1


async def test_a_decision_on_a_changed_workload_is_refused_then_decided_again(
    testbed: plane.Testbed, crds: list[str], kube: KubeApi, namespace: str
) -> None:
    """The patch carries the resourceVersion the decision was made on: a workload changed
    meanwhile refuses it (409), nothing is written or remembered, and the decision made again on
    the newer object is written once, as ``sparkrun-autoscaler``."""
    kube.apply(
        workload(
            "stale",
            namespace,
            replicas=5,
            autoscaling={"maxReplicas": 2, "target": {"waitingPerReplica": 1}},
        )
    )
    seen = kube.get(API, "InferenceWorkload", "stale", namespace=namespace)
    assert seen is not None
    _patch_as(kube, namespace, "stale", "someone-else", {"rollout": {"maxSurge": 0}})
    spec = InferenceWorkloadSpec.model_validate(seen["spec"])
    samples = [Sample(at=dt.datetime.now(dt.UTC), state="Running", replicas=5)]
    decision = decide(spec=spec, samples=samples, idle_since=None, last_decision=None, now=samples[0].at)
    assert decision is not None
    assert (decision.action, decision.to_replicas) == ("ScaleDown", 2)
    api = Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager=OPERATOR_MANAGER)
    ctx = Memo(config=OperatorConfig(), kube=api, http=httpx.AsyncClient(), metrics=Metrics())
    try:
        state = Autoscaler(namespace=namespace, name="stale", kube=api.as_manager(AUTOSCALER))
        assert not await write(ctx, state, body=seen, spec=spec, decision=decision)
        assert state.last is None
        fresh = kube.get(API, "InferenceWorkload", "stale", namespace=namespace)
        assert fresh is not None
        assert fresh["spec"]["replicas"] == 5
        assert await write(ctx, state, body=fresh, spec=spec, decision=decision)
        assert state.last == decision
        assert state.decided_on == fresh["metadata"]["resourceVersion"]
    finally:
        await ctx.http.aclose()
        await api.close()
    after = kube.get(API, "InferenceWorkload", "stale", namespace=namespace)
    assert after is not None
    assert after["spec"]["replicas"] == 2
    assert owner_of(after, "replicas") == {AUTOSCALER}
    assert "state" not in after["spec"] or owner_of(after, "state") != {AUTOSCALER}
