"""Stage 5c, conditions: Degraded, Sleeping, Progressing, Ready and the phase; then finalize.

:func:`report` completes the plan's status from what the earlier stages found;
:func:`finalize` folds in what the apiserver refused when the plan was carried out, so that the
planner stays the only author of the status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip, echo
from sparkrun_operator.api.meta import set_condition
from sparkrun_operator.api.workload import InferenceWorkloadStatus, ServedModel, WorkloadPhase
from sparkrun_operator.plan import names, served
from sparkrun_operator.plan.workload.gates import Block
from sparkrun_operator.plan.workload.model import (
    FAILED_BACKOFF,
    Conditions,
    Observation,
    ObservedJobSet,
    Plan,
    PoolRefusal,
    plural,
)
from sparkrun_operator.plan.workload.pool import refusal_condition
from sparkrun_operator.plan.workload.queue import WAITING_REASONS
from sparkrun_operator.plan.workload.rolloutgate import Verdict
from sparkrun_operator.plan.workload.sleep import Sleep

_FATAL = frozenset({c.REASON_INVALID_SPEC, c.REASON_RECIPE_INVALID})


@dataclass(frozen=True, kw_only=True)
class _Counts:
    """The JobSets by what the conditions ask of them."""

    counted: Sequence[ObservedJobSet]
    ready: Sequence[ObservedJobSet]
    current: Sequence[ObservedJobSet]
    old: Sequence[ObservedJobSet]
    failed: Sequence[ObservedJobSet]
    completed: Sequence[ObservedJobSet]
    restarting: Sequence[ObservedJobSet]


def report(
    *,
    obs: Observation,
    out: Plan,
    cond: Conditions,
    status: InferenceWorkloadStatus,
    counted: Sequence[ObservedJobSet],
    blocked: Block | None,
    sleep: Sleep,
    gate: Verdict | None = None,
) -> None:
    """Degraded, Sleeping, Progressing, Promoted (with a rollout gate), Ready and the phase into
    ``status``; ``out.status`` set."""
    revision = out.revision
    counts = _Counts(
        counted=counted,
        ready=[js for js in counted if js.leader_ready and not js.suspended],
        current=[js for js in counted if js.revision == revision] if revision else counted,
        old=[js for js in counted if revision is not None and js.revision != revision],
        failed=[js for js in obs.jobsets if js.terminal == "Failed"],
        completed=[js for js in obs.jobsets if js.terminal == "Completed"],
        restarting=[js for js in counted if js.restarts > 0 and not js.leader_ready and not js.suspended],
    )
    _degraded(cond, counts, status)
    _sleeping(cond, sleep)
    _routable(obs, cond, status.model)
    rolling = bool(counts.old) or any(js.deleting for js in obs.jobsets)
    _progressing(obs, out, cond, counts, blocked=blocked, rolling=rolling, status=status, gate=gate)
    # a held rollout is not updating: the old revision serves, nothing moves until the spec does
    moving = rolling and not (gate is not None and gate.held)
    status.phase = _ready(obs, cond, counts, blocked=blocked, rolling=moving, sleep=sleep)
    status.conditions = cond.finish()
    out.status = status
    if out.requeue_after is None and (counts.failed or counts.completed):
        out.later(FAILED_BACKOFF.total_seconds())


def _degraded(cond: Conditions, counts: _Counts, status: InferenceWorkloadStatus) -> None:
    if counts.failed:
        js = counts.failed[0]
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_FAILED,
            f"JobSet {js.name} failed after {js.restarts} group restarts"
            + (f": {js.terminal_message}" if js.terminal_message else "")
            + "; it is recreated",
        )
    elif counts.completed:
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_COMPLETED,
            f"the engine of JobSet {counts.completed[0].name} exited successfully, which a server should "
            "not; recreating",
        )
    elif counts.restarting:
        js = counts.restarting[0]
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_RESTARTING,
            f"replica {js.replica} restarted its group {plural(js.restarts, 'time')} and is not Ready yet"
            + (f"; last failure: {status.last_failure.reason}" if status.last_failure else ""),
        )
    else:
        cond.set(c.DEGRADED, False, c.REASON_AS_EXPECTED, "no group restarts pending")


def _sleeping(cond: Conditions, sleep: Sleep) -> None:
    leaders = len(sleep.ready_leaders)
    if sleep.expected:
        if leaders and sleep.asleep == leaders:
            cond.set(c.SLEEPING, True, c.REASON_ASLEEP, f"{plural(sleep.asleep, 'replica')} asleep")
        else:
            message = f"{sleep.asleep} of {leaders} ready replicas asleep"
            cond.set(c.SLEEPING, False, c.REASON_FALLING_ASLEEP, message)
    elif sleep.asleep:
        cond.set(c.SLEEPING, False, c.REASON_WAKING_UP, f"waking {plural(sleep.asleep, 'replica')}")
    else:
        cond.set(c.SLEEPING, False, c.REASON_AWAKE, "engines awake")


def _routable(obs: Observation, cond: Conditions, model: ServedModel | None) -> None:
    """``Routable``: whether the gateway routes every name the workload claims. A name outside
    its namespace's prefixes (the name policy) is withheld: ``NameNotAllowed``, first, as a
    rename (or an administrator) is the only fix; then plan/names.py: the oldest claim keeps a
    contested name (``NameConflict``). The workload's own names are the ones this pass
    resolved (``model``, about to be written), not a status the names index may still hold;
    the other workloads' claims come from the index."""
    if obs.holders is None:
        return
    claim = own_claim(obs, model)
    if claim is None:
        return
    conflicts = names.conflicts(claim, obs.holders)
    lost = {conflict.model for conflict in conflicts}
    kept = [n for n in claim.names if n not in lost]
    routed = (
        f"the gateway routes this workload as {', '.join(repr(n) for n in kept)} only"
        if kept
        else "the gateway does not route this workload"
    )
    if claim.withheld:
        refused = [n for n in (claim.served, *claim.aliases) if n in claim.withheld]
        message = (
            f"{', '.join(echo(n) for n in refused)} may not be claimed from namespace {obs.namespace}, "
            f"which may claim {obs.name_policy.describe(obs.namespace)}"
        )
        parts = [message, *(conflict.describe() for conflict in conflicts), routed]
        cond.set(c.ROUTABLE, False, c.REASON_NAME_NOT_ALLOWED, clip("; ".join(parts)))
        return
    if conflicts:
        message = "; ".join(conflict.describe() for conflict in conflicts) + f"; {routed}"
        cond.set(c.ROUTABLE, False, c.REASON_NAME_CONFLICT, message)
        return
    shown = ", ".join(repr(n) for n in claim.names)
    cond.set(c.ROUTABLE, True, c.REASON_NAMES_ACCEPTED, f"the gateway routes {shown}")


