"""Stage 2b, the rollout gate (``spec.rollout.gate``): benchmark the new revision before promoting it.

Derived again on every pass from what is observed (no progress stored): while a rollout is in
progress (a live JobSet at another revision), the first Ready replica of the new revision gets an
InferenceBenchmark (``render/gate.py``: owned by the workload, labelled with the revision and the
template's hash) aimed at its leader pod. Its outcome decides:

- no benchmark yet, or it is still running: ``Promoted=False`` (``WaitingForReplica`` /
  ``Benchmarking``); old replicas are not removed (the children stage asks :attr:`Verdict.promote`);
- Succeeded and every threshold met: ``Promoted=True`` (``ThresholdsMet``); the rollout goes on
  (the same revision is not measured again for its other replicas);
- Succeeded with a threshold missed, or Failed: ``Promoted=False`` (``ThresholdMissed`` naming
  each figure, its bound and by how much; ``BenchmarkFailed`` with the benchmark's reason): the
  rollout is held: the new revision's replicas in slots an old one still serves are removed,
  the old revision keeps serving. A new spec change (a new revision) or a changed template starts
  over; deleting the gate's benchmark measures the same revision again.

A rollback (a revision copying an older one's settings, ``plan/workload/history.py``) is gated
like any new revision unless ``gate.onRollback: Skip``: then it is promoted at once. So is any
revision while replicas still run recipe hooks that may no longer run (``hooktrust.py``).

Gate benchmarks of other revisions or templates are deleted. :func:`check` is the pure
comparison of results with thresholds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.benchmark import ScenarioResult
from sparkrun_operator.api.workload import ENGINE_PORT, GateThreshold, RolloutGate
from sparkrun_operator.plan import benchcompare
from sparkrun_operator.plan.workload.model import Delete, Event, Observation, Plan, leader_pod, slot_of
from sparkrun_operator.render import gate as render
from sparkrun_operator.render.workload import Owner

#: How soon to look again while the gate's benchmark runs (its status changes poke too).
RECHECK_SECONDS: Final = 10.0

State = Literal["Off", "Waiting", "Benchmarking", "Promoted", "Held"]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What the gate says about the serving revision (``Off``: no gate, or nothing to gate)."""

    state: State = "Off"
    reason: str = ""
    message: str = ""

    @property
    def promote(self) -> bool:
        """Old replicas may be removed once the new ones are Ready."""
        return self.state in ("Off", "Promoted")

    @property
    def held(self) -> bool:
        return self.state == "Held"


@dataclass(frozen=True, kw_only=True)
class Miss:
    """A threshold one scenario's result did not meet (``value`` None: not measured)."""

    scenario: str
    metric: str
    value: float | None
    bound: float
    kind: Literal["min", "max"]

    def describe(self) -> str:
        unit = " ms" if self.metric[-3:] in ("P50", "P90", "P99") else ""
        if self.value is None:
            bound = f"{self.kind} {self.bound:g}{unit}"
            return f"{self.metric} of scenario {self.scenario} was not measured ({bound})"
        by = abs(self.value - self.bound)
        sign = "+" if self.kind == "max" else "-"
        pct = f" ({sign}{by / self.bound:.0%})" if self.bound else ""
        side = "above the max" if self.kind == "max" else "below the min"
        return (
            f"{self.metric} of scenario {self.scenario} is {self.value:g}{unit}, {side} {self.bound:g}{unit} "
            f"by {by:.4g}{unit}{pct}"
        )


def value_of(result: ScenarioResult, metric: str) -> float | None:
    """The figure a threshold names, off one result."""
    if metric == "errors":
        return float(result.errors)
    if metric == "score":
        return result.score
    return benchcompare.figure(result, metric)


def check(
    results: Sequence[ScenarioResult], thresholds: Sequence[GateThreshold], scenarios: Sequence[str]
) -> list[Miss]:
    """Every threshold against every scenario it names (unset: each of ``scenarios``); the misses."""
    by_name = {r.name: r for r in results}
    misses: list[Miss] = []
    for threshold in thresholds:
        kind: Literal["min", "max"] = "max" if threshold.max is not None else "min"
        bound = threshold.max if threshold.max is not None else threshold.min
        if bound is None:
            continue  # admission (CEL) refuses it; an object from before the rule bounds nothing
        for scenario in [threshold.scenario] if threshold.scenario else scenarios:
            result = by_name.get(scenario)
            value = value_of(result, threshold.metric) if result is not None else None
            if value is None or (value > bound if kind == "max" else value < bound):
                misses.append(
                    Miss(scenario=scenario, metric=threshold.metric, value=value, bound=bound, kind=kind)
                )
    return misses


