"""Names one workload's endpoint picker and another workload share (issue 30, review R2): the
Managed picker's objects are ``<w>-epp`` and a workload's own ClusterIP Service is ``<w>``, so in
one namespace workload ``chat``'s picker Service and workload ``chat-epp``'s Service are the
same object. Neither may take the other's over, whichever came first: server-side apply as the
same field manager would silently drop the first one's owner reference, labels and ports.

The real apiserver on the testbed and the operator's own planner, executor and client (writing
as the operator's field manager); no operator process runs (the subject is one pass of each
workload, in the order chosen here).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.workload_act import execute
from sparkrun_operator.k8s.client import OPERATOR_MANAGER, Kube
from sparkrun_operator.plan.workload import Observation, plan
from sparkrun_operator.plan.workload.model import Plan
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PoolSettings
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import workload
from tests.unit.plan.pool_obs import first_plan_seen

pytestmark = pytest.mark.testbed

OWNER = "chat"
OTHER = "chat-epp"  # the name of OWNER's picker objects


@pytest.fixture
async def memo(k8s_api: Any) -> AsyncIterator[Memo]:
    kube = Kube(k8s_api, field_manager=OPERATOR_MANAGER, owns_api=False)
    ctx = Memo(config=OperatorConfig(), kube=kube, http=httpx.AsyncClient(), metrics=Metrics())
    yield ctx
    await ctx.http.aclose()


def _observation(obj: dict[str, Any]) -> Observation:
    meta = obj["metadata"]
    now = dt.datetime.now(dt.UTC)
    return Observation(
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
        generation=1,
        spec=InferenceWorkloadSpec.model_validate(obj["spec"]),
        status=InferenceWorkloadStatus(),
        now=now,
        created=now,
        pool_settings=PoolSettings(mode="auto", served=True),
    )


def _picker_pass(obs: Observation) -> Plan:
    """The picker objects of one pass (no pool: the subject is the picker's names), once the
    workload's JobSets are observed (serving first: the pass that makes them defers the pool's)."""
    p = plan(first_plan_seen(obs, ready=False))
    docs = [
        d
        for d in p.apply
        if keys.LABEL_INFERENCE_POOL in (d["metadata"].get("labels") or {}) and d["kind"] != "InferencePool"
    ]
    assert [d["kind"] for d in docs] == ["ServiceAccount", "RoleBinding", "Deployment", "Service"]
    return Plan(apply=docs, status=p.status)


def _service_pass(obs: Observation) -> Plan:
    """The workload's own ClusterIP Service of one pass."""
    p = plan(obs)
    docs = [d for d in p.apply if d["kind"] == "Service" and d["metadata"]["name"] == obs.name]
    assert len(docs) == 1
    return Plan(apply=docs, status=p.status)


def _controller_uid(obj: dict[str, Any] | None) -> list[str]:
    assert obj is not None
    return [r["uid"] for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]


def _workloads(kube: KubeApi, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    first = kube.create(workload(OWNER, namespace), namespace=namespace)
    second = kube.create(workload(OTHER, namespace), namespace=namespace)
    return first, second


async def test_a_workload_never_takes_over_the_picker_service_of_another(
    kube: KubeApi, namespace: str, crds: list[str], memo: Memo
) -> None:
    """``chat``'s picker first, then workload ``chat-epp``: its Service is not applied onto the
    picker's (which keeps its owner, labels, selector and ports), and it is told so."""
    owner, other = _workloads(kube, namespace)
    done = await execute(memo, _picker_pass(_observation(owner)), namespace=namespace)
    assert done.refused == []
    assert done.pool == []
    service = kube.get("v1", "Service", OTHER, namespace=namespace)
    assert _controller_uid(service) == [owner["metadata"]["uid"]]

    done = await execute(memo, _service_pass(_observation(other)), namespace=namespace)

    service = kube.get("v1", "Service", OTHER, namespace=namespace)
    assert service is not None
    assert _controller_uid(service) == [owner["metadata"]["uid"]], "the picker's Service was taken over"
    assert service["metadata"]["labels"].get(keys.LABEL_COMPONENT) == keys.COMPONENT_ENDPOINT_PICKER
    assert {p["port"] for p in service["spec"]["ports"]} == {9002, 9090}
    assert any(OTHER in message for message in done.refused), done


async def test_a_picker_never_takes_over_the_service_of_another_workload(
    kube: KubeApi, namespace: str, crds: list[str], memo: Memo
) -> None:
    """Workload ``chat-epp``'s Service first, then ``chat``'s picker: nothing of the picker is
    applied (its Service name is taken) and the Service keeps its owner and selector."""
    owner, other = _workloads(kube, namespace)
    done = await execute(memo, _service_pass(_observation(other)), namespace=namespace)
    assert done.refused == []

    done = await execute(memo, _picker_pass(_observation(owner)), namespace=namespace)

    service = kube.get("v1", "Service", OTHER, namespace=namespace)
    assert _controller_uid(service) == [other["metadata"]["uid"]]
    assert service is not None
    assert service["spec"]["selector"][keys.LABEL_WORKLOAD] == OTHER
    assert [(r.kind, r.taken) for r in done.pool] == [("Service", True)]
    assert kube.get("apps/v1", "Deployment", OTHER, namespace=namespace) is None
