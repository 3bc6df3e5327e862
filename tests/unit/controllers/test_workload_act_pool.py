"""Carrying out the pool stage of a plan (``controllers/workload_act.py``, issue 30): the pool's
and picker's trouble never fails the workload nor touches ``Ready``; it is remembered for the
planner (``PoolAccepted``); nothing is applied onto an object the workload does not control, and
no picker object at all while one of their names is taken; every delete the stage plans carries
its UID precondition. The apiserver is a small fake here (its refusals are the subject); the
same flow on the real apiserver is ``tests/operator/test_inferencepool.py``."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.inferencepools import picker_marks
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.workload import Expectations
from sparkrun_operator.controllers.workload_act import (
    PICKER_RECHECK_SECONDS,
    execute,
    picker_refusals,
)
from sparkrun_operator.controllers.workload_pokes import full_key
from sparkrun_operator.k8s import errors
from sparkrun_operator.plan.workload import Observation, finalize, plan
from sparkrun_operator.plan.workload.model import ObservedPickerObject, ObservedPool, Plan
from sparkrun_operator.render import keys
from sparkrun_operator.render.networkpolicy import EnginePolicy
from tests.unit.plan.pool_obs import NAME, NOW, NS, UID, first_plan_seen, new_observation, workload_spec

KEY = (NS, NAME)
PICKER_KINDS = ("ServiceAccount", "RoleBinding", "Deployment", "Service")
FORBIDDEN = "rolebindings.rbac.authorization.k8s.io is forbidden: cannot bind clusterrole"


class PoolKube:
    """``get``/``apply``/``delete`` by ``(kind, name)``, refusing as told."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.refuse: dict[tuple[str, str], errors.KubeError] = {}
        self.applied: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str, str, str | None, str]] = []

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        return self.objects.get((resource.kind, name))

    def as_manager(self, field_manager: str) -> PoolKube:
        assert field_manager == keys.POOL_MANAGER
        return self

    async def apply(self, resource: Any, doc: dict[str, Any], *_: Any, **__: Any) -> Any:
        key = (resource.kind, doc["metadata"]["name"])
        assert key[0] == doc["kind"]
        if key in self.refuse:
            raise self.refuse[key]
        self.applied.append(key)
        self.objects[key] = doc
        return doc

    async def delete(
        self,
        resource: Any,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str,
        uid: str | None = None,
    ) -> bool:
        key = (resource.kind, name)
        if key in self.refuse:
            raise self.refuse[key]
        self.deleted.append((resource.kind, resource.plural, name, uid, propagation))
        return True


def _memo(kube: PoolKube) -> Memo:
    return Memo(config=OperatorConfig(), kube=kube, http=httpx.AsyncClient(), metrics=Metrics())  # type: ignore[arg-type]


def _obs(pool: dict[str, Any] | None = None, **kwargs: Any) -> Observation:
    """The workload once its JobSets are observed (serving first: ``tests/unit/plan/pool_obs.py``),
    their leaders not Ready yet (no served-from stamp for the fake to carry out)."""
    return first_plan_seen(new_observation(workload_spec(pool), **kwargs), ready=False)


def _pool_stage(p: Plan) -> list[dict[str, Any]]:
    return [d for d in p.apply if keys.LABEL_INFERENCE_POOL in (d["metadata"].get("labels") or {})]


def _only_pool_stage(p: Plan) -> Plan:
    """``p`` with only the pool stage's actions (the workload's own Service and JobSets are the
    subject of other tests)."""
    return Plan(apply=_pool_stage(p), delete=[d for d in p.delete if d.pool], status=p.status)


def _invalid(message: str) -> errors.KubeInvalid:
    return errors.KubeInvalid(message, status=422, reason="Invalid")


