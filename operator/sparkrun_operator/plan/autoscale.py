"""The autoscaler's and the idle policy's decisions (ADR 0045). Pure: samples in, a decision out.

The operator scrapes every Ready leader of a workload each ``scrapeIntervalSeconds``
(``controllers/autoscale.py``); each scrape of the whole workload is a :class:`Sample`. From a
window of them, the workload's spec, the idle clock and the time of the last decision,
:func:`decide` returns at most one :class:`Decision`: the ``spec.replicas`` and ``spec.state``
to write, and why.

Load (``spec.autoscaling.mode: Operator``, ``state: Running``, ``replicas >= 1``): a sample wants
``max`` over the set targets of ``ceil(sum waiting / waitingPerReplica)`` and
``ceil(sum kv-cache use / kvCacheUsage)`` replicas; a target whose per-replica figure is within
:data:`TOLERANCE` of it wants the current count (the HPA's tolerance band). Up when every sample
since the start of ``scaleUpWindowSeconds`` wants more (the window covered by samples), to the
least any of them wants, and not while replicas of the previous scale-up are not all scraped;
down when every sample of ``scaleDownWindowSeconds`` wants fewer, to the most any wants, never
below ``max(1, minReplicas)``; nothing within ``cooldownSeconds`` of the last decision of any
kind (a load decision, ``Sleep``, ``ScaleToZero`` or the clamp back into range: the caller passes
the newest of ``status.scaling.lastDecision`` and its own last write).

Idle (``spec.idle``): the idle clock (:func:`advance_idle`) starts at the last sample with a
request running or waiting, or a request counter that moved; a sample in which a replica did
not answer (or none is there to ask) is never evidence of idleness. Idle ``sleepAfterSeconds``:
``state: Sleeping``; then ``zeroAfterSeconds`` more: zero replicas with ``state: Running`` (not
the user's ``Stopped``). The user's ``state: Stopped`` is never touched.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sparkrun_operator.api.scaling import MAX_REPLICAS, ScalingAction, ScalingDecision, ScalingFigures
from sparkrun_operator.api.workload import InferenceWorkloadSpec, WorkloadState
from sparkrun_operator.plan.enginemetrics import EngineLoad

#: A per-replica figure within this fraction of its target wants no change (the HPA's default).
TOLERANCE: Final = 0.1


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica's scrape: its JobSet and what its leader's ``/metrics`` said (``None``: no
    answer, or not an engine's)."""

    replica: str
    load: EngineLoad | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """One scrape of every Ready leader of a workload, and the spec it was taken under."""

    at: dt.datetime
    #: ``spec.state`` and ``spec.replicas`` when it was taken.
    state: WorkloadState
    replicas: int
    loads: tuple[ReplicaLoad, ...] = ()

    @property
    def answered(self) -> tuple[EngineLoad, ...]:
        return tuple(r.load for r in self.loads if r.load is not None)

    @property
    def complete(self) -> bool:
        """Every replica of ``spec.replicas`` (at least one) was Ready, asked and answered."""
        answered = sum(1 for r in self.loads if r.load is not None)
        return answered == len(self.loads) and answered >= max(1, self.replicas)

    def figures(self, window_seconds: int | None = None) -> ScalingFigures:
        """The sample's load, summed over the replicas that answered."""
        loads = self.answered
        kv = [x.kv_cache_usage for x in loads if x.kv_cache_usage is not None]
        return ScalingFigures(
            replicas_scraped=len(loads),
            waiting=sum(x.waiting for x in loads),
            running=sum(x.running for x in loads),
            kv_cache_usage=min(1.0, sum(kv) / len(kv)) if kv else None,
            window_seconds=window_seconds,
        )


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to write to the spec, and why (an Event and ``status.scaling.lastDecision``)."""

    action: ScalingAction
    from_replicas: int
    to_replicas: int
    state: WorkloadState
    message: str
    figures: ScalingFigures
    #: Set with ``ScaleToZero``: the replicas a wake brings back.
    resume_replicas: int | None = None

    def record(self, at: dt.datetime) -> ScalingDecision:
        """The decision as ``status.scaling.lastDecision`` holds it."""
        return ScalingDecision(
            action=self.action,
            time=at,
            from_replicas=self.from_replicas,
            to_replicas=self.to_replicas,
            message=self.message[:1024],
            figures=self.figures,
        )


# -- the idle clock --------------------------------------------------------------------------


def idle_evidence(previous: Sample | None, sample: Sample) -> bool:
    """Whether ``sample`` shows the workload idle: every replica answered, none has a request
    running or waiting, no request counter moved since ``previous`` (a replica new since then
    is not evidence), and the workload was not just woken (``Sleeping`` -> ``Running``)."""
    if not sample.complete:
        return False
    if any(r.load is not None and (r.load.running > 0 or r.load.waiting > 0) for r in sample.loads):
        return False
    if previous is None:
        return True
    if previous.state != "Running" and sample.state == "Running":
        return False
    before = {r.replica: r.load.requests_total for r in previous.loads if r.load is not None}
    for r in sample.loads:
        if r.replica not in before:
            return False
        if r.load is not None and r.load.requests_total != before[r.replica]:
            return False
    return True


def advance_idle(
    previous: Sample | None, sample: Sample, idle_since: dt.datetime | None
) -> dt.datetime | None:
    """The idle clock after ``sample``: ``None`` while busy (or unknown); else since when idle,
    the last busy sample's time (``previous`` was busy), kept from before (``idle_since``: also
    the status' own when the loop starts), or ``sample``'s time (the first sample seen)."""
    if not idle_evidence(previous, sample):
        return None
    if idle_since is not None:
        return idle_since
    return previous.at if previous is not None else sample.at


# -- decisions -------------------------------------------------------------------------------


def floor_of(spec: InferenceWorkloadSpec) -> int:
    """The fewest replicas load alone leaves: ``max(1, minReplicas)``."""
    return max(1, spec.autoscaling.min_replicas) if spec.autoscaling is not None else 1


def decide(
    *,
    spec: InferenceWorkloadSpec,
    samples: Sequence[Sample],
    idle_since: dt.datetime | None,
    last_decision: dt.datetime | None,
    now: dt.datetime,
) -> Decision | None:
    """The one decision to write now, if any (clamp, then idle, then load; see the module)."""
    if spec.state == "Stopped" or not samples:
        return None
    latest = samples[-1]
    return (
        _clamp(spec, latest)
        or _idle(spec, latest, idle_since, now)
        or _load(spec, samples, last_decision, now)
    )


def _clamp(spec: InferenceWorkloadSpec, latest: Sample) -> Decision | None:
    auto = spec.autoscaling
    if auto is None or auto.mode != "Operator" or spec.replicas < 1:
        return None
    low, high = floor_of(spec), min(auto.max_replicas, MAX_REPLICAS)
    if low <= spec.replicas <= high:
        return None
    to = min(max(spec.replicas, low), high)
    bound = f"maxReplicas {high}" if spec.replicas > high else f"max(1, minReplicas) {low}"
    return Decision(
        action="ScaleUp" if to > spec.replicas else "ScaleDown",
        from_replicas=spec.replicas,
        to_replicas=to,
        state=spec.state,
        message=f"spec.replicas {spec.replicas} is outside [{low}, {high}]: set to {bound}",
        figures=latest.figures(),
    )


def _idle(
    spec: InferenceWorkloadSpec, latest: Sample, idle_since: dt.datetime | None, now: dt.datetime
) -> Decision | None:
    idle = spec.idle
    if idle is None or idle_since is None or spec.replicas < 1:
        return None
    idle_for = (now - idle_since).total_seconds()
    figures = latest.figures(window_seconds=max(0, int(idle_for)))
    sleep_after = idle.sleep_after_seconds
    zero_after = idle.zero_after_seconds
    auto = spec.autoscaling
    may_zero = auto is None or (auto.mode == "Operator" and auto.min_replicas == 0)
    if zero_after is not None and may_zero and idle_for >= (sleep_after or 0) + zero_after:
        resume = spec.replicas if auto is None else max(1, auto.min_replicas)
        return Decision(
            action="ScaleToZero",
            from_replicas=spec.replicas,
            to_replicas=0,
            state="Running",
            message=f"idle for {int(idle_for)} s (no request running, waiting or finished): zero "
            f"replicas; a request brings back {resume}",
            figures=figures,
            resume_replicas=resume,
        )
    if (
        sleep_after is not None
        and spec.state == "Running"
        and spec.engine.enable_sleep_mode
        and idle_for >= sleep_after
    ):
        return Decision(
            action="Sleep",
            from_replicas=spec.replicas,
            to_replicas=spec.replicas,
            state="Sleeping",
            message=f"idle for {int(idle_for)} s (no request running, waiting or finished): sleeping "
            "(vLLM sleep level 1)",
            figures=figures,
        )
    return None


def wanted(spec: InferenceWorkloadSpec, sample: Sample) -> int | None:
    """The replicas ``sample``'s load wants (``None``: nothing answered, or no target set); a
    target within :data:`TOLERANCE` of its per-replica figure wants ``spec.replicas``."""
    auto = spec.autoscaling
    loads = sample.answered
    if auto is None or auto.target is None or not loads:
        return None
    proposals: list[int] = []
    target = auto.target
    if target.waiting_per_replica is not None:
        total = sum(x.waiting for x in loads)
        proposals.append(_proposal(total, len(loads), target.waiting_per_replica, spec.replicas))
    kv = [x.kv_cache_usage for x in loads if x.kv_cache_usage is not None]
    if target.kv_cache_usage is not None and kv:
        total = sum(kv) * len(loads) / len(kv)  # replicas scraped x mean use
        proposals.append(_proposal(total, len(loads), target.kv_cache_usage, spec.replicas))
    return max(proposals) if proposals else None


def _proposal(total: float, scraped: int, per_replica: float, current: int) -> int:
    needed = total / per_replica  # NB: infinite for a huge queue over a tiny target
    if abs(needed / scraped - 1.0) <= TOLERANCE:
        return current
    if not needed < MAX_REPLICAS:
        return MAX_REPLICAS
    return math.ceil(needed - 1e-9)


def _window(samples: Sequence[Sample], seconds: int, now: dt.datetime) -> Sequence[Sample] | None:
    """The samples since the start of the window: from the newest one taken at or before it on
    (so the load held for the whole window); ``None`` when the samples do not reach back that far."""
    start = now - dt.timedelta(seconds=seconds)
    first = None
    for index, sample in enumerate(samples):
        if sample.at <= start:
            first = index
    return None if first is None else samples[first:]


def _load(
    spec: InferenceWorkloadSpec,
    samples: Sequence[Sample],
    last_decision: dt.datetime | None,
    now: dt.datetime,
) -> Decision | None:
    auto = spec.autoscaling
    if auto is None or auto.mode != "Operator" or spec.state != "Running" or spec.replicas < 1:
        return None
    if last_decision is not None and (now - last_decision).total_seconds() < auto.cooldown_seconds:
        return None
    current, latest = spec.replicas, samples[-1]
    up = _window(samples, auto.scale_up_window_seconds, now)
    if up is not None and current < auto.max_replicas and len(latest.answered) >= current:
        wants = [(wanted(spec, s), s) for s in up]
        if all(w is not None and w > current for w, _ in wants):
            count, basis = min(((w or 0, s) for w, s in wants), key=lambda pair: pair[0])
            to = min(count, auto.max_replicas)
            return _scaled("ScaleUp", spec, to, basis, auto.scale_up_window_seconds, "above")
    down = _window(samples, auto.scale_down_window_seconds, now)
    if down is not None and current > floor_of(spec) and all(s.complete for s in down):
        wants = [(wanted(spec, s), s) for s in down]
        if all(w is not None and w < current for w, _ in wants):
            count, basis = max(((w or 0, s) for w, s in wants), key=lambda pair: pair[0])
            to = max(count, floor_of(spec))
            return _scaled("ScaleDown", spec, to, basis, auto.scale_down_window_seconds, "below")
    return None


def _scaled(
    action: ScalingAction, spec: InferenceWorkloadSpec, to: int, basis: Sample, window: int, side: str
) -> Decision:
    figures = basis.figures(window_seconds=window)
    target = spec.autoscaling.target if spec.autoscaling is not None else None
    goals = []
    if target is not None and target.waiting_per_replica is not None:
        goals.append(f"{target.waiting_per_replica:g} waiting")
    if target is not None and target.kv_cache_usage is not None:
        goals.append(f"{target.kv_cache_usage:.0%} KV cache")
    kv = "n/a" if figures.kv_cache_usage is None else f"{figures.kv_cache_usage:.0%}"
    edge = "lowest" if action == "ScaleUp" else "highest"
    return Decision(
        action=action,
        from_replicas=spec.replicas,
        to_replicas=to,
        state=spec.state,
        message=f"load {side} target ({' and '.join(goals)} per replica) for {window} s: {spec.replicas} -> "
        f"{to} replicas (the window's {edge} load: {figures.waiting:g} waiting, {figures.running:g} "
        f"running, KV cache {kv} over {figures.replicas_scraped} replicas)",
        figures=figures,
    )
