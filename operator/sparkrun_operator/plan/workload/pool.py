"""Stage 3b, the InferencePool (issue 30): the workload's pool and its Managed endpoint picker,
the ``PoolAccepted`` condition and ``status.inferencePool``.

With pools managed (``obs.pool_settings``: ``--inference-pools=auto`` and the CRD served) and
``spec.inferencePool.enabled``:

- the pool ``<workload>`` is applied when missing or its hash differs, never when an object of
  that name exists that the workload does not control (``PoolNameTaken``), nor again after the
  apiserver refused it as rendered now (``Refused``, until the spec changes);
- mode ``Managed``: each picker object ``<workload>-epp`` likewise, unless the apiserver refused
  it as rendered now; when one of their names is another object's (seen, or remembered from a
  ``NameTaken`` of the controller: an unlabelled object the indexes cannot see), none is applied
  and those the workload controls are deleted, and so is the pool (``PoolNameTaken``: the picker
  would run with, or be reached through, someone else's object, and the pool would send a
  gateway's every request to it); ``External`` and ``None``: the picker objects the workload
  controls are deleted;
- with engine NetworkPolicies (``obs.engine_policy``) the picker has a fifth object, its
  NetworkPolicy, and its Deployment is not applied while the apiserver refuses that policy as
  rendered now (fail closed: no picker pods that no policy guards); without them the policy is
  not rendered. It is never deleted (the operator holds no ``delete`` on NetworkPolicies, as
  for the engines' policy): it goes with the workload, and selects no pod when the picker is
  gone;
- ``PoolAccepted``: True when a gateway accepted the pool and resolved its references, Unknown
  (``NoParent``) while none lists it, else False with the gateway's reason.

Disabled (the spec, ``--inference-pools=off``) or the CRD not served: the pool and picker objects
the workload controls are deleted and ``PoolAccepted`` says why. ``obs.pool_settings`` unset:
nothing (a caller that does not observe pools).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.inferencepool import (
    MAX_POOL_PARENTS,
    POOL_KIND,
    InferencePoolSpec,
    InferencePoolStatus,
    PickerStatus,
    PoolParentStatus,
)
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.plan.workload.model import (
    Conditions,
    Delete,
    Observation,
    ObservedPickerObject,
    ObservedPool,
    Plan,
    PoolRefusal,
)
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import picker_name, render_picker, render_pool
from sparkrun_operator.render.workload import Owner

#: The longest gateway reason used as the condition's reason (else it goes in the message).
REASON_MAX = 64
_REASON_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_,:")
_CRD_HINT = (
    "the apiserver does not serve inferencepools.inference.networking.k8s.io/v1: install the Gateway API "
    "Inference Extension's CRDs (v1.5.0 or later; the chart's inferencePool.installCRD: true), then "
    "restart the operator"
)


def plan_pool(obs: Observation, out: Plan, cond: Conditions, status: InferenceWorkloadStatus) -> None:
    """The pool's and picker's actions into ``out``, ``PoolAccepted`` into ``cond`` and
    ``status.inferencePool`` into ``status``. Serving first: while this pass makes a serving
    revision or JobSets, the pool and picker objects wait for the next pass (which those
    JobSets' events bring), so that a burst of new workloads gets its engines scheduled before
    five more writes each (docs/performance.md, issue 30)."""
    first = len(out.apply)
    _plan_pool(obs, out, cond, status)
    if out.revisions or any(d["kind"] == "JobSet" for d in out.apply[:first]):
        out.apply[first:] = [d for d in out.apply[first:] if not _pool_object(d)]


def _pool_object(doc: dict[str, Any]) -> bool:
    return keys.LABEL_INFERENCE_POOL in (doc["metadata"].get("labels") or {})


def _plan_pool(obs: Observation, out: Plan, cond: Conditions, status: InferenceWorkloadStatus) -> None:
    settings = obs.pool_settings
    if settings is None:
        return
    spec = obs.spec.inference_pool or InferencePoolSpec()
    if not settings.manages or not spec.enabled:
        _remove_all(obs, out)
        if settings.mode == "off":
            cond.set(
                c.POOL_ACCEPTED, False, c.REASON_POOL_DISABLED, "the operator runs with --inference-pools=off"
            )
        elif not settings.served:
            cond.set(c.POOL_ACCEPTED, False, c.REASON_POOL_CRD_NOT_INSTALLED, _CRD_HINT)
        else:
            cond.set(c.POOL_ACCEPTED, False, c.REASON_POOL_DISABLED, "spec.inferencePool.enabled is false")
        return
    owner = Owner(name=obs.name, uid=obs.uid)
    pool = obs.inference_pool
    if pool is not None and pool.controller != obs.uid:
        _remove_picker(obs, out, keep=())
        cond.set(c.POOL_ACCEPTED, False, c.REASON_POOL_NAME_TAKEN, _taken(POOL_KIND, obs.name))
        return
    desired_pool = render_pool(namespace=obs.namespace, workload=obs.name, spec=spec, owner=owner)
    pool_hash = desired_pool["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH]
    refused = obs.pool_refused if obs.pool_refused and obs.pool_refused.hash == pool_hash else None
    desired = render_picker(
        namespace=obs.namespace,
        workload=obs.name,
        spec=spec,
        settings=settings.picker,
        owner=owner,
        policy=obs.engine_policy,
    )
    first = len(out.apply)
    trouble = _plan_picker(obs, out, desired)
    if trouble is not None and trouble.taken:
        # NB: the pool would name someone else's Service as its endpoint picker, and a gateway
        # sends its picker every request's headers and body: no pool until the name is free
        _remove_pool(obs, out)
    elif refused is None and (pool is None or (pool.hash != pool_hash and not pool.deleting)):
        out.apply.insert(first, desired_pool)  # NB: the pool before its picker
    status.inference_pool = _status(obs, spec, pool)
    said = refused or trouble
    if said is not None:
        cond.set(c.POOL_ACCEPTED, False, *refusal_condition(said))
    else:
        _accepted(obs, cond, pool)


def refusal_condition(refusal: PoolRefusal) -> tuple[str, str]:
    """``PoolAccepted``'s reason and message for a refused or taken pool or picker object (the
    planner's, and ``finalize``'s for what the pass that met it found)."""
    if refusal.taken:
        return c.REASON_POOL_NAME_TAKEN, _taken(refusal.kind, refusal.name or "?")
    what = POOL_KIND if refusal.kind == POOL_KIND else f"endpoint picker's {refusal.kind} {refusal.name}"
    return c.REASON_POOL_REFUSED, f"the apiserver refused the {what}: {clip(refusal.message)}"


def _taken(kind: str, name: str) -> str:
    return (
        f"a {kind} named {name} exists that this workload does not control: the operator leaves it "
        "alone; delete or rename it, or set spec.inferencePool.enabled: false"
    )


def _ours(obs: Observation, item: ObservedPickerObject | ObservedPool) -> bool:
    return item.controller == obs.uid


def _remove_all(obs: Observation, out: Plan) -> None:
    _remove_pool(obs, out)
    _remove_picker(obs, out, keep=())


def _remove_pool(obs: Observation, out: Plan) -> None:
    pool = obs.inference_pool
    if pool is not None and _ours(obs, pool) and not pool.deleting:
        out.delete.append(
            Delete(kind=POOL_KIND, name=pool.name, uid=pool.uid, reason="inference pool withdrawn", pool=True)
        )


def _remove_picker(obs: Observation, out: Plan, *, keep: Sequence[tuple[str, str]]) -> None:
    """Delete the picker objects the workload controls, except ``keep`` (kind, name) and its
    NetworkPolicy: the operator may not delete NetworkPolicies (a compromised one could drop
    every tenant's); it goes with the workload, and selects no pod once the picker is gone."""
    for item in obs.picker:
        if (
            _ours(obs, item)
            and not item.deleting
            and item.kind != "NetworkPolicy"
            and (item.kind, item.name) not in keep
        ):
            out.delete.append(
                Delete(
                    kind=item.kind,
                    name=item.name,
                    uid=item.uid,
                    reason="endpoint picker not managed",
                    pool=True,
                )
            )


def _plan_picker(obs: Observation, out: Plan, desired: list[dict[str, Any]]) -> PoolRefusal | None:
    """Apply each desired picker object when missing or changed, except one the apiserver
    refused as rendered now; none when a name is taken (then the workload's own go). What
    ``PoolAccepted`` reports of the picker, if anything."""
    wanted = [(d["kind"], d["metadata"]["name"]) for d in desired]
    found = {(item.kind, item.name): item for item in obs.picker}
    seen = next(
        (item for key in wanted if (item := found.get(key)) is not None and not _ours(obs, item)), None
    )
    remembered = [r for r in obs.picker_refused if (r.kind, r.name) in wanted]
    taken = (
        PoolRefusal(hash="", message="", kind=seen.kind, name=seen.name, taken=True)
        if seen is not None
        else next((r for r in remembered if r.taken), None)
    )
    if taken is not None:
        _remove_picker(obs, out, keep=())
        return taken
    _remove_picker(obs, out, keep=wanted)
    refusals = {
        doc["kind"]: next((r for r in remembered if r.kind == doc["kind"] and r.hash == _hash(doc)), None)
        for doc in desired
    }
    trouble = next((r for r in refusals.values() if r is not None), None)
    for doc in desired:
        item = found.get((doc["kind"], doc["metadata"]["name"]))
        if refusals[doc["kind"]] is not None:
            continue
        if doc["kind"] == "Deployment" and refusals.get("NetworkPolicy") is not None:
            # NB: fail closed: no picker pods (new or changed) without the policy that guards them
            continue
        if item is None or (item.hash != _hash(doc) and not item.deleting):
            out.apply.append(doc)
    return trouble


def _hash(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH])


