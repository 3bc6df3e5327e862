"""The InferenceBenchmark planner (pure): one Job at a time in the spec's order, results kept
per scenario, the timeout, a target that is not Ready, resume, and the comparison's ratios."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec, InferenceBenchmarkStatus, ScenarioResult
from sparkrun_operator.plan import benchcompare
from sparkrun_operator.plan.benchcompare import PreviousRun
from sparkrun_operator.plan.benchmark import BenchmarkObservation, ObservedBenchJob, ObservedTarget, plan

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SPEC = InferenceBenchmarkSpec.model_validate(
    {
        "target": {"workloadRef": {"name": "w"}},
        "scenarios": [{"name": "a"}, {"name": "b", "concurrency": 4}],
        "timeoutSeconds": 600,
        "targetReadySeconds": 60,
    }
)
READY = ObservedTarget(key="workload/w", ready=True, base_url="http://w:8000", model="w", model_id="org/w")


def _result_event(ttft: float, tps: float) -> dict[str, Any]:
    return {
        "event": "result",
        "framework": "llama-benchy",
        "frameworkVersion": "0.4.0",
        "raw": "output",
        "result": {
            "requests": 4,
            "errors": 0,
            "ttft": {"p50": ttft, "p90": ttft, "p99": ttft},
            "outputTokensPerSecond": tps,
            "wallSeconds": 1.0,
        },
    }


def _obs(status: InferenceBenchmarkStatus | None = None, **over: Any) -> BenchmarkObservation:
    fields: dict[str, Any] = {
        "name": "bench",
        "namespace": "ns",
        "uid": "u1",
        "generation": 1,
        "spec": SPEC,
        "status": status or InferenceBenchmarkStatus(),
        "now": T0,
        "target": READY,
    }
    fields.update(over)
    return BenchmarkObservation(**fields)


def test_first_pass_creates_the_first_scenario_job_only() -> None:
    p = plan(_obs())
    assert [d["metadata"]["labels"]["sparkrun.dev/benchmark-scenario"] for d in p.create] == ["a"]
    assert p.status.phase == "Running"
    assert p.status.current_scenario == "a"
    assert p.status.started_at == T0
    assert p.requeue is not None


def test_a_finished_scenario_is_kept_and_the_next_one_starts() -> None:
    job = ObservedBenchJob(
        name="j-a", uid="1", scenario="a", attempt=0, succeeded=True, last_event=_result_event(50, 100)
    )
    p = plan(_obs(jobs=(job,)))
    assert [r.name for r in p.status.results] == ["a"]
    assert p.status.results[0].framework_version == "0.4.0"
    assert p.status.results[0].raw_output is not None
    assert p.raw is not None
    assert p.raw["data"] == {"a": "output"}
    assert [d["metadata"]["labels"]["sparkrun.dev/benchmark-scenario"] for d in p.create] == ["b"]


def test_a_failed_job_fails_the_benchmark_with_the_runners_reason() -> None:
    event = {"event": "error", "reason": "NothingMeasured", "message": "no request"}
    job = ObservedBenchJob(name="j-a", uid="1", scenario="a", attempt=0, failed=True, last_event=event)
    p = plan(_obs(jobs=(job,)))
    assert p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type == "Failed")
    assert (failed.reason, failed.message) == ("NothingMeasured", "scenario a: no request")


def test_timeout_and_target_not_ready() -> None:
    started = InferenceBenchmarkStatus(phase="Running", started_at=T0)
    running = ObservedBenchJob(name="j-a", uid="1", scenario="a", attempt=0)
    late = plan(_obs(started, now=T0 + dt.timedelta(seconds=601), jobs=(running,)))
    assert late.status.phase == "Failed"
    assert next(c for c in late.status.conditions if c.type == "Failed").reason == "Timeout"
    assert late.delete_jobs == [running]
    down = ObservedTarget(key="workload/w", ready=False, reason="Starting", message="0 of 1 Ready")
    waiting = plan(_obs(started, target=down, now=T0 + dt.timedelta(seconds=30)))
    assert waiting.status.phase == "Pending"
    assert not waiting.create
    given_up = plan(_obs(started, target=down, now=T0 + dt.timedelta(seconds=61)))
    cond = next(c for c in given_up.status.conditions if c.type == "Failed")
    assert cond.reason == "TargetNotReady"
    assert "Starting: 0 of 1 Ready" in cond.message


def test_resume_starts_a_new_attempt_at_the_first_unfinished_scenario() -> None:
    done = ScenarioResult(name="a", requests=1, errors=0)
    failed = InferenceBenchmarkStatus(phase="Failed", started_at=T0, results=[done])
    old = ObservedBenchJob(name="j-b", uid="2", scenario="b", attempt=0, failed=True)
    same = plan(_obs(failed, jobs=(old,)))
    assert same.status.phase == "Failed"
    assert not same.create
    resumed = plan(_obs(failed, jobs=(old,), resume="r1", now=T0 + dt.timedelta(hours=1)))
    assert resumed.status.attempt == 1
    assert resumed.status.resume_token == "r1"
    assert [d["metadata"]["labels"]["sparkrun.dev/benchmark-scenario"] for d in resumed.create] == ["b"]
    assert resumed.create[0]["metadata"]["labels"]["sparkrun.dev/benchmark-attempt"] == "1"
    assert [r.name for r in resumed.status.results] == ["a"]


def test_comparison_against_the_latest_previous_run_of_the_same_target_and_framework() -> None:
    mine = [
        ScenarioResult.model_validate(
            {
                "name": "a",
                "requests": 4,
                "errors": 0,
                "ttft": {"p50": 150, "p90": 150, "p99": 150},
                "outputTokensPerSecond": 50,
            }
        )
    ]
    base = [
        ScenarioResult.model_validate(
            {
                "name": "a",
                "requests": 4,
                "errors": 0,
                "ttft": {"p50": 50, "p90": 50, "p99": 60},
                "outputTokensPerSecond": 100,
            }
        )
    ]
    runs = [
        PreviousRun(
            name="old", target="workload/w", framework="llama-benchy", finished_at=T0, results=tuple(base)
        ),
        PreviousRun(
            name="other",
            target="workload/x",
            framework="llama-benchy",
            finished_at=T0 + dt.timedelta(1),
            results=tuple(base),
        ),
        PreviousRun(
            name="tools",
            target="workload/w",
            framework="tool-eval-bench",
            finished_at=T0 + dt.timedelta(1),
            results=tuple(base),
        ),
    ]
    chosen = benchcompare.baseline(
        runs, me="new", target="workload/w", framework="llama-benchy", before=T0 + dt.timedelta(2)
    )
    assert chosen is not None
    assert chosen.name == "old"
    comparison = benchcompare.compare(mine, chosen)
    ratios = comparison.scenarios[0].ratios
    assert ratios["ttftP50"] == 3.0
    assert ratios["ttftP99"] == 2.5
    assert ratios["outputTokensPerSecond"] == 0.5
    headline = benchcompare.headline(mine, comparison)
    assert headline is not None
    assert headline.ttft_ratio == 3.0
    assert headline.ttft_p50_ms == 150
