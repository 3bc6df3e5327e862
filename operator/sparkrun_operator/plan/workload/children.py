"""Stage 3, children: the Service, the engines' NetworkPolicy (with ``--engine-network-policy``)
and one JobSet per replica slot at the serving revision.

Rollouts replace JobSets at other revisions (surge first with ``maxSurge > 0``, delete first
with ``maxSurge == 0``, never more than ``replicas + maxSurge`` JobSets counting ones still
being deleted); scale down deletes the highest indices first; terminal JobSets are recreated;
``Stopped`` suspends (or, under Kueue, deletes). While a gate blocks, nothing new is created.
With a rollout gate (``plan/workload/rolloutgate.py``) old JobSets stay until the verdict
promotes the new revision; a held one removes the new revision's JobSets from slots an old one
still serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.plan.workload.model import (
    FAILED_BACKOFF,
    Delete,
    Event,
    Observation,
    ObservedJobSet,
    Plan,
    SetSuspend,
    plural,
    slot_of,
)
from sparkrun_operator.plan.workload.rolloutgate import Verdict
from sparkrun_operator.render import names
from sparkrun_operator.render.networkpolicy import ANNOTATION_POLICY_HASH, render_engine_policy
from sparkrun_operator.render.workload import Owner, ServingInputs, render_jobset, render_service


def plan_children(
    obs: Observation, out: Plan, inputs: ServingInputs | None, verdict: Verdict | None = None
) -> None:
    """Service and JobSet actions into ``out`` (``verdict``: the rollout gate's)."""
    owner = Owner(name=obs.name, uid=obs.uid)
    desired_service = render_service(namespace=obs.namespace, workload=obs.name, owner=owner)
    if _service_differs(obs.service, desired_service):
        out.apply.append(desired_service)
    _plan_network_policy(obs, out, owner)
    live = [js for js in obs.jobsets if not js.deleting]
    if inputs is not None and out.revision is not None:
        _plan_jobsets(obs=obs, out=out, inputs=inputs, owner=owner, live=live, verdict=verdict or Verdict())
    else:
        # Hold: keep what runs, create nothing new. Terminal and surplus JobSets still go.
        _cleanup_only(obs=obs, out=out, live=live)


def _plan_network_policy(obs: Observation, out: Plan, owner: Owner) -> None:
    """The engines' NetworkPolicy (``--engine-network-policy``), when what it was rendered from
    changed or it is missing. Without the flag the operator makes none (and leaves any it made)."""
    if obs.engine_policy is None:
        return
    desired = render_engine_policy(
        namespace=obs.namespace, workload=obs.name, policy=obs.engine_policy, owner=owner.reference()
    )
    if obs.network_policy != desired["metadata"]["annotations"][ANNOTATION_POLICY_HASH]:
        out.apply.append(desired)


def _service_differs(observed: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    if observed is None:
        return True
    spec = observed.get("spec") or {}
    want = desired["spec"]
    ports = [
        {k: p.get(k) for k in ("name", "port", "targetPort", "protocol")} for p in spec.get("ports") or []
    ]
    return bool(
        spec.get("selector") != want["selector"]
        or ports != want["ports"]
        or bool(spec.get("publishNotReadyAddresses")) != want["publishNotReadyAddresses"]
    )


@dataclass
class _Rollout:
    """One pass over the replica slots: what it deleted, the JobSet budget, slots unavailable."""

    obs: Observation
    out: Plan
    inputs: ServingInputs
    owner: Owner
    revision: str
    queued: bool
    verdict: Verdict
    deleted: set[str] = field(default_factory=set)
    budget: int = 0
    unavailable: int = 0
    allowed_unavailable: int = 0

    @property
    def stopped(self) -> bool:
        return self.obs.spec.state == "Stopped"

    @property
    def want_suspend(self) -> bool:
        # Kueue owns spec.suspend of queued JobSets: create them suspended, let Kueue admit them.
        return self.stopped or self.queued

    def delete(self, js: ObservedJobSet, reason: str) -> None:
        if js.name not in self.deleted:
            self.deleted.add(js.name)
            self.out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason=reason))
            self.out.events.append(
                Event(type="Normal", reason="DeletedJobSet", message=f"Deleted JobSet {js.name}: {reason}")
            )


