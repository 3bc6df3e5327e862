"""Wake on request through the chart-installed gateway with the real operator (issue 27, part 2).

``helm install`` on a testbed of its own runs the operator, the shim and the gateway as pods on
process nodes (``e2e/helm_pods.py``, ``hack/testbed-values.yaml``); the workloads run the engine
stand-in there too (``SPARKRUN_ENGINE_LOAD_SECONDS``: a start-up long enough that requests arrive
while the workload is starting). The test reaches the gateway as the other e2e tests do, through
kube-apiserver's Service proxy, with the real ``openai`` client (asyncio), and sends its requests
spread over a few seconds, so most arrive after the wake began, while the workload is Running
without a ready endpoint: the 28-of-30 failure of the issue.

- from Stopped: 30 requests, all answered 200 once Ready, none 404;
- from Sleeping (``engine.enableSleepMode``): the same;
- from zero replicas left by the idle policy (``spec.idle.zeroAfterSeconds``, replicas 0): 50
  requests, all answered, exactly one wake patch (the gateway's own wake metric, and the
  ``sparkrun-gateway`` field manager owning ``spec.replicas``, set to 1);
- the user's own ``replicas: 0`` (no idle policy): 404 at once, nothing patched.

Workloads are named differently from their model and served name, in a namespace of their own.
The module lives in ``e2e/`` beside ``test_helm_pods.py``: ``make test`` keeps all of ``e2e/`` on
one worker (``tests/conftest.py``), so the two chart-installed testbeds run one after the other,
and no session testbed of ``tests/`` is started beside this one (it needs none).
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from e2e.helm_pods import CHART, NAMESPACE, RELEASE, TESTBED_VALUES, Cluster, start_cluster, wait_for
from e2e.target import admin_token

pytestmark = pytest.mark.testbed
IW = "sparkrun.dev/v1alpha1"
TENANT = "wake-tenant"
GATEWAY = f"/api/v1/namespaces/{NAMESPACE}/services/{RELEASE}-gateway:http/proxy"
PROCESS = {"sparkrun.dev/testbed-runtime": "process"}
TOLERATE = {"key": "sparkrun.dev/testbed-runtime", "operator": "Equal", "value": "process",
            "effect": "NoSchedule"}  # fmt: skip
#: name -> (served name, extra spec); every workload starts in 2 s (the engine's model load).
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "stopper": ("stop-chat", {}),
    "sleeper": ("sleep-chat", {"engine": {"enableSleepMode": True}}),
    "idler": ("idle-chat", {"replicas": 0, "idle": {"zeroAfterSeconds": 3600}}),
    "parked": ("parked-chat", {"replicas": 0}),
}


INSTALL = ("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
           "--values", str(TESTBED_VALUES), "--set", "operator.replicas=1",
           "--set", "gateway.extraArgs={--wake-timeout=90}", "--wait", "--timeout", "150s")  # fmt: skip


def _manifest(name: str) -> dict[str, Any]:
    served, extra = WORKLOADS[name]
    knobs = [{"name": f"SPARKRUN_ENGINE_{knob}_SECONDS", "value": "2"} for knob in ("LOAD", "WAKE")]
    engine = {"env": knobs, **extra.get("engine", {})}
    spec: dict[str, Any] = {
        "model": {"name": "Qwen/Qwen3-0.6B", "servedName": served},
        "engine": engine,
        "scheduling": {"nodeSelector": PROCESS, "tolerations": [TOLERATE]},
        **{k: v for k, v in extra.items() if k != "engine"},
    }
    return {"apiVersion": IW, "kind": "InferenceWorkload", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = start_cluster(tmp_path_factory.mktemp("gateway-wake") / "testbed")
    try:
        made.helm(*INSTALL)
        made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}})
        yield made
    finally:
        made.kube.close()
        made.testbed.stop()


def _get(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.kube.get(IW, "InferenceWorkload", name, namespace=TENANT) or {}


def _has(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c["type"] == type_ and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _patch(cluster: Cluster, name: str, spec: dict[str, Any]) -> None:
    path = cluster.kube.resource_path(IW, "InferenceWorkload", namespace=TENANT, name=name)
    headers = {"Content-Type": "application/merge-patch+json"}
    cluster.kube.request("PATCH", path, json={"spec": spec}, headers=headers)


def _listed(cluster: Cluster, served: str) -> dict[str, Any] | None:
    """The gateway's ``/v1/models`` entry of ``served`` (it knows the workload and its state)."""
    models = cluster.kube.request("GET", f"{GATEWAY}/v1/models").json()["data"]
    return next((m for m in models if m["id"] == served), None)


