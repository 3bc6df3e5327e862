"""Stage 6, ``status.scaling``: the autoscaler's decisions, the idle clock and the measured wakes.

The planner alone writes the status (ADR 0045), so what the autoscaler decided and saw reaches
``status.scaling`` through ``obs.scaling`` (``None``: nothing in this process yet, the previous
values are carried). The planner measures every wake itself, from what it sees: a wake begins
when the previous status shows a resting workload (its ``Ready`` condition's reason: asleep,
at zero replicas, or stopped), the spec now asks it to serve (``state: Running`` and
``replicas > 0``) and it does not serve yet; it ends once a pass finds it serving: at least one
replica Ready (``status.readyReplicas >= 1``, the moment the gateway sends requests again, not
when the slowest replica is up, which may never be when not every replica fits) and no engine
still waking (the ``Sleeping`` condition's ``WakingUp`` reason). The seconds in between (by
``obs.clock``, the planner's sub-second clock), the last
:data:`~sparkrun_operator.api.scaling.WAKE_HISTORY` per kind, are what the gateway's
``Retry-After`` is computed from. Each measured wake also posts one ``Normal`` Event, reason
``Woke`` ("woke from Zero in 10.2 s"), in the pass that ends it.

Reading the previous ``Ready`` reason, not ``status.phase``, also covers a status an older
operator wrote (``NoReplicasDesired`` with phase ``Stopped`` for zero replicas, and no
``status.scaling`` at all). A workload that never had autoscaling, an idle policy or a wake
keeps ``status.scaling`` unset, so the status of a plain workload does not change.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.meta import Condition, find_condition
from sparkrun_operator.api.scaling import (
    WAKE_HISTORY,
    ScalingDecision,
    ScalingStatus,
    WakeFrom,
    WakeInProgress,
    WakeSeconds,
)
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload.model import Event, Observation, Plan, ScalingView

#: ``status.scaling.lastDecision.message``: characters (the field's own bound).
DECISION_MESSAGE_MAX: Final = 1024


#: The reason of the Event posted when a wake is measured.
REASON_WOKE: Final = "Woke"


def track(obs: Observation, status: InferenceWorkloadStatus, out: Plan) -> None:
    """Set ``status.scaling`` from the previous status, ``obs.scaling`` and what this pass wrote
    into ``status`` (its conditions and ``readyReplicas``: the stages before run first); a wake
    that ends in this pass posts a ``Woke`` Event on ``out``."""
    status.scaling, measured = compose(obs, status)
    if measured is not None:
        kind, seconds = measured
        out.events.append(
            Event(type="Normal", reason=REASON_WOKE, message=f"woke from {kind} in {seconds} s")
        )


def compose(
    obs: Observation, status: InferenceWorkloadStatus
) -> tuple[ScalingStatus | None, tuple[WakeFrom, float] | None]:
    """The new ``status.scaling`` (``None`` while the workload never had autoscaling, an idle
    policy or a wake) and the wake this pass measured, if any (kind, seconds)."""
    previous = obs.status.scaling
    view = obs.scaling
    serving = _serving(status)
    wake, measured = _wake(obs, previous.wake if previous else None, serving=serving)
    spec = obs.spec
    if previous is None and wake is None and spec.autoscaling is None and spec.idle is None:
        return None, measured
    base = previous or ScalingStatus()
    history = _history(base.wake_seconds, measured)
    resume = base.resume_replicas
    if view is not None and view.resume_replicas is not None:
        resume = view.resume_replicas
    if serving and _asks_to_serve(spec):
        resume = None
    scaling = ScalingStatus(
        last_decision=_decision(base.last_decision, view),
        idle_since=_idle_since(base.idle_since, view),
        resume_replicas=resume,
        wake=wake,
        wake_seconds=history,
    )
    return scaling, measured


def resting_from(conditions: list[Condition]) -> WakeFrom | None:
    """Which rest a status' ``Ready`` condition shows (``None``: not resting)."""
    ready = find_condition(conditions, c.READY)
    if ready is None or ready.status == "True":
        return None
    if ready.reason == c.REASON_ASLEEP:
        return "Sleeping"
    if ready.reason in (c.REASON_SCALED_TO_ZERO, c.REASON_NO_REPLICAS):
        return "Zero"
    if ready.reason == c.REASON_STOPPED:
        return "Stopped"
    return None


def _asks_to_serve(spec: InferenceWorkloadSpec) -> bool:
    return spec.state == "Running" and spec.replicas > 0


def _serving(status: InferenceWorkloadStatus) -> bool:
    """At least one replica Ready (the gateway answers from the first) with no engine still
    waking (a leader asleep is Ready to Kubernetes)."""
    sleeping = find_condition(status.conditions, c.SLEEPING)
    waking = sleeping is not None and sleeping.reason == c.REASON_WAKING_UP
    return status.ready_replicas >= 1 and not waking


def _wake(
    obs: Observation, current: WakeInProgress | None, *, serving: bool
) -> tuple[WakeInProgress | None, tuple[WakeFrom, float] | None]:
    """The wake under way after this pass, and the one that ended in it (kind, seconds)."""
    if not _asks_to_serve(obs.spec):
        return None, None  # back to rest: an abandoned wake is not a measurement
    if current is None:
        began = resting_from(obs.status.conditions)
        if began is None or serving:
            # serving already: it never went down (replicas back before the last ones went),
            # or the status read is older than the last write: nothing to measure
            return None, None
        current = WakeInProgress.model_validate({"from": began, "since": obs.clock or obs.now})
    if not serving:
        return current, None
    seconds = max(0.0, round(((obs.clock or obs.now) - current.since).total_seconds(), 1))
    return None, (current.from_, seconds)


def _history(previous: WakeSeconds, measured: tuple[WakeFrom, float] | None) -> WakeSeconds:
    """``previous`` with ``measured`` appended; each list the newest :data:`WAKE_HISTORY`."""
    lists = {
        "Sleeping": list(previous.sleeping),
        "Zero": list(previous.zero),
        "Stopped": list(previous.stopped),
    }
    if measured is not None:
        lists[measured[0]].append(measured[1])
    return WakeSeconds(
        sleeping=lists["Sleeping"][-WAKE_HISTORY:],
        zero=lists["Zero"][-WAKE_HISTORY:],
        stopped=lists["Stopped"][-WAKE_HISTORY:],
    )


def _decision(previous: ScalingDecision | None, view: ScalingView | None) -> ScalingDecision | None:
    """The autoscaler's decision when newer than the status' own; its message bounded."""
    chosen = previous
    news = view.decision if view is not None else None
    if news is not None and (previous is None or news.time > previous.time):
        chosen = news
    if chosen is None or len(chosen.message) <= DECISION_MESSAGE_MAX:
        return chosen
    return chosen.model_copy(update={"message": clip(chosen.message, DECISION_MESSAGE_MAX)})


def _idle_since(previous: dt.datetime | None, view: ScalingView | None) -> dt.datetime | None:
    """What the autoscaler saw once it has scraped in this process; else the status' own."""
    if view is not None and view.scraped:
        return view.idle_since
    return previous