def _plan_jobsets(
    *,
    obs: Observation,
    out: Plan,
    inputs: ServingInputs,
    owner: Owner,
    live: list[ObservedJobSet],
    verdict: Verdict,
) -> None:
    spec = obs.spec
    assert out.revision is not None
    queued = inputs.queue_name is not None
    run = _Rollout(
        obs=obs, out=out, inputs=inputs, owner=owner, revision=out.revision, queued=queued, verdict=verdict
    )
    if run.stopped and queued:
        # Kueue would re-admit a suspended JobSet: delete them on Stop.
        for js in sorted(live, key=slot_of, reverse=True):
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="stopped (queued)"))
        return
    _recreate_terminal(run, live)
    # surplus replicas and strays: highest index first
    for js in sorted(live, key=slot_of, reverse=True):
        slot = js.replica
        if slot is None or slot >= spec.replicas or slot < 0:
            run.delete(js, f"scaled down to {plural(spec.replicas, 'replica')}")

    active = [js for js in live if js.name not in run.deleted]
    total = len([js for js in obs.jobsets if js.name not in run.deleted])  # deleting ones still hold GPUs
    run.budget = spec.replicas + spec.rollout.max_surge - total
    by_slot: dict[int, list[ObservedJobSet]] = {}
    for js in active:
        by_slot.setdefault(slot_of(js), []).append(js)
    deleting_slots = {slot_of(js) for js in obs.jobsets if js.deleting or js.name in run.deleted}
    ready_slots = {
        slot for slot, items in by_slot.items() if any(js.leader_ready and not js.suspended for js in items)
    }
    run.unavailable = spec.replicas - len([s for s in ready_slots if 0 <= s < spec.replicas])
    run.allowed_unavailable = max(spec.rollout.max_unavailable, 1 if spec.rollout.max_surge == 0 else 0)
    for slot in range(spec.replicas):
        items = by_slot.get(slot, [])
        current = next((js for js in items if js.revision == run.revision), None)
        olds = _gated_olds(run, [js for js in items if js.revision != run.revision])
        if olds and run.verdict.held:
            if current is not None:
                run.delete(current, f"rollout held: {run.verdict.reason}; the old revision keeps serving")
        elif current is None:
            if _replace_first(run, olds):
                continue  # the old ones go first; the survivors keep their state until then
            _missing_slot(run, slot, olds, terminating=slot in deleting_slots)
        else:
            _current_slot(run, current, olds)
        # old JobSets kept during a rollout follow the state too
        for old in olds:
            if old.name in run.deleted or queued or old.terminal is not None:
                continue
            if old.suspended != run.want_suspend:
                out.suspend.append(SetSuspend(name=old.name, uid=old.uid, suspend=run.want_suspend))


def _recreate_terminal(run: _Rollout, live: list[ObservedJobSet]) -> None:
    """Terminal JobSets go (a Failed one after a pause, so that it can be inspected)."""
    now = run.obs.now
    for js in live:
        if js.terminal == "Completed":
            run.delete(js, "the engine exited; recreating the replica")
        elif js.terminal == "Failed":
            since = now - (js.terminal_time or now)
            if since >= FAILED_BACKOFF:
                run.delete(js, "failed after exhausting maxRestarts; recreating the replica")
            else:
                run.out.later((FAILED_BACKOFF - since).total_seconds())