async def test_a_refused_pool_is_remembered_and_never_fails_the_workload() -> None:
    """Mode None on a v1.5 CRD: the apiserver refuses a pool without ``endpointPickerRef``. The
    workload is not failed, ``PoolAccepted`` says Refused in this very pass, the next pass plans
    no pool (it is remembered with its rendering), and it is forgotten once a pool is applied."""
    kube = PoolKube()
    ctx = _memo(kube)
    full = ctx.triggers.register(full_key(*KEY))
    full.clear()
    kube.refuse[("InferencePool", NAME)] = _invalid("spec.endpointPickerRef: Required value")
    p = _only_pool_stage(plan(_obs({"endpointPicker": {"mode": "None"}})))
    assert [d["kind"] for d in p.apply] == ["InferencePool"]
    done = await execute(ctx, p, namespace=NS)
    assert done.refused == []
    assert [(r.kind, r.taken) for r in done.pool] == [("InferencePool", False)]
    assert "InferencePool" in done.unapplied
    assert ctx.pool_refusals[KEY].message == "spec.endpointPickerRef: Required value"
    assert full.is_set()  # the next pass reports it from what is remembered
    final = finalize(p.status, refused=done.refused, generation=2, now=NOW, pool_refused=done.pool[0])
    pool = find_condition(final.conditions, c.POOL_ACCEPTED)
    assert pool is not None
    assert (pool.status, pool.reason) == ("False", c.REASON_POOL_REFUSED)
    assert final.phase != "Failed"
    assert find_condition(final.conditions, c.READY) == find_condition(p.status.conditions, c.READY)
    # the next pass: remembered, not applied again
    again = plan(_obs({"endpointPicker": {"mode": "None"}}, pool_refused=ctx.pool_refusals[KEY]))
    assert _pool_stage(again) == []
    # back to a Managed picker: another rendering, applied, and the refusal forgotten
    del kube.refuse[("InferencePool", NAME)]
    p = _only_pool_stage(plan(_obs(pool_refused=ctx.pool_refusals[KEY])))
    done = await execute(ctx, p, namespace=NS)
    assert done.pool == []
    assert ("InferencePool", NAME) in kube.applied
    assert KEY not in ctx.pool_refusals
    await ctx.http.aclose()