def own_claim(obs: Observation, model: ServedModel | None) -> names.Claim | None:
    """The names the workload claims once ``model`` is its ``status.model``: exactly what the
    names index will hold for it (``plan.served.of_workload``: the status of a recipe-based
    workload, the spec of one without a recipe; the names its namespace may not claim
    withheld)."""
    obj: dict[str, Any] = {"spec": obs.spec.to_wire()}
    if model is not None:
        obj["status"] = {"model": model.to_wire()}
    found = served.of_workload(obj)
    if found is None:
        return None
    return names.claim_for(
        namespace=obs.namespace, name=obs.name, created=obs.created, names=found, policy=obs.name_policy
    )


def _progressing(
    obs: Observation,
    out: Plan,
    cond: Conditions,
    counts: _Counts,
    *,
    blocked: Block | None,
    rolling: bool,
    status: InferenceWorkloadStatus,
    gate: Verdict | None,
) -> None:
    spec = obs.spec
    desired = spec.replicas
    current = len(counts.current)
    if gate is not None and gate.state != "Off":
        cond.set(c.PROMOTED, gate.state == "Promoted", gate.reason, gate.message)
    if blocked is not None and not counts.counted:
        cond.set(c.PROGRESSING, False, blocked[0], blocked[1])
    elif gate is not None and gate.held and rolling:
        cond.set(c.PROGRESSING, False, gate.reason, gate.message)
    elif rolling and out.revision is not None:
        cond.set(
            c.PROGRESSING,
            True,
            c.REASON_ROLLING_OUT,
            f"rolling out revision {out.revision}: {current} of {desired} replicas updated, "
            f"{plural(len(counts.old), 'old replica')} left (maxSurge {spec.rollout.max_surge})"
            + (f"; {gate.message}" if gate is not None and gate.state in ("Waiting", "Benchmarking") else ""),
        )
    elif current != desired or not out.idle:
        reason = c.REASON_CREATING if not counts.counted else c.REASON_SCALING
        cond.set(c.PROGRESSING, True, reason, f"{current} of {desired} replicas exist")
    elif spec.state == "Running" and len(counts.ready) < desired:
        cond.set(c.PROGRESSING, True, c.REASON_CREATING, f"{len(counts.ready)} of {desired} replicas Ready")
    else:
        cond.set(
            c.PROGRESSING,
            False,
            c.REASON_STABLE,
            f"{current} of {desired} replicas at revision {out.revision or status.revision}",
        )