def _replace_first(run: _Rollout, olds: list[ObservedJobSet]) -> bool:
    """``maxSurge 0``: delete old JobSets of a slot before its new one; whether that applies."""
    if not olds or run.stopped or run.obs.spec.rollout.max_surge != 0:
        return False
    # delete first: no spare GPUs for a new group next to the old one
    for old in olds:
        old_ready = old.leader_ready and not old.suspended
        if old_ready and run.unavailable >= run.allowed_unavailable:
            continue
        run.delete(old, f"rolling out revision {run.revision} (maxSurge 0: old replica goes first)")
        if old_ready:
            run.unavailable += 1
    return True


def _missing_slot(run: _Rollout, slot: int, olds: list[ObservedJobSet], *, terminating: bool) -> None:
    """No JobSet at the serving revision in ``slot`` (nor a delete-first): create the new one."""
    max_surge = run.obs.spec.rollout.max_surge
    if olds and run.stopped:
        for old in olds:
            run.delete(old, f"revision {run.revision} replaces it (stopped: nothing to keep serving)")
            run.budget += 1
    if terminating and not olds and max_surge == 0:
        return  # the old group is still terminating and may hold the GPUs
    if run.budget <= 0:
        return
    run.budget -= 1
    obs = run.obs
    run.out.apply.append(
        render_jobset(
            namespace=obs.namespace,
            workload=obs.name,
            inputs=run.inputs,
            replica=slot,
            suspend=run.want_suspend,
            owner=run.owner,
            options=obs.options,
            revision=run.revision,
        )
    )
    name = names.jobset_name(workload=obs.name, replica=slot, revision=run.revision)
    run.out.events.append(
        Event(
            type="Normal", reason="CreatedJobSet", message=f"Created JobSet {name} (revision {run.revision})"
        )
    )


def _current_slot(run: _Rollout, current: ObservedJobSet, olds: list[ObservedJobSet]) -> None:
    """The slot runs the serving revision: old ones go once it is Ready (and, with a rollout gate,
    promoted); it follows the state."""
    if olds and ((current.leader_ready and run.verdict.promote) or run.stopped):
        for old in olds:
            run.delete(old, f"replaced by {current.name} (revision {run.revision}), which is Ready")
    want = run.want_suspend
    if not run.queued and current.suspended != want and current.terminal is None:
        run.out.suspend.append(SetSuspend(name=current.name, uid=current.uid, suspend=want))
        verb = "Suspended" if want else "Resumed"
        run.out.events.append(
            Event(type="Normal", reason=f"{verb}JobSet", message=f"{verb} JobSet {current.name}")
        )


def _gated_olds(run: _Rollout, olds: list[ObservedJobSet]) -> list[ObservedJobSet]:
    """A slot keeps one old JobSet: the oldest Ready one (else the oldest); intermediate
    revisions (a spec change while one was surging, being benchmarked or held) go, so that the
    newest revision gets the surge budget instead of waiting for a JobSet that is no longer
    wanted. ``maxSurge 0`` and ``Stopped`` replace the old ones their own way."""
    if len(olds) < 2 or run.stopped or run.obs.spec.rollout.max_surge == 0:
        return olds
    ranked = sorted(olds, key=lambda js: (not js.leader_ready, js.created or run.obs.now, js.name))
    for old in ranked[1:]:
        run.delete(old, f"superseded by revision {run.revision} before it replaced the old replica")
    return ranked[:1]


def _cleanup_only(*, obs: Observation, out: Plan, live: list[ObservedJobSet]) -> None:
    """While blocked: keep serving JobSets, remove terminal and surplus ones, follow the state."""
    replicas = obs.spec.replicas
    stopped = obs.spec.state == "Stopped"
    for js in sorted(live, key=slot_of, reverse=True):
        slot = js.replica
        if slot is None or slot >= replicas or slot < 0:
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="scaled down"))
        elif js.terminal == "Completed" or (
            js.terminal == "Failed" and obs.now - (js.terminal_time or obs.now) >= FAILED_BACKOFF
        ):
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="terminal"))
        elif js.terminal is None and js.suspended != stopped:
            out.suspend.append(SetSuspend(name=js.name, uid=js.uid, suspend=stopped))
