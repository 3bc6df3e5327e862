"""The public surfaces of spec.autoscaling and spec.idle against the testbed's real kube-apiserver
(issue 27, second pass): what ``kubectl apply`` of a wrong combination answers (the CRD's CEL
rules and bounds, the same as ``sparkrun-k8s validate`` offline), what ``kubectl explain``
reads (the published OpenAPI v3 schema), what ``kubectl get iw`` shows (the printer columns in
the Table form kubectl asks for), what ``kubectl scale`` writes on an autoscaled workload (the
scale subresource), and that the gateway's real waker brings a parked workload at the idle
policy's zero back with its replicas. No operator runs here: the objects are the test's.

Every workload is named unlike its model and its served name, in a namespace of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api.admission import validate
from sparkrun_operator.gateway.kube import WORKLOADS, KubeWaker, workload_entry
from sparkrun_operator.k8s.client import Kube
from sparkrun_testbed.kubeapi import ApiError, KubeApi

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]
API = "sparkrun.dev/v1alpha1"
TARGET = {"kvCacheUsage": 0.8}
GEN = "text-generation"
#: what kubectl get asks for: the printer columns, evaluated by the apiserver
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
MERGE = {"content-type": "application/merge-patch+json"}


def _iw(name: str, **spec: Any) -> dict[str, Any]:
    model = {"name": "Qwen/Qwen3-0.6B", "servedName": "assistant-" + name}
    return {"apiVersion": API, "kind": "InferenceWorkload", "metadata": {"name": name},
            "spec": {"model": model, **spec}}  # fmt: skip


def _status(kube: KubeApi, path: str, status: dict[str, Any]) -> None:
    """Write ``status`` as the operator would (no operator runs here)."""
    kube.request("PATCH", f"{path}/status", json={"status": status}, headers=MERGE)


#: (spec, what the apiserver and `validate` both say: the field path and the message)
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2, "target": TARGET}},
     "spec.autoscaling.minReplicas", "minReplicas must not exceed maxReplicas"),
    ({"autoscaling": {"mode": "Operator", "maxReplicas": 2}},
     "spec.autoscaling.target", "mode Operator needs target (waitingPerReplica and/or kvCacheUsage)"),
    ({"autoscaling": {"maxReplicas": 2}},  # mode defaults to Operator
     "spec.autoscaling.target", "mode Operator needs target"),
    ({"autoscaling": {"maxReplicas": 2, "target": {}}},
     "spec.autoscaling.target", "set waitingPerReplica, kvCacheUsage or both"),
    ({"idle": {"sleepAfterSeconds": 60}},  # no engine at all
     "spec.idle.sleepAfterSeconds", "idle.sleepAfterSeconds needs engine.enableSleepMode: true"),
    ({"engine": {"enableSleepMode": False}, "idle": {"sleepAfterSeconds": 60}},
     "spec.idle.sleepAfterSeconds", "idle.sleepAfterSeconds needs engine.enableSleepMode: true"),
    ({"autoscaling": {"mode": "External", "minReplicas": 0, "maxReplicas": 3},
      "idle": {"zeroAfterSeconds": 60}},
     "spec.idle.zeroAfterSeconds", "needs autoscaling.mode Operator and minReplicas 0"),
    ({"autoscaling": {"maxReplicas": 3, "target": TARGET}, "idle": {"zeroAfterSeconds": 60}},
     "spec.idle.zeroAfterSeconds", "needs autoscaling.mode Operator and minReplicas 0"),
    ({"idle": {}}, "spec.idle", "set sleepAfterSeconds, zeroAfterSeconds or both"),
    ({"idle": {"zeroAfterSeconds": 5}}, "spec.idle.zeroAfterSeconds", "10"),
    ({"autoscaling": {"maxReplicas": 3, "target": {"kvCacheUsage": 2}}},
     "spec.autoscaling.target.kvCacheUsage", "1"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "path", "message"), REFUSED)
def test_a_wrong_combination_is_refused_with_its_field_and_reason(
    kube: KubeApi, namespace: str, spec: dict[str, Any], path: str, message: str
) -> None:
    doc = _iw("chat-east", **spec)
    with pytest.raises(ApiError) as refused:
        kube.create(doc, namespace=namespace)
    assert refused.value.status == 422, refused.value
    causes = refused.value.body.get("details", {}).get("causes", [])
    assert any(c.get("field") == path and message in c.get("message", "") for c in causes), causes
    offline = validate(doc)  # `sparkrun-k8s validate` says the same
    assert any(e.path == path and message in e.message for e in offline), offline


def test_allowed_combinations_are_admitted(kube: KubeApi, namespace: str) -> None:
    allowed: dict[str, dict[str, Any]] = {
        "zero-floor": {"autoscaling": {"minReplicas": 0, "maxReplicas": 3, "target": TARGET},
                       "idle": {"zeroAfterSeconds": 60}},
        "external": {"autoscaling": {"mode": "External", "maxReplicas": 3}},
        "sleeper": {"engine": {"enableSleepMode": True}, "idle": {"sleepAfterSeconds": 60}},
    }  # fmt: skip
    for name, spec in allowed.items():
        assert validate(_iw(name, **spec)) == []
        kube.create(_iw(name, **spec), namespace=namespace)


def test_kubectl_get_shows_scaled_to_zero(kube: KubeApi, namespace: str) -> None:
    kube.create(_iw("chat-east", replicas=0, idle={"zeroAfterSeconds": 60}), namespace=namespace)
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="chat-east")
    ready = {"type": "Ready", "status": "False", "reason": "ScaledToZero", "message": "a request wakes it",
             "lastTransitionTime": "2026-12-06T10:00:00Z"}  # fmt: skip
    _status(kube, path, {"phase": "ScaledToZero", "conditions": [ready]})
    table = kube.request("GET", path, headers={"accept": TABLE}).json()
    columns = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert (row["Phase"], row["Ready"], row["Desired"]) == ("ScaledToZero", "False", 0), row


def test_kubectl_explain_documents_autoscaling_and_idle(kube: KubeApi) -> None:
    doc = kube.get_json("/openapi/v3/apis/sparkrun.dev/v1alpha1")
    schema = next(v for k, v in doc["components"]["schemas"].items() if k.endswith("InferenceWorkload"))
    spec = schema["properties"]["spec"]["properties"]
    autoscaling, idle = spec["autoscaling"], spec["idle"]
    assert "External" in autoscaling["description"]
    knobs = {"mode", "minReplicas", "maxReplicas", "target", "scaleUpWindowSeconds", "cooldownSeconds"}
    assert set(autoscaling["properties"]) >= knobs
    assert "request wakes" in idle["properties"]["zeroAfterSeconds"]["description"]
    assert "sparkrun-autoscaler" in spec["replicas"]["description"]


def test_kubectl_scale_writes_replicas_of_an_autoscaled_workload(kube: KubeApi, namespace: str) -> None:
    """``kubectl scale iw/NAME --replicas=N`` is a write to the scale subresource: the apiserver
    takes any count (no rule ties spec.replicas to [minReplicas, maxReplicas]); the autoscaler
    puts one outside the range back at its next scrape (docs/autoscaling.md)."""
    kube.create(_iw("chat-east", autoscaling={"minReplicas": 1, "maxReplicas": 3, "target": TARGET}),
                namespace=namespace)  # fmt: skip
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="chat-east")
    scale = kube.request("GET", f"{path}/scale").json()
    scale["spec"]["replicas"] = 7
    kube.request("PUT", f"{path}/scale", json=scale, params={"fieldManager": "kubectl-scale"})
    got = kube.get(API, "InferenceWorkload", "chat-east", namespace=namespace)
    assert got is not None
    assert got["spec"]["replicas"] == 7


@pytest.mark.parametrize("parked", ["Stopped", "Sleeping"])
async def test_the_gateways_waker_brings_a_parked_idle_zero_back_with_its_replicas(
    k8s_api: Any, kube: KubeApi, namespace: str, parked: str
) -> None:
    """A workload the idle policy took to zero that someone also parked (``state: Stopped``):
    the gateway's wake must write the replicas too, or the held requests wait for nothing."""
    doc = _iw("chat-east", replicas=0, state=parked, engine={"enableSleepMode": True},
              idle={"zeroAfterSeconds": 60})  # fmt: skip
    kube.create(doc, namespace=namespace)
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="chat-east")
    served = {"name": "Qwen/Qwen3-0.6B", "servedName": "assistant-chat-east", "capabilities": [GEN]}
    _status(kube, path, {"model": served, "scaling": {"resumeReplicas": 2}})
    obj = kube.get(API, "InferenceWorkload", "chat-east", namespace=namespace)
    assert obj is not None
    entry = workload_entry(obj, [])
    assert entry is not None
    await KubeWaker(Kube(k8s_api, field_manager="tests", owns_api=False)).wake(entry)
    rest = Kube(k8s_api, field_manager="tests", owns_api=False)
    woken = await rest.get(WORKLOADS, "chat-east", namespace)
    assert woken is not None
    assert (woken["spec"]["state"], woken["spec"]["replicas"]) == ("Running", 2)
