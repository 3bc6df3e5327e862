"""The managed endpoint picker's NetworkPolicy in the pool stage of the workload planner
(``plan/workload/pool.py``; issue 30, review F2): planned with the picker's other objects when
engine NetworkPolicies are on (``obs.engine_policy``), applied when missing or changed, its
Deployment held back while the apiserver refuses it (fail closed), and never deleted (the
operator holds no ``delete`` on NetworkPolicies: it goes with the workload). The verdicts of the
policy: ``tests/tenancy/test_network_policy.py``."""

from __future__ import annotations

import dataclasses
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import Observation, plan
from sparkrun_operator.plan.workload.model import ObservedPickerObject, ObservedPool, Plan, PoolRefusal
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PickerSettings, render_picker, render_pool
from sparkrun_operator.render.networkpolicy import EnginePolicy
from sparkrun_operator.render.workload import Owner
from tests.unit.plan.pool_obs import NAME, NS, UID, first_plan_seen, new_observation, pool_hash, workload_spec

PICKER = f"{NAME}-epp"
GATEWAY = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}
POLICY = EnginePolicy(
    release_namespace="sparkrun-system", release_labels={"app": "sparkrun"}, gateway_from=(GATEWAY,)
)
KINDS = ["ServiceAccount", "RoleBinding", "Deployment", "Service", "NetworkPolicy"]


def _obs(spec: InferenceWorkloadSpec | None = None, **kwargs: Any) -> Observation:
    """The workload once its JobSets are observed (serving first: ``tests/unit/plan/pool_obs.py``)."""
    return first_plan_seen(new_observation(spec, **{"engine_policy": POLICY, **kwargs}))


def _docs(policy: EnginePolicy | None = POLICY) -> dict[str, dict[str, Any]]:
    owner = Owner(name=NAME, uid=UID)
    docs = render_picker(
        namespace=NS, workload=NAME, spec=None, settings=PickerSettings(), owner=owner, policy=policy
    )
    return {d["kind"]: d for d in docs}


def _current_pool() -> ObservedPool:
    doc = render_pool(namespace=NS, workload=NAME, spec=None, owner=Owner(name=NAME, uid=UID))
    return ObservedPool(name=NAME, uid="uid-pool", hash=pool_hash(doc), controller=UID)


def _observed(**hashes: str) -> tuple[ObservedPickerObject, ...]:
    """The picker's five objects as they exist, current unless ``hashes`` says otherwise."""
    return tuple(
        ObservedPickerObject(
            kind=kind,
            name=PICKER,
            uid=f"uid-{kind}",
            hash=hashes.get(kind, pool_hash(doc)),
            controller=UID,
            ready=kind == "Deployment",
        )
        for kind, doc in _docs().items()
    )


def _picker_applies(p: Plan) -> list[str]:
    return [d["kind"] for d in p.apply if d["metadata"]["name"] == PICKER]


def _deleted(p: Plan) -> list[tuple[str, str]]:
    return [(d.kind, d.name) for d in p.delete]


def test_with_engine_policies_the_picker_gets_its_policy() -> None:
    p = plan(_obs())
    assert _picker_applies(p) == KINDS
    (policy,) = [d for d in p.apply if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == PICKER]
    assert policy["metadata"]["name"] == PICKER
    assert policy["metadata"]["ownerReferences"][0]["uid"] == UID
    assert policy["metadata"]["labels"][keys.LABEL_INFERENCE_POOL] == NAME
    assert policy["spec"]["ingress"] == [{"from": [GATEWAY], "ports": [{"port": 9002, "protocol": "TCP"}]}]
    # the engines' own policy is another object (it selects the engine pods)
    engine = [
        d for d in p.apply if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == f"{NAME}-engine"
    ]
    assert len(engine) == 1


def test_a_current_policy_is_not_applied_again_and_a_changed_one_is() -> None:
    assert _picker_applies(plan(_obs(inference_pool=_current_pool(), picker=_observed()))) == []
    stale = plan(_obs(inference_pool=_current_pool(), picker=_observed(NetworkPolicy="stale")))
    assert _picker_applies(stale) == ["NetworkPolicy"]
    # new peers (metricsFrom): the picker's policy changes, nothing else of the picker does
    wider = dataclasses.replace(POLICY, metrics_from=(GATEWAY,))
    changed = plan(_obs(inference_pool=_current_pool(), picker=_observed(), engine_policy=wider))
    assert _picker_applies(changed) == ["NetworkPolicy"]