def _status(obs: Observation, spec: InferencePoolSpec, pool: ObservedPool | None) -> InferencePoolStatus:
    picker = spec.endpoint_picker
    ready: bool | None = None
    service = picker.service
    if picker.mode == "Managed":
        service = picker_name(obs.name)
        ready = any(
            item.kind == "Deployment" and item.ready and _ours(obs, item) and not item.deleting
            for item in obs.picker
        )
    parents = pool.parents[:MAX_POOL_PARENTS] if pool is not None else ()
    return InferencePoolStatus(
        name=obs.name,
        endpoint_picker=PickerStatus(mode=picker.mode, service=service, ready=ready),
        parents=[
            PoolParentStatus(
                parent=p.parent,
                accepted=p.accepted,
                resolved_refs=p.resolved_refs,
                reason=clip(p.reason, REASON_MAX) or None,
            )
            for p in parents
        ],
    )


def _accepted(obs: Observation, cond: Conditions, pool: ObservedPool | None) -> None:
    parents = pool.parents if pool is not None else ()
    good = next((p for p in parents if p.accepts), None)
    if good is not None:
        cond.set(
            c.POOL_ACCEPTED, True, c.REASON_POOL_ACCEPTED, f"{good.parent} accepted InferencePool {obs.name}"
        )
        return
    if not parents:
        state = "is being created" if pool is None else "exists"
        cond.set(
            c.POOL_ACCEPTED,
            None,
            c.REASON_NO_PARENT,
            f"InferencePool {obs.name} {state}; no gateway lists it yet: an HTTPRoute of an "
            "Inference-Extension gateway must reference it (backendRefs: group inference.networking.k8s.io, "
            f"kind InferencePool, name {obs.name})",
        )
        return
    first = parents[0]
    reason = first.reason if _valid_reason(first.reason) else c.REASON_POOL_NOT_ACCEPTED
    detail = f" ({clip(first.reason, REASON_MAX)})" if reason != first.reason and first.reason else ""
    text = f": {first.message}" if first.message else ""
    cond.set(
        c.POOL_ACCEPTED,
        False,
        reason,
        f"{first.parent} does not accept InferencePool {obs.name} (Accepted {first.accepted}, "
        f"ResolvedRefs {first.resolved_refs}){detail}{text}",
    )


def _valid_reason(reason: str) -> bool:
    """A condition reason: a letter, then letters, digits, ``_``, ``,`` and ``:``, ending in a
    letter, digit or ``_`` (checked by character, no pattern over a gateway's text)."""
    if not reason or len(reason) > REASON_MAX or not reason[0].isascii() or not reason[0].isalpha():
        return False
    return all(ch in _REASON_CHARS for ch in reason) and reason[-1] not in ",:"
