"""The InferenceBenchmark planner: target, scenario Jobs, their pods' result lines -> children to
make and the status.

Pure (time is passed in) and the only author of ``InferenceBenchmark.status``. Phases:
``Pending`` (the target workload is not Ready yet; ``TargetReady=False`` says why; past
``targetReadySeconds`` the benchmark fails with reason ``TargetNotReady``), ``Running`` (one
scenario Job at a time, in the spec's order), ``Succeeded`` (every scenario has a result;
``comparison`` against the previous run) or ``Failed`` (the reason: the runner's, the Job's, or
``Timeout`` past ``timeoutSeconds``). A scenario's result is kept as soon as its Job succeeds, so
a killed pod reruns only its own scenario; ``sparkrun.dev/resume`` with a new value restarts a
Failed benchmark at its first unfinished scenario (a new attempt, new Jobs).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.benchmark import (
    InferenceBenchmarkSpec,
    InferenceBenchmarkStatus,
    Provenance,
    RawOutput,
    Scenario,
    ScenarioResult,
)
from sparkrun_operator.api.meta import Condition, set_condition
from sparkrun_operator.plan import benchcompare
from sparkrun_operator.plan.benchcompare import PreviousRun
from sparkrun_operator.render import benchmark as render

TARGET_READY: Final = "TargetReady"
COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
POLL_SECONDS: Final = 2.0


@dataclass(frozen=True, kw_only=True)
class ObservedTarget:
    """The server under test, as far as the benchmark cares."""

    key: str  # "workload/<name>" or the URL: what comparisons match on
    ready: bool
    reason: str = ""
    message: str = ""
    base_url: str | None = None
    model: str | None = None
    model_id: str | None = None
    provenance: Provenance | None = None
    #: The Ready ModelCache the target workload serves from: the runner's tokenizer comes from it.
    cache: render.BenchCache | None = None


@dataclass(frozen=True, kw_only=True)
class ObservedBenchJob:
    name: str
    uid: str
    scenario: str
    attempt: int
    succeeded: bool = False
    failed: bool = False
    reason: str = ""
    message: str = ""
    #: The runner's last JSON line (``result`` / ``error``) from the newest pod's log, if read.
    last_event: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class BenchmarkObservation:
    name: str
    namespace: str
    uid: str
    generation: int
    spec: InferenceBenchmarkSpec
    status: InferenceBenchmarkStatus
    now: dt.datetime
    target: ObservedTarget
    resume: str | None = None
    jobs: tuple[ObservedBenchJob, ...] = ()
    previous: tuple[PreviousRun, ...] = ()
    raw_outputs: Mapping[str, str] = field(default_factory=dict)
    options: render.BenchOptions = field(default_factory=render.BenchOptions)
    #: A registry profile (``@<registry>/<name>``): its arguments, or why it cannot be used
    #: (``(reason, message)``); both unset for any other profile (``plan/benchprofile.py``).
    profile_args: Mapping[str, Any] | None = None
    profile_error: tuple[str, str] | None = None


@dataclass(kw_only=True)
class BenchmarkPlan:
    status: InferenceBenchmarkStatus
    create: list[dict[str, Any]] = field(default_factory=list)
    delete_jobs: list[ObservedBenchJob] = field(default_factory=list)
    #: The raw-output ConfigMap to create or replace, when it gained a scenario.
    raw: dict[str, Any] | None = None
    requeue: float | None = None


def _owner(obs: BenchmarkObservation) -> render.BenchmarkOwner:
    return render.BenchmarkOwner(name=obs.name, namespace=obs.namespace, uid=obs.uid)


def _cond(
    obs: BenchmarkObservation, conds: list[Condition], type_: str, ok: bool, reason: str, msg: str
) -> None:
    set_condition(
        conds,
        type=type_,
        status="True" if ok else "False",
        reason=reason,
        message=msg,
        observed_generation=obs.generation,
        now=obs.now,
    )


def _finish(
    obs: BenchmarkObservation, out: BenchmarkPlan, conds: list[Condition], reason: str, msg: str
) -> None:
    """Failed, with the reason; running Jobs are removed."""
    out.status.phase = "Failed"
    out.status.finished_at = obs.now
    out.status.current_scenario = None
    _cond(obs, conds, FAILED, True, reason, msg)
    _cond(obs, conds, COMPLETE, False, reason, msg)
    out.delete_jobs += [j for j in obs.jobs if not (j.succeeded or j.failed)]


def _resume(obs: BenchmarkObservation, status: InferenceBenchmarkStatus, conds: list[Condition]) -> bool:
    """A new ``sparkrun.dev/resume`` value on a Failed benchmark: the next attempt."""
    if not obs.resume or obs.resume == status.resume_token:
        return False
    status.resume_token = obs.resume
    if status.phase != "Failed":
        return False
    status.attempt += 1
    status.phase = "Running"
    status.started_at = obs.now
    status.finished_at = None
    conds[:] = [c for c in conds if c.type not in (FAILED, COMPLETE)]
    return True


def _result_of(job: ObservedBenchJob, raw_ref: RawOutput | None, now: dt.datetime) -> ScenarioResult | None:
    event = job.last_event or {}
    if event.get("event") != "result" or not isinstance(event.get("result"), dict):
        return None
    wire = {k: v for k, v in event["result"].items() if k != "wallSeconds"}
    result = ScenarioResult.model_validate(
        {
            **wire,
            "name": job.scenario,
            "framework": event.get("framework"),
            "frameworkVersion": event.get("frameworkVersion"),
        }
    )
    result.raw_output = raw_ref
    result.finished_at = now
    return result


def _failure(job: ObservedBenchJob) -> tuple[str, str]:
    event = job.last_event or {}
    if event.get("event") == "error":
        return str(
            event.get("reason") or "BenchmarkFailed"
        ), f"scenario {job.scenario}: {event.get('message')}"
    reason = job.reason or "BenchmarkFailed"
    return reason, f"scenario {job.scenario}: the benchmark Job failed ({reason}: {job.message})".strip()


def _step(obs: BenchmarkObservation, out: BenchmarkPlan, conds: list[Condition], scenario: Scenario) -> bool:
    """Advance one scenario; True when it has a result now (go on to the next)."""
    status = out.status
    jobs = [j for j in obs.jobs if j.scenario == scenario.name and j.attempt == status.attempt]
    job = jobs[0] if jobs else None
    if job is None:
        if not (obs.target.base_url and obs.target.model):
            _finish(obs, out, conds, "TargetUnresolved", f"{obs.target.key}: no URL or model name to measure")
            return False
        if obs.profile_error is not None:
            _finish(obs, out, conds, *obs.profile_error)
            return False
        target = render.Target(
            base_url=obs.target.base_url,
            model=obs.target.model,
            model_id=obs.target.model_id,
            cache=obs.target.cache,
        )
        spent = (obs.now - status.started_at).total_seconds() if status.started_at else 0
        out.create.append(
            render.render_job(
                _owner(obs),
                spec=obs.spec,
                scenario=scenario,
                attempt=status.attempt,
                target=target,
                options=obs.options,
                deadline_seconds=int(obs.spec.timeout_seconds - spent),
                profile_args=obs.profile_args,
            )
        )
    elif job.succeeded:
        raw = dict(obs.raw_outputs)
        event = job.last_event or {}
        ref = None
        if isinstance(event.get("raw"), str):
            raw[scenario.name] = event["raw"]
            cm = render.raw_config_map(obs.name)
            ref = RawOutput(config_map=cm, key=scenario.name, bytes=len(event["raw"].encode()))
        result = _result_of(job, ref, obs.now)
        if result is None:
            _finish(
                obs, out, conds, "ResultUnreadable", f"scenario {scenario.name}: no result line in the log"
            )
            return False
        status.results.append(result)
        if raw != dict(obs.raw_outputs):
            out.raw = render.render_raw(_owner(obs), raw)
        return True
    elif job.failed:
        _finish(obs, out, conds, *_failure(job))
        return False
    status.phase = "Running"
    status.current_scenario = scenario.name
    _cond(obs, conds, COMPLETE, False, "Running", f"scenario {scenario.name} running")
    return False


def _succeed(obs: BenchmarkObservation, out: BenchmarkPlan, conds: list[Condition]) -> None:
    status = out.status
    status.phase = "Succeeded"
    status.finished_at = obs.now
    status.current_scenario = None
    base = benchcompare.baseline(
        obs.previous, me=obs.name, target=obs.target.key, framework=obs.spec.framework, before=obs.now
    )
    status.comparison = benchcompare.compare(status.results, base) if base else None
    done = f"{len(status.results)} scenario(s) measured"
    _cond(obs, conds, COMPLETE, True, "Succeeded", done)
    _cond(obs, conds, FAILED, False, "Succeeded", done)


def _target(obs: BenchmarkObservation, out: BenchmarkPlan, conds: list[Condition]) -> bool:
    """True when the target is Ready; else Pending, or Failed past targetReadySeconds."""
    status = out.status
    target = obs.target
    if target.ready:
        _cond(obs, conds, TARGET_READY, True, "Ready", target.message or "the target serves")
        if target.provenance is not None and not status.results:
            prov = target.provenance.model_copy()
            status.provenance = prov
        return True
    _cond(obs, conds, TARGET_READY, False, target.reason or "NotReady", target.message)
    waited = (obs.now - status.started_at).total_seconds() if status.started_at else 0
    if waited > obs.spec.target_ready_seconds:
        limit = obs.spec.target_ready_seconds
        msg = f"{target.key} not Ready after {limit}s: {target.reason}: {target.message}"
        _finish(obs, out, conds, "TargetNotReady", msg)
    else:
        status.phase = "Pending"
        _cond(obs, conds, COMPLETE, False, "TargetNotReady", f"waiting for {target.key}")
    return False


def plan(obs: BenchmarkObservation) -> BenchmarkPlan:
    """Jobs to create and delete, the raw-output ConfigMap, and the complete status."""
    status = obs.status.model_copy(deep=True)
    status.observed_generation = obs.generation
    out = BenchmarkPlan(status=status)
    conds: list[Condition] = [c.model_copy() for c in status.conditions]
    _resume(obs, status, conds)
    stale = [j for j in obs.jobs if j.attempt != status.attempt and not (j.succeeded or j.failed)]
    out.delete_jobs += stale
    if status.phase in ("Succeeded", "Failed"):
        out.delete_jobs += [j for j in obs.jobs if not (j.succeeded or j.failed) and j not in stale]
        status.conditions = conds
        return out
    status.started_at = status.started_at or obs.now
    status.phase = status.phase or "Pending"
    if (obs.now - status.started_at).total_seconds() > obs.spec.timeout_seconds:
        left = [s.name for s in obs.spec.scenarios if s.name not in {r.name for r in status.results}]
        msg = f"ran past timeoutSeconds={obs.spec.timeout_seconds}; unfinished: {', '.join(left)}"
        _finish(obs, out, conds, "Timeout", msg)
    elif _target(obs, out, conds):
        if status.provenance is not None:
            status.provenance.framework = obs.spec.framework
        done = {r.name for r in status.results}
        for scenario in obs.spec.scenarios:
            if scenario.name in done:
                continue
            if not _step(obs, out, conds, scenario):
                break
        else:
            _succeed(obs, out, conds)
        if status.results and status.provenance is not None:
            status.provenance.framework_version = status.results[-1].framework_version
    status.headline = benchcompare.headline(status.results, status.comparison)
    status.conditions = conds
    if status.phase in ("Pending", "Running"):
        out.requeue = POLL_SECONDS
    return out