def plan_gate(obs: Observation, out: Plan) -> Verdict:
    """The gate's verdict on ``out.revision``; its benchmark to create, stale ones to delete."""
    gate = obs.spec.rollout.gate
    revision = out.revision
    if gate is None or revision is None or out.effective is None:
        return Verdict()
    template = render.template_hash(gate.benchmark)
    mine = None
    for found in obs.gates:
        if found.revision == revision and found.template == template and not found.deleting:
            mine = found
        elif not found.deleting:
            out.delete.append(
                Delete(
                    kind="InferenceBenchmark", name=found.name, uid=found.uid, reason="a stale rollout gate"
                )
            )
    if out.rollback_of is not None and gate.on_rollback == "Skip":
        # a rollback serves settings that served before: promoted without its benchmark
        return Verdict()
    if out.hooks_withdrawn:
        # replicas still run recipe hooks that may no longer run: a held rollout would keep them
        return Verdict()
    rolling = any(js.revision != revision and not js.deleting and js.terminal is None for js in obs.jobsets)
    if mine is None:
        if not rolling or obs.spec.state == "Stopped":
            return Verdict()
        return _start(obs, out, gate, revision)
    if mine.phase == "Succeeded":
        misses = check(mine.results, gate.thresholds, [s.name for s in gate.benchmark.scenarios])
        if misses:
            described = "; ".join(m.describe() for m in misses)
            return Verdict(
                state="Held",
                reason=c.REASON_THRESHOLD_MISSED,
                message=f"revision {revision} held (benchmark {mine.name}): {described}",
            )
        return Verdict(
            state="Promoted",
            reason=c.REASON_THRESHOLDS_MET,
            message=f"revision {revision} met {len(gate.thresholds)} threshold(s) (benchmark {mine.name})",
        )
    if mine.phase == "Failed":
        reason, message = mine.failure or ("Failed", "")
        return Verdict(
            state="Held",
            reason=c.REASON_BENCHMARK_FAILED,
            message=f"revision {revision} held: benchmark {mine.name} failed ({reason}: {message})",
        )
    out.later(RECHECK_SECONDS)
    return Verdict(
        state="Benchmarking",
        reason=c.REASON_BENCHMARKING,
        message=f"benchmark {mine.name} measures revision {revision} ({mine.phase or 'Pending'})",
    )


def _start(obs: Observation, out: Plan, gate: RolloutGate, revision: str) -> Verdict:
    """Create the benchmark against the first Ready replica of ``revision`` (or wait for one)."""
    assert out.effective is not None
    candidates = sorted(
        (
            js
            for js in obs.jobsets
            if js.revision == revision and js.leader_ready and not js.suspended and not js.deleting
        ),
        key=slot_of,
    )
    for js in candidates:
        leader = leader_pod(obs.pods, js.name)
        if leader is None or leader.ip is None or not leader.ready or obs.spec.state != "Running":
            continue
        doc = render.render_gate_benchmark(
            namespace=obs.namespace,
            owner=Owner(name=obs.name, uid=obs.uid),
            revision=revision,
            template=gate.benchmark,
            url=f"http://{leader.ip}:{ENGINE_PORT}",
            served_name=out.effective.served_name,
            model_id=out.effective.model,
            timeout_seconds=gate.timeout_seconds,
        )
        out.apply.append(doc)
        name = doc["metadata"]["name"]
        out.events.append(
            Event(
                type="Normal",
                reason="GateBenchmarkCreated",
                message=f"Created InferenceBenchmark {name} for revision {revision} (replica {js.replica})",
            )
        )
        return Verdict(
            state="Benchmarking",
            reason=c.REASON_BENCHMARKING,
            message=f"benchmark {name} measures revision {revision}",
        )
    return Verdict(
        state="Waiting",
        reason=c.REASON_WAITING_FOR_REPLICA,
        message=f"waiting for a Ready replica of revision {revision} to benchmark; old replicas stay",
    )