@pytest.fixture(scope="module")
def resting(cluster: Cluster) -> Cluster:
    """Every workload of :data:`WORKLOADS` applied; the stopper Stopped and the sleeper Sleeping
    once each was Ready; the gateway sees all four at rest."""
    for name in WORKLOADS:
        cluster.kube.apply(_manifest(name), namespace=TENANT)
    for name in ("stopper", "sleeper"):
        wait_for(lambda n=name: _has(_get(cluster, n), "Ready"), timeout=120, what=f"{name} Ready")  # type: ignore[misc]
    _patch(cluster, "stopper", {"state": "Stopped"})
    _patch(cluster, "sleeper", {"state": "Sleeping"})
    wait_for(lambda: _has(_get(cluster, "sleeper"), "Sleeping"), timeout=60, what="sleeper asleep")
    engines = "sparkrun.dev/workload=stopper"
    wait_for(lambda: not cluster.kube.list_items("v1", "Pod", namespace=TENANT, label_selector=engines),
             timeout=60, what="the stopper's pods gone")  # fmt: skip
    for served, _ in WORKLOADS.values():
        wait_for(lambda s=served: (m := _listed(cluster, s)) is not None and not m["ready"],  # type: ignore[misc]
                 timeout=30, what=f"the gateway knows {served}, not ready")  # fmt: skip
    return cluster


def _openai(cluster: Cluster) -> openai.AsyncOpenAI:
    """The ``openai`` client at the gateway through kube-apiserver's Service proxy (the admin token
    authenticates there; the testbed's CA verifies the apiserver)."""
    config = yaml.safe_load(Path(cluster.testbed.kubeconfig).read_text())
    ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    http = openai.DefaultAsyncHttpxClient(verify=ssl.create_default_context(cadata=ca), timeout=120)
    base = f"{cluster.kube.server}{GATEWAY}/v1"
    token = admin_token(Path(cluster.testbed.kubeconfig))
    return openai.AsyncOpenAI(base_url=base, api_key=token, max_retries=0, timeout=120, http_client=http)


async def _staggered(cluster: Cluster, served: str, n: int, spread: float) -> list[tuple[int, float]]:
    """``n`` chat completions spread evenly over ``spread`` seconds: (status, seconds) of each."""
    async with _openai(cluster) as client:

        async def one(i: int) -> tuple[int, float]:
            await asyncio.sleep(spread * i / n)
            started = time.monotonic()
            try:
                await client.chat.completions.create(
                    model=served, messages=[{"role": "user", "content": "wake up"}], max_tokens=4
                )
            except openai.APIStatusError as error:
                return error.status_code, time.monotonic() - started
            return 200, time.monotonic() - started

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def _wake_patches(cluster: Cluster, name: str) -> float:
    """``sparkrun_gateway_wakes_total{outcome="patched"}`` of the workload (the gateway's metric)."""
    text = cluster.kube.request("GET", f"{GATEWAY}/metrics").text
    key = re.escape(f'workload="{TENANT}/{name}"')
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("sparkrun_gateway_wakes_total{")
            and re.search(key, line)
            and 'outcome="patched"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _gateway_fields(obj: dict[str, Any]) -> set[str]:
    """The ``spec`` fields the field manager ``sparkrun-gateway`` owns (ADR 0045)."""
    owned = [m for m in obj["metadata"]["managedFields"] if m["manager"] == "sparkrun-gateway"]
    return {f.removeprefix("f:") for m in owned for f in (m.get("fieldsV1") or {}).get("f:spec", {})}


@pytest.mark.parametrize(("name", "n"), [("stopper", 30), ("sleeper", 30), ("idler", 50)])
def test_every_held_request_is_answered_by_one_wake(resting: Cluster, name: str, n: int) -> None:
    served = WORKLOADS[name][0]
    answers = asyncio.run(_staggered(resting, served, n, spread=3.0))
    statuses = [status for status, _ in answers]
    print(f"\n{name}: {n} requests, slowest {max(s for _, s in answers):.1f} s, statuses {set(statuses)}")
    assert statuses == [200] * n, f"{statuses.count(404)} answered 404"
    assert _wake_patches(resting, name) == 1
    obj = _get(resting, name)
    assert obj["spec"]["state"] == "Running"
    if name == "idler":
        assert obj["spec"]["replicas"] == 1  # no resume count yet: max(1, minReplicas) = 1
        # NB: the state was Running already (zero is not Stopped): only replicas changed hands
        assert "replicas" in _gateway_fields(obj), obj["metadata"]["managedFields"]
    else:
        assert _gateway_fields(obj) == {"state"}, obj["metadata"]["managedFields"]


def test_the_users_own_zero_replicas_get_404_at_once(resting: Cluster) -> None:
    before = _get(resting, "parked")["metadata"]["generation"]
    answers = asyncio.run(_staggered(resting, "parked-chat", 3, spread=0.0))
    assert [status for status, _ in answers] == [404] * 3
    assert max(seconds for _, seconds in answers) < 5
    assert _get(resting, "parked")["metadata"]["generation"] == before
    assert _wake_patches(resting, "parked") == 0