async def test_an_unlabelled_foreign_service_account_stops_the_whole_picker() -> None:
    """Someone's own ``qwen-epp`` ServiceAccount (no label: the indexes cannot see it): no
    picker object is applied (its pods would run as that account; its RoleBinding would grant
    it), nor is the pool (it would name the picker's Service to gateways); ``PoolNameTaken`` now
    and in the next passes, until the recheck."""
    kube = PoolKube()
    kube.objects[("ServiceAccount", f"{NAME}-epp")] = {"metadata": {"name": f"{NAME}-epp"}}
    ctx = _memo(kube)
    p = _only_pool_stage(plan(_obs()))
    assert sorted(d["kind"] for d in p.apply) == sorted(("InferencePool", *PICKER_KINDS))
    done = await execute(ctx, p, namespace=NS)
    assert done.refused == []
    assert kube.applied == []
    assert [(r.kind, r.name, r.taken) for r in done.pool] == [("ServiceAccount", f"{NAME}-epp", True)]
    assert {"Deployment", "ServiceAccount"} <= done.unapplied
    assert "InferencePool" in done.unapplied  # NB: withheld with the picker
    final = finalize(p.status, refused=[], generation=2, now=NOW, pool_refused=done.pool[0])
    found = find_condition(final.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_NAME_TAKEN)
    assert f"ServiceAccount named {NAME}-epp" in found.message
    # the next pass plans from what is remembered: no picker object
    now = time.monotonic()
    remembered = picker_refusals(ctx, KEY, now)
    assert [r.kind for r in remembered] == ["ServiceAccount"]
    pool = ObservedPool(name=NAME, uid="uid-pool", hash=None, controller=UID)
    p = plan(_obs(inference_pool=pool, picker_refused=remembered))
    assert [d["kind"] for d in _pool_stage(p)] == []  # NB: not even the pool: it would name the picker
    assert [(d.kind, d.name) for d in p.delete] == [("InferencePool", NAME)]
    found = find_condition(p.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert found.reason == c.REASON_POOL_NAME_TAKEN
    # later the workload looks again (a foreign object may be gone: nothing tells it)
    assert picker_refusals(ctx, KEY, now + PICKER_RECHECK_SECONDS + 1) == ()
    assert KEY not in ctx.picker_refusals
    # it went: the picker is applied, nothing remembered
    del kube.objects[("ServiceAccount", f"{NAME}-epp")]
    p = _only_pool_stage(plan(_obs(inference_pool=pool)))
    done = await execute(ctx, p, namespace=NS)
    assert done.pool == []
    assert {(k, f"{NAME}-epp") for k in PICKER_KINDS} <= set(kube.applied)
    await ctx.http.aclose()


async def test_a_refused_picker_object_is_remembered_and_applied_again_when_it_goes_through() -> None:
    kube = PoolKube()
    kube.refuse[("RoleBinding", f"{NAME}-epp")] = errors.KubeForbidden(
        FORBIDDEN, status=403, reason="Forbidden"
    )
    ctx = _memo(kube)
    done = await execute(ctx, _only_pool_stage(plan(_obs())), namespace=NS)
    assert done.refused == []
    assert [(r.kind, r.taken) for r in done.pool] == [("RoleBinding", False)]
    assert ("Deployment", f"{NAME}-epp") in kube.applied  # the others are not held back by a 403
    assert ctx.picker_refusals[KEY]["RoleBinding"].message == FORBIDDEN
    del kube.refuse[("RoleBinding", f"{NAME}-epp")]
    done = await execute(ctx, _only_pool_stage(plan(_obs())), namespace=NS)
    assert done.pool == []
    assert KEY not in ctx.picker_refusals
    await ctx.http.aclose()


async def test_every_delete_of_the_pool_stage_carries_its_uid(caplog: pytest.LogCaptureFixture) -> None:
    """Disabled: the pool and the four picker objects the workload controls go, each by its
    own resource, with its UID as precondition, in the background; a refused delete (403) is
    logged, and the workload is not failed for it."""
    kube = PoolKube()
    ctx = _memo(kube)
    pool = ObservedPool(name=NAME, uid="uid-pool", hash="h", controller=UID)
    picker = tuple(
        ObservedPickerObject(kind=k, name=f"{NAME}-epp", uid=f"uid-{k}", hash="h", controller=UID)
        for k in PICKER_KINDS
    )
    p = plan(_obs({"enabled": False}, inference_pool=pool, picker=picker))
    assert all(d.pool for d in p.delete)
    kube.refuse[("Service", f"{NAME}-epp")] = errors.KubeForbidden(
        "forbidden", status=403, reason="Forbidden"
    )
    with caplog.at_level(logging.WARNING, logger="sparkrun.operator.workload"):
        done = await execute(ctx, p, namespace=NS)
    assert done.refused == []
    assert sorted(kube.deleted) == sorted(
        [
            ("InferencePool", "inferencepools", NAME, "uid-pool", "Background"),
            ("ServiceAccount", "serviceaccounts", f"{NAME}-epp", "uid-ServiceAccount", "Background"),
            ("RoleBinding", "rolebindings", f"{NAME}-epp", "uid-RoleBinding", "Background"),
            ("Deployment", "deployments", f"{NAME}-epp", "uid-Deployment", "Background"),
        ]
    )
    assert f"Service {NAME}-epp not deleted" in caplog.text
    found = find_condition(p.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_DISABLED)
    await ctx.http.aclose()


def test_expectations_wait_for_no_pool_or_picker_that_was_not_applied() -> None:
    p = _only_pool_stage(plan(_obs()))
    waiting = Expectations()
    waiting.record(p)
    assert waiting.pool
    assert waiting.picker
    assert not waiting.met((), service_seen=True, patience=60.0, pool_seen=False, picker_seen=False)
    skipped = Expectations()
    skipped.record(p, {"InferencePool", "Deployment"})
    assert not skipped.pool
    assert not skipped.picker
    assert skipped.met((), service_seen=True, patience=60.0, pool_seen=False, picker_seen=False)


async def test_the_picker_policy_goes_first_and_a_refused_one_holds_the_deployment_back() -> None:
    """With engine NetworkPolicies the picker's policy is applied before its other objects; when
    the apiserver refuses it, the Deployment is not applied (its pods would run open to every
    pod), the rest is, the workload is not failed, and the next pass holds the Deployment back
    as long as the refusal stands."""
    policy = EnginePolicy(release_namespace="sparkrun-system", release_labels={"app": "sparkrun"})
    kube = PoolKube()
    ctx = _memo(kube)
    p = _only_pool_stage(plan(_obs(engine_policy=policy)))
    assert ("NetworkPolicy", f"{NAME}-epp") in [(d["kind"], d["metadata"]["name"]) for d in p.apply]
    done = await execute(ctx, p, namespace=NS)
    assert done.pool == []
    kinds = [kind for kind, _ in kube.applied]
    assert kinds[0] == "NetworkPolicy"
    assert sorted(kinds) == sorted(("InferencePool", "NetworkPolicy", *PICKER_KINDS))
    await ctx.http.aclose()

    refused = PoolKube()
    refused.refuse[("NetworkPolicy", f"{NAME}-epp")] = _invalid("spec.ingress[0].from[0]: Invalid value")
    ctx = _memo(refused)
    done = await execute(ctx, p, namespace=NS)
    assert done.refused == []
    assert [(r.kind, r.taken) for r in done.pool] == [("NetworkPolicy", False)]
    assert {"NetworkPolicy", "Deployment"} <= done.unapplied
    assert ("Deployment", f"{NAME}-epp") not in refused.applied
    assert {("ServiceAccount", f"{NAME}-epp"), ("Service", f"{NAME}-epp")} <= set(refused.applied)
    remembered = picker_refusals(ctx, KEY, time.monotonic())
    again = plan(_obs(engine_policy=policy, picker_refused=remembered))
    assert "Deployment" not in [d["kind"] for d in _pool_stage(again)]
    found = find_condition(again.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_REFUSED)
    await ctx.http.aclose()


# -- the picker's readiness mark (controllers/inferencepools.py): the status lane wakes on a flip --


def _picker_deployment(**status: Any) -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "metadata": {
            "name": f"{NAME}-epp",
            "namespace": NS,
            "uid": "uid-d",
            "generation": 2,
            "labels": {keys.LABEL_INFERENCE_POOL: NAME, keys.LABEL_COMPONENT: keys.COMPONENT_ENDPOINT_PICKER},
            "annotations": {keys.ANNOTATION_POOL_HASH: "h"},
            "ownerReferences": [{"uid": UID, "controller": True}],
        },
        "status": status,
    }


