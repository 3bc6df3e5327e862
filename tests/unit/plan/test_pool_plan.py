"""The InferencePool stage of the workload planner (``plan/workload/pool.py``, issue 30): every
branch of what it applies, deletes and reports (``PoolAccepted``, ``status.inferencePool``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import Observation, finalize, plan
from sparkrun_operator.plan.workload.model import (
    ObservedPickerObject,
    ObservedPool,
    Plan,
    PoolParent,
    PoolRefusal,
)
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PickerSettings, PoolSettings, render_picker, render_pool
from sparkrun_operator.render.workload import Owner, render_service
from tests.unit.plan.pool_obs import (
    NAME,
    NOW,
    NS,
    UID,
    first_plan_seen,
    new_observation,
    observed_jobsets,
    observed_revisions,
    pool_hash,
    workload_spec,
)

PICKER_KINDS = ["ServiceAccount", "RoleBinding", "Deployment", "Service"]


def _obs(spec: InferenceWorkloadSpec | None = None, *, new: bool = False, **kwargs: Any) -> Observation:
    """The workload once its JobSets are observed (serving first: the pool stage applies
    nothing in the pass that makes them); ``new``: brand new, nothing of it observed."""
    obs = new_observation(spec, **kwargs)
    return obs if new else first_plan_seen(obs)


def _pool(spec: InferenceWorkloadSpec | None = None, **kwargs: Any) -> ObservedPool:
    doc = render_pool(
        namespace=NS,
        workload=NAME,
        spec=(spec or workload_spec()).inference_pool,
        owner=Owner(name=NAME, uid=UID),
    )
    values: dict[str, Any] = {"name": NAME, "uid": "uid-pool", "hash": pool_hash(doc), "controller": UID}
    values.update(kwargs)
    return ObservedPool(**values)


def _picker(*, ready: bool = True, controller: str = UID, **hashes: str) -> tuple[ObservedPickerObject, ...]:
    docs = render_picker(
        namespace=NS, workload=NAME, spec=None, settings=PickerSettings(), owner=Owner(name=NAME, uid=UID)
    )
    return tuple(
        ObservedPickerObject(
            kind=d["kind"],
            name=d["metadata"]["name"],
            uid=f"uid-{d['kind']}",
            hash=hashes.get(d["kind"], pool_hash(d)),
            controller=controller,
            ready=ready and d["kind"] == "Deployment",
        )
        for d in docs
    )


def _pool_actions(p: Plan) -> list[tuple[str, str]]:
    """The pool's and the picker's applies (not the workload's own Service and JobSets)."""
    return [
        (d["kind"], d["metadata"]["name"])
        for d in p.apply
        if d["kind"] == "InferencePool" or d["metadata"]["name"].endswith("-epp")
    ]


def _deleted(p: Plan) -> list[tuple[str, str]]:
    return [(d.kind, d.name) for d in p.delete]


def _cond(p: Plan) -> tuple[str, str, str]:
    found = find_condition(p.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    return found.status, found.reason, found.message


def _accepting(name: str = "gw", **kwargs: Any) -> PoolParent:
    values: dict[str, Any] = {
        "parent": f"Gateway/infra/{name}",
        "accepted": "True",
        "resolved_refs": "True",
        "reason": "Accepted",
    }
    values.update(kwargs)
    return PoolParent(**values)


def test_without_settings_the_stage_is_off() -> None:
    p = plan(_obs(pool_settings=None, inference_pool=_pool(), picker=_picker()))
    assert _pool_actions(p) == []
    assert _deleted(p) == []
    assert find_condition(p.status.conditions, c.POOL_ACCEPTED) is None
    assert p.status.inference_pool is None


def test_a_new_workload_gets_its_pool_and_a_managed_picker() -> None:
    p = plan(_obs())
    assert _pool_actions(p) == [("InferencePool", NAME)] + [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    assert _jobsets(p) == []
    status, reason, message = _cond(p)
    assert (status, reason) == ("Unknown", c.REASON_NO_PARENT)
    assert "being created" in message
    assert "HTTPRoute" in message
    pool = p.status.inference_pool
    assert pool is not None
    assert pool.name == NAME
    assert pool.parents == []
    assert pool.endpoint_picker is not None
    assert pool.endpoint_picker.model_dump() == {"mode": "Managed", "service": f"{NAME}-epp", "ready": False}


# -- serving first: no pool or picker apply in a pass that makes a serving revision or JobSets --


def _jobsets(p: Plan) -> list[str]:
    return [d["metadata"]["name"] for d in p.apply if d["kind"] == "JobSet"]


def _image(image: str, pool: dict[str, Any] | None = None) -> InferenceWorkloadSpec:
    doc: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}, "engine": {"image": image}}
    if pool is not None:
        doc["inferencePool"] = pool
    return InferenceWorkloadSpec.model_validate(doc)


@pytest.mark.parametrize("revisions", [None, ()], ids=["history-off", "history-on"])
def test_a_brand_new_workload_gets_its_jobsets_first_and_its_pool_in_the_next_pass(
    revisions: tuple[()] | None,
) -> None:
    """Serving first: the first pass of a new workload applies its JobSets (and, with the
    history stage, its first serving revision) and no pool or picker object; it still reports
    the pool as being created. The pass those JobSets' events bring applies the pool, then its
    picker, and no JobSet."""
    new = _obs(new=True, revisions=revisions)
    first = plan(new)
    assert _jobsets(first) != []
    assert len(first.revisions) == (0 if revisions is None else 1)
    assert _pool_actions(first) == []
    assert [d for d in first.apply if keys.LABEL_INFERENCE_POOL in (d["metadata"].get("labels") or {})] == []
    status, reason, message = _cond(first)
    assert (status, reason) == ("Unknown", c.REASON_NO_PARENT)
    assert "being created" in message
    assert first.status.inference_pool is not None
    assert first.status.inference_pool.name == NAME
    following = plan(first_plan_seen(new))
    assert _jobsets(following) == []
    assert following.revisions == []
    assert _pool_actions(following) == [("InferencePool", NAME)] + [(k, f"{NAME}-epp") for k in PICKER_KINDS]


def test_a_pass_that_only_records_the_first_revision_defers_the_pool() -> None:
    """An upgrade: JobSets run, no revision is kept yet; the pass that records revision 1 makes
    no JobSet, and still applies no pool object (it makes a serving revision)."""
    seen = _obs(new=True, revisions=None)
    running = first_plan_seen(seen).jobsets
    p = plan(_obs(new=True, revisions=(), jobsets=running))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-1"]
    assert _jobsets(p) == []
    assert _pool_actions(p) == []


def test_deleting_pool_objects_is_not_deferred() -> None:
    """Serving first holds back applies only: in the very pass that makes a new workload's
    JobSets, the pool and picker objects the workload controls still go when the pool is
    switched off, and the Managed picker's when the mode is External."""
    off = plan(_obs(workload_spec({"enabled": False}), new=True, inference_pool=_pool(), picker=_picker()))
    assert _jobsets(off) != []
    assert _deleted(off) == [("InferencePool", NAME)] + [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    external = workload_spec({"endpointPicker": {"mode": "External", "service": "platform-epp"}})
    p = plan(_obs(external, new=True, inference_pool=_pool(hash="old"), picker=_picker()))
    assert _jobsets(p) != []
    assert _pool_actions(p) == []  # the changed pool waits for the next pass
    assert _deleted(p) == [(k, f"{NAME}-epp") for k in PICKER_KINDS]


def test_a_pass_that_rolls_a_new_revision_defers_the_pool() -> None:
    """A settled workload whose spec changes both its engine and its pool: the pass that makes
    revision 2 and its JobSets applies no pool object; the next pass (revision 2 and its JobSets
    observed) applies the changed pool."""
    before = _image("vllm/vllm-openai:v0.11.0")
    settled = _obs(before, revisions=(), inference_pool=_pool(before), picker=_picker())
    assert settled.revisions
    idle = plan(settled)
    assert _jobsets(idle) == []
    assert _pool_actions(idle) == []
    after = _image("vllm/vllm-openai:v0.11.2", {"endpointPicker": {"failureMode": "FailOpen"}})
    changed = dataclasses.replace(settled, spec=after, generation=3)
    rolled = plan(changed)
    assert [d["metadata"]["name"] for d in rolled.revisions] == [f"{NAME}-2"]
    assert _jobsets(rolled) != []
    assert _pool_actions(rolled) == []
    assert [d for d in rolled.delete if d.pool] == []
    assert settled.revisions is not None
    seen = dataclasses.replace(
        changed,
        revisions=settled.revisions + observed_revisions(rolled),
        jobsets=settled.jobsets + observed_jobsets(rolled, ready=False),
    )
    following = plan(seen)
    assert following.revisions == []
    assert _jobsets(following) == []
    assert _pool_actions(following) == [("InferencePool", NAME)]
    assert following.apply[-1]["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_nothing_is_applied_when_every_object_is_current_and_the_status_is_stable() -> None:
    obs = _obs(inference_pool=_pool(parents=(_accepting(),)), picker=_picker())
    p = plan(obs)
    assert _pool_actions(p) == []
    assert _deleted(p) == []
    assert _cond(p)[:2] == ("True", c.REASON_POOL_ACCEPTED)
    assert p.status.inference_pool is not None
    assert p.status.inference_pool.endpoint_picker is not None
    assert p.status.inference_pool.endpoint_picker.ready is True
    again = plan(_obs(status=p.status, inference_pool=obs.inference_pool, picker=obs.picker))
    assert again.status == p.status
    assert _pool_actions(again) == []


def test_a_changed_hash_reapplies_that_object_only() -> None:
    p = plan(_obs(inference_pool=_pool(hash="stale"), picker=_picker(Deployment="stale")))
    assert _pool_actions(p) == [("InferencePool", NAME), ("Deployment", f"{NAME}-epp")]


def test_a_spec_change_changes_the_pool_hash() -> None:
    spec = workload_spec({"endpointPicker": {"failureMode": "FailOpen"}})
    p = plan(_obs(spec, inference_pool=_pool(), picker=_picker()))
    assert _pool_actions(p) == [("InferencePool", NAME)]
    assert p.apply[-1]["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_a_pool_being_deleted_is_not_reapplied() -> None:
    p = plan(_obs(inference_pool=_pool(hash="stale", deleting=True), picker=_picker()))
    assert _pool_actions(p) == []
    assert _cond(p)[:2] == ("Unknown", c.REASON_NO_PARENT)


def test_a_pool_the_workload_does_not_control_is_left_alone() -> None:
    foreign = _pool(controller="someone-else", hash=None)
    p = plan(_obs(inference_pool=foreign, picker=_picker()))
    assert _pool_actions(p) == []
    assert ("InferencePool", NAME) not in _deleted(p)
    # its own picker would serve the foreign pool: it goes
    assert _deleted(p) == [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_NAME_TAKEN)
    assert "InferencePool named qwen" in message
    assert p.status.inference_pool is None


def test_a_picker_object_someone_else_controls_is_left_alone_and_reported() -> None:
    picker = tuple(
        o if o.kind != "Service" else ObservedPickerObject(kind="Service", name=o.name, uid="x")
        for o in _picker()
    )
    p = plan(_obs(inference_pool=_pool(parents=(_accepting(),)), picker=picker))
    assert _pool_actions(p) == []
    # NB: the picker would be reached through someone else's Service: its own objects go, and
    # so does the pool, which would send a gateway's every request to that Service
    assert _deleted(p) == [
        *((k, f"{NAME}-epp") for k in PICKER_KINDS if k != "Service"),
        ("InferencePool", NAME),
    ]
    assert all(d.pool for d in p.delete)
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_NAME_TAKEN)
    assert "Service named qwen-epp" in message


def test_a_stale_picker_object_of_ours_goes() -> None:
    extra = ObservedPickerObject(kind="Service", name="qwen-epp-old", uid="uid-old", controller=UID)
    p = plan(_obs(inference_pool=_pool(), picker=(*_picker(), extra)))
    assert _deleted(p) == [("Service", "qwen-epp-old")]


@pytest.mark.parametrize(
    ("pool", "service", "ref"),
    [
        (
            {"endpointPicker": {"mode": "External", "service": "platform-epp", "port": 9102}},
            "platform-epp",
            {"name": "platform-epp", "port": {"number": 9102}},
        ),
        ({"endpointPicker": {"mode": "None"}}, None, None),
    ],
)
def test_external_and_none_delete_the_managed_picker(
    pool: dict[str, Any], service: str | None, ref: dict[str, Any] | None
) -> None:
    spec = workload_spec(pool)
    p = plan(_obs(spec, inference_pool=_pool(hash="old"), picker=_picker()))
    assert _pool_actions(p) == [("InferencePool", NAME)]
    applied = p.apply[-1]["spec"].get("endpointPickerRef")
    if ref is None:
        assert applied is None
    else:
        assert {k: applied[k] for k in ref} == ref
    assert _deleted(p) == [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    status = p.status.inference_pool
    assert status is not None
    assert status.endpoint_picker is not None
    assert status.endpoint_picker.service == service
    assert status.endpoint_picker.ready is None


def test_disabled_in_the_spec_deletes_what_the_workload_controls() -> None:
    foreign_picker = ObservedPickerObject(kind="Deployment", name="qwen-epp", uid="f", controller="other")
    p = plan(_obs(workload_spec({"enabled": False}), inference_pool=_pool(), picker=(foreign_picker,)))
    assert _deleted(p) == [("InferencePool", NAME)]
    assert p.delete[0].uid == "uid-pool"
    assert _cond(p)[:2] == ("False", c.REASON_POOL_DISABLED)
    assert "spec.inferencePool.enabled" in _cond(p)[2]
    assert p.status.inference_pool is None


def test_operator_off_disables_every_pool() -> None:
    p = plan(_obs(pool_settings=PoolSettings(mode="off"), inference_pool=_pool(), picker=_picker()))
    assert _deleted(p) == [("InferencePool", NAME)] + [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    assert _pool_actions(p) == []
    assert _cond(p)[:2] == ("False", c.REASON_POOL_DISABLED)
    assert "--inference-pools=off" in _cond(p)[2]


def test_crd_not_served_says_how_to_fix_it() -> None:
    p = plan(_obs(pool_settings=PoolSettings(mode="auto", served=False), picker=_picker()))
    assert _pool_actions(p) == []
    assert _deleted(p) == [(k, f"{NAME}-epp") for k in PICKER_KINDS]
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_CRD_NOT_INSTALLED)
    assert "installCRD" in message


def test_a_refused_pool_is_not_applied_again_until_its_spec_changes() -> None:
    spec = workload_spec({"endpointPicker": {"mode": "None"}})
    desired = render_pool(
        namespace=NS, workload=NAME, spec=spec.inference_pool, owner=Owner(name=NAME, uid=UID)
    )
    refusal = PoolRefusal(
        hash=pool_hash(desired), message="spec.endpointPickerRef: Required value " + "x" * 9000
    )
    p = plan(_obs(spec, pool_refused=refusal))
    assert _pool_actions(p) == []
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_REFUSED)
    assert "Required value" in message
    assert len(message) < 5000
    # the user switches back to a Managed picker: a new rendering, applied again
    p = plan(_obs(workload_spec(), pool_refused=refusal))
    assert ("InferencePool", NAME) in _pool_actions(p)


def test_finalize_reports_a_refused_pool_without_failing_the_workload() -> None:
    p = plan(_obs())
    refusal = PoolRefusal(hash="h", message="no endpointPickerRef")
    final = finalize(p.status, refused=[], generation=2, now=NOW, pool_refused=refusal)
    found = find_condition(final.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_REFUSED)
    assert final.phase == p.status.phase != "Failed"
    assert _cond(p)[1] == c.REASON_NO_PARENT  # the plan's own status is left as it was


@pytest.mark.parametrize(
    ("parent", "reason", "in_message"),
    [
        (
            _accepting(accepted="False", reason="NotSupportedByParent", message="no"),
            "NotSupportedByParent",
            "no",
        ),
        (
            _accepting(accepted="False", reason="HTTPRouteNotAccepted"),
            "HTTPRouteNotAccepted",
            "Gateway/infra/gw",
        ),
        (
            _accepting(resolved_refs="False", reason="InvalidExtensionRef"),
            "InvalidExtensionRef",
            "ResolvedRefs False",
        ),
        (_accepting(accepted="Unknown", reason="bad reason!"), c.REASON_POOL_NOT_ACCEPTED, "(bad reason!)"),
        (_accepting(accepted="False", reason=""), c.REASON_POOL_NOT_ACCEPTED, "Accepted False"),
        (_accepting(accepted="False", reason="R" * 65), c.REASON_POOL_NOT_ACCEPTED, "RRR"),
        (_accepting(accepted="False", reason="Trailing:"), c.REASON_POOL_NOT_ACCEPTED, "Trailing:"),
    ],
)
def test_a_parent_that_does_not_accept_the_pool(parent: PoolParent, reason: str, in_message: str) -> None:
    p = plan(_obs(inference_pool=_pool(parents=(parent,)), picker=_picker()))
    status, got, message = _cond(p)
    assert (status, got) == ("False", reason)
    assert in_message in message
    assert "Gateway/infra/gw" in message


def test_one_accepting_parent_is_enough_and_the_status_lists_at_most_eight() -> None:
    parents = tuple(_accepting(f"gw{i}", accepted="False", reason="NotSupportedByParent") for i in range(12))
    parents += (_accepting("good"),)
    p = plan(_obs(inference_pool=_pool(parents=parents), picker=_picker()))
    status, reason, message = _cond(p)
    assert (status, reason) == ("True", c.REASON_POOL_ACCEPTED)
    assert "Gateway/infra/good" in message
    listed = p.status.inference_pool
    assert listed is not None
    assert len(listed.parents) == 8
    assert listed.parents[0].model_dump() == {
        "parent": "Gateway/infra/gw0",
        "accepted": "False",
        "resolved_refs": "True",
        "reason": "NotSupportedByParent",
    }


def test_an_existing_pool_without_parents_waits_for_an_httproute() -> None:
    p = plan(_obs(inference_pool=_pool(), picker=_picker(ready=False)))
    status, reason, message = _cond(p)
    assert (status, reason) == ("Unknown", c.REASON_NO_PARENT)
    assert "InferencePool qwen exists" in message
    assert p.status.inference_pool is not None
    assert p.status.inference_pool.endpoint_picker is not None
    assert p.status.inference_pool.endpoint_picker.ready is False


def test_the_picker_settings_reach_the_deployment() -> None:
    settings = PoolSettings(
        mode="auto", served=True, picker=PickerSettings(image="mirror/epp:v1.5.0", cluster_role="r")
    )
    p = plan(_obs(pool_settings=settings))
    by_kind = {d["kind"]: d for d in p.apply}
    assert by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == "mirror/epp:v1.5.0"
    assert by_kind["RoleBinding"]["roleRef"]["name"] == "r"
    assert all(
        d["metadata"]["ownerReferences"][0]["uid"] == UID for d in p.apply if d["kind"] in PICKER_KINDS
    )


# -- what the controller remembers of the picker's objects (an unlabelled name taken, a refusal) --


def _picker_docs() -> list[dict[str, Any]]:
    return render_picker(
        namespace=NS, workload=NAME, spec=None, settings=PickerSettings(), owner=Owner(name=NAME, uid=UID)
    )


def test_a_picker_name_remembered_taken_applies_no_picker_and_says_so() -> None:
    """An unlabelled foreign ``qwen-epp`` ServiceAccount (the indexes cannot see it; the controller
    met it as ``NameTaken``): no picker object is applied (its pods would run as that account),
    the workload's own go, and so does its pool (it would name the picker's Service, perhaps
    someone else's, to every gateway); the workload is not failed."""
    taken = PoolRefusal(hash="", message="", kind="ServiceAccount", name=f"{NAME}-epp", taken=True)
    ours = tuple(o for o in _picker() if o.kind != "ServiceAccount")
    p = plan(_obs(inference_pool=_pool(), picker=ours, picker_refused=(taken,)))
    assert _pool_actions(p) == []
    assert _deleted(p) == [
        *((k, f"{NAME}-epp") for k in PICKER_KINDS if k != "ServiceAccount"),
        ("InferencePool", NAME),
    ]
    # no pool yet: none is made while the name is taken
    p = plan(_obs(inference_pool=None, picker=ours, picker_refused=(taken,)))
    assert _pool_actions(p) == []
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_NAME_TAKEN)
    assert f"ServiceAccount named {NAME}-epp" in message
    assert p.status.phase != "Failed"
    # a taken name of another workload's picker is not this one's
    other = PoolRefusal(hash="", message="", kind="ServiceAccount", name="other-epp", taken=True)
    p = plan(_obs(inference_pool=_pool(), picker=_picker(), picker_refused=(other,)))
    assert _deleted(p) == []
    assert _cond(p)[1] == c.REASON_NO_PARENT


def test_a_refused_picker_object_is_not_applied_again_as_rendered() -> None:
    """A RoleBinding the apiserver refused (403: no ``bind`` on the ClusterRole): the others are
    applied, that one not again until its rendering changes; ``PoolAccepted`` says Refused."""
    docs = {d["kind"]: d for d in _picker_docs()}
    refusal = PoolRefusal(
        hash=pool_hash(docs["RoleBinding"]),
        message="rolebindings.rbac.authorization.k8s.io is forbidden: " + "y" * 9000,
        kind="RoleBinding",
        name=f"{NAME}-epp",
    )
    p = plan(_obs(inference_pool=_pool(), picker_refused=(refusal,)))
    assert _pool_actions(p) == [(k, f"{NAME}-epp") for k in PICKER_KINDS if k != "RoleBinding"]
    status, reason, message = _cond(p)
    assert (status, reason) == ("False", c.REASON_POOL_REFUSED)
    assert f"endpoint picker's RoleBinding {NAME}-epp" in message
    assert "forbidden" in message
    assert len(message) < 5000
    # rendered otherwise (another ClusterRole): applied again
    p = plan(
        _obs(
            inference_pool=_pool(),
            picker_refused=(refusal,),
            pool_settings=PoolSettings(mode="auto", served=True, picker=PickerSettings(cluster_role="other")),
        )
    )
    assert ("RoleBinding", f"{NAME}-epp") in _pool_actions(p)


def test_finalize_reports_a_taken_picker_name_of_this_pass() -> None:
    p = plan(_obs())
    taken = PoolRefusal(hash="", message="", kind="Deployment", name=f"{NAME}-epp", taken=True)
    final = finalize(p.status, refused=[], generation=2, now=NOW, pool_refused=taken)
    found = find_condition(final.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_NAME_TAKEN)
    assert f"Deployment named {NAME}-epp" in found.message
    assert find_condition(final.conditions, c.READY) == find_condition(p.status.conditions, c.READY)


def test_pending_pool_writes_never_hold_the_status_lane_back() -> None:
    """A settled workload whose pool and picker are still to be applied is not idle (the full
    lane has work) but is idle for serving: the status lane writes readiness meanwhile instead of
    leaving it to a full pass that waits behind every serving write (bench.scale, issue 30)."""
    service = render_service(namespace=NS, workload=NAME, owner=Owner(name=NAME, uid=UID))
    p = plan(_obs(service=service))
    assert _pool_actions(p)
    assert [d["kind"] for d in p.apply if not _pool_doc(d)] == []
    assert not p.idle
    assert p.serving_idle
    # a pass with a serving action is not
    new = plan(_obs(new=True))
    assert any(d["kind"] == "JobSet" for d in new.apply)
    assert not new.serving_idle
    # nor one with engine work or a serving child's delete, pool deletes aside
    disabled = plan(
        _obs(workload_spec({"enabled": False}), service=service, inference_pool=_pool(), picker=_picker())
    )
    assert disabled.delete
    assert all(d.pool for d in disabled.delete)
    assert disabled.serving_idle


def _pool_doc(doc: dict[str, Any]) -> bool:
    return keys.LABEL_INFERENCE_POOL in (doc["metadata"].get("labels") or {})