def _ready(
    obs: Observation, cond: Conditions, counts: _Counts, *, blocked: Block | None, rolling: bool, sleep: Sleep
) -> WorkloadPhase:
    """Set ``Ready``; the phase."""
    spec = obs.spec
    desired = spec.replicas
    ready = len(counts.ready)
    if spec.state == "Stopped":
        cond.set(c.READY, False, c.REASON_STOPPED, "state is Stopped: JobSets suspended, no pods")
        return "Stopped"
    if blocked is not None and not ready:
        cond.set(c.READY, False, blocked[0], blocked[1])
        return "Failed" if blocked[0] in _FATAL else "Pending"
    held = _held_by_kueue(cond)
    if held is not None and not ready and not sleep.expected and desired:
        # Pending, not Starting: no JobSet of the workload runs until Kueue admits it
        cond.set(c.READY, False, held[0], held[1])
        return "Pending"
    if sleep.expected and sleep.ready_leaders:
        cond.set(
            c.READY,
            False,
            c.REASON_ASLEEP,
            f"state is Sleeping: {sleep.asleep} of {len(sleep.ready_leaders)} engines asleep; "
            "the gateway does not route",
        )
        return "Sleeping"
    if desired == 0:
        # zero replicas is not the user's Stopped: where the idle policy (or an autoscaler floor
        # of 0) may take it there, a request wakes it (ADR 0045; the gateway's rule, gateway/kube.py)
        if (spec.idle is not None and spec.idle.zero_after_seconds is not None) or (
            spec.autoscaling is not None and spec.autoscaling.min_replicas == 0
        ):
            message = "scaled to zero by the idle policy: a request wakes it"
            cond.set(c.READY, False, c.REASON_SCALED_TO_ZERO, message)
        else:
            cond.set(c.READY, False, c.REASON_NO_REPLICAS, "spec.replicas is 0")
        return "ScaledToZero"
    if ready >= desired and not sleep.expected:
        cond.set(c.READY, True, c.REASON_ALL_REPLICAS_READY, f"{ready} of {desired} replicas Ready")
        return "Updating" if rolling else "Running"
    message = f"{ready} of {desired} replicas Ready" + _not_ready_hint(cond)
    cond.set(c.READY, False, c.REASON_REPLICAS_NOT_READY, message)
    if counts.failed or counts.restarting:
        return "Degraded"
    if rolling:
        return "Updating"
    if ready:
        return "Degraded"
    return "Starting" if counts.counted else "Pending"


def _held_by_kueue(cond: Conditions) -> tuple[str, str] | None:
    """The reason and message of ``Admitted=False`` while JobSets wait on Kueue (this pass's)."""
    for item in cond.items:
        if item.type == c.ADMITTED and c.ADMITTED in cond.seen and item.status == "False":
            return (item.reason, item.message) if item.reason in WAITING_REASONS else None
    return None


def _not_ready_hint(cond: Conditions) -> str:
    for item in cond.items:
        if item.type == c.SCHEDULED and item.status == "False" and item.reason != c.REASON_STOPPED:
            return f"; {item.message}"
    return ""


def finalize(
    status: InferenceWorkloadStatus,
    *,
    refused: Sequence[str],
    generation: int,
    now: dt.datetime,
    pool_refused: PoolRefusal | None = None,
) -> InferenceWorkloadStatus:
    """The status to write once the plan was carried out: ``refused`` (the messages of actions the
    apiserver rejected, 422/403) make the workload Failed with the reason on ``Ready``;
    ``pool_refused`` (the apiserver refused the InferencePool or a picker's object, or its name
    is taken: kept out of ``refused``, the workload still serves) sets ``PoolAccepted`` False
    ``Refused`` or ``PoolNameTaken``."""
    if pool_refused is not None:
        status = status.model_copy(deep=True)
        reason, message = refusal_condition(pool_refused)
        set_condition(
            status.conditions,
            type=c.POOL_ACCEPTED,
            status="False",
            reason=reason,
            message=message,
            observed_generation=generation,
            now=now,
        )
    if not refused:
        return status
    final = status.model_copy(deep=True)
    set_condition(
        final.conditions,
        type=c.READY,
        status="False",
        reason=c.REASON_INVALID_SPEC,
        message=f"the apiserver refused a child object: {'; '.join(refused)}",
        observed_generation=generation,
        now=now,
    )
    final.phase = "Failed"
    return final