def test_a_picker_status_change_that_keeps_its_readiness_keeps_its_mark() -> None:
    """A rollout's every count (replicas, updated, unavailable, observedGeneration) changes the
    Deployment's status; only a flip of what the planner reads as ready changes the mark (a
    thousand pickers' status writes must not each wake a status lane)."""
    starting = picker_marks(_picker_deployment())
    assert starting[1] is False
    for status in (
        {"replicas": 1, "unavailableReplicas": 1},
        {"replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1, "observedGeneration": 2},
        {"readyReplicas": 1, "observedGeneration": 1},  # ready, but not the current generation
    ):
        assert picker_marks(_picker_deployment(**status)) == starting, status
    ready = picker_marks(_picker_deployment(readyReplicas=1, observedGeneration=2))
    assert ready[1] is True
    assert ready[0] == starting[0]  # NB: what the full lane acts on did not change
    for status in (
        {"readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 2, "replicas": 1},
        {"readyReplicas": 2, "updatedReplicas": 2, "observedGeneration": 3, "replicas": 2},
    ):
        assert picker_marks(_picker_deployment(**status)) == ready, status
    # it stops being ready: the mark flips back
    assert picker_marks(_picker_deployment(readyReplicas=0, observedGeneration=2)) == starting
    # what the full lane acts on (the hash) is the other half of the mark
    edited = _picker_deployment(readyReplicas=1, observedGeneration=2)
    edited["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH] = "h2"
    assert picker_marks(edited)[0] != ready[0]
    assert picker_marks(edited)[1] is True
    assert picker_marks(None) == (None, None)