def test_a_refused_policy_holds_the_deployment_back() -> None:
    """Fail closed: while the apiserver refuses the picker's policy as rendered now, no picker
    pods are created or changed; the other objects go ahead, ``PoolAccepted`` says Refused."""
    docs = _docs()
    refusal = PoolRefusal(
        hash=pool_hash(docs["NetworkPolicy"]),
        message="NetworkPolicy.networking.k8s.io is invalid: spec.ingress[0].from[0]: bad",
        kind="NetworkPolicy",
        name=PICKER,
    )
    p = plan(_obs(inference_pool=_current_pool(), picker_refused=(refusal,)))
    assert _picker_applies(p) == ["ServiceAccount", "RoleBinding", "Service"]
    found = find_condition(p.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert (found.status, found.reason) == ("False", c.REASON_POOL_REFUSED)
    assert f"endpoint picker's NetworkPolicy {PICKER}" in found.message
    # an existing Deployment is not changed either
    held = plan(
        _obs(
            inference_pool=_current_pool(),
            picker=_observed(Deployment="old", NetworkPolicy="old"),
            picker_refused=(refusal,),
        )
    )
    assert _picker_applies(held) == []
    # rendered otherwise (the administrator fixed the peers): the policy, then the Deployment
    fixed = dataclasses.replace(POLICY, gateway_from=())
    again = plan(_obs(inference_pool=_current_pool(), picker_refused=(refusal,), engine_policy=fixed))
    assert _picker_applies(again) == KINDS


def test_without_engine_policies_no_picker_policy_is_planned_nor_deleted() -> None:
    """The operator may not delete NetworkPolicies (a compromised one could drop every
    tenant's): one made before stays until its workload goes (owner reference)."""
    p = plan(_obs(inference_pool=_current_pool(), picker=_observed(), engine_policy=None))
    assert _picker_applies(p) == []
    assert _deleted(p) == []
    assert "NetworkPolicy" not in _picker_applies(plan(_obs(engine_policy=None)))


def test_external_none_and_disabled_delete_the_picker_but_not_its_policy() -> None:
    """The picker's other objects go; its policy stays, selecting no pod (its pods went with
    the Deployment), until the workload goes; back to Managed, it is current again."""
    for pool in (
        {"endpointPicker": {"mode": "External", "service": "platform-epp"}},
        {"endpointPicker": {"mode": "None"}},
        {"enabled": False},
    ):
        p = plan(_obs(workload_spec(pool), inference_pool=_current_pool(), picker=_observed()))
        deleted = _deleted(p)
        assert ("Deployment", PICKER) in deleted, pool
        assert ("NetworkPolicy", PICKER) not in deleted, pool
        assert "NetworkPolicy" not in _picker_applies(p)
    left = tuple(o for o in _observed() if o.kind == "NetworkPolicy")
    back = plan(_obs(inference_pool=_current_pool(), picker=left))
    assert _picker_applies(back) == ["ServiceAccount", "RoleBinding", "Deployment", "Service"]


def test_a_foreign_policy_of_the_picker_name_is_taken() -> None:
    """A NetworkPolicy ``qwen-epp`` labelled as the picker's but not controlled by the workload:
    none of the picker's objects is applied (as for any picker object someone else holds)."""
    foreign = tuple(
        o if o.kind != "NetworkPolicy" else ObservedPickerObject(kind="NetworkPolicy", name=PICKER, uid="x")
        for o in _observed()
    )
    p = plan(_obs(inference_pool=_current_pool(), picker=foreign))
    assert _picker_applies(p) == []
    assert ("NetworkPolicy", PICKER) not in _deleted(p)
    found = find_condition(p.status.conditions, c.POOL_ACCEPTED)
    assert found is not None
    assert found.reason == c.REASON_POOL_NAME_TAKEN
    assert f"NetworkPolicy named {PICKER}" in found.message
