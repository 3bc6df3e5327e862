"""The autoscaler's and the idle policy's decisions (``plan/autoscale.py``), table by table: the
load windows, the tolerance band, the cooldown, the clamp, the idle clock and its two steps."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.autoscale import ReplicaLoad, Sample, advance_idle, decide, wanted
from sparkrun_operator.plan.enginemetrics import EngineLoad

NOW = dt.datetime(2026, 12, 6, 10, 0, 0, tzinfo=dt.UTC)


def spec(
    *, replicas: int = 1, state: str = "Running", sleep_mode: bool = False, **fields: Any
) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "replicas": replicas,
            "state": state,
            "engine": {"enableSleepMode": sleep_mode},
            **fields,
        }
    )


def auto(
    *,
    low: int = 1,
    high: int = 8,
    waiting: float | None = 2,
    kv: float | None = None,
    up: int = 4,
    down: int = 10,
    cooldown: int = 0,
    mode: str = "Operator",
) -> dict[str, Any]:
    target = {k: v for k, v in {"waitingPerReplica": waiting, "kvCacheUsage": kv}.items() if v is not None}
    return {
        "mode": mode,
        "minReplicas": low,
        "maxReplicas": high,
        "target": target,
        "scrapeIntervalSeconds": 1,
        "scaleUpWindowSeconds": up,
        "scaleDownWindowSeconds": down,
        "cooldownSeconds": cooldown,
    }


def load(
    waiting: float = 0, running: float = 0, kv: float | None = None, total: float | None = 0
) -> EngineLoad:
    return EngineLoad(waiting=waiting, running=running, kv_cache_usage=kv, requests_total=total)


def sample(
    ago: float, *loads: EngineLoad | None, replicas: int | None = None, state: str = "Running"
) -> Sample:
    return Sample(
        at=NOW - dt.timedelta(seconds=ago),
        state=state,  # type: ignore[arg-type]
        replicas=len(loads) if replicas is None else replicas,
        loads=tuple(ReplicaLoad(f"r-{i}", x) for i, x in enumerate(loads)),
    )


def series(seconds: int, *per_replica: EngineLoad | None) -> list[Sample]:
    """One sample a second from ``seconds`` ago to now, every one with the same loads."""
    return [sample(ago, *per_replica) for ago in range(seconds, -1, -1)]


# -- load ------------------------------------------------------------------------------------

UP_CASES: list[tuple[str, InferenceWorkloadSpec, list[Sample], int | None]] = [
    ("queue over target for the window: up to meet it", spec(autoscaling=auto()), series(5, load(10)), 5),
    (
        "the count meets the target at the window's lowest load",
        spec(autoscaling=auto()),
        [sample(5, load(10)), sample(3, load(6)), sample(1, load(12)), sample(0, load(9))],
        3,
    ),
    ("capped at maxReplicas", spec(autoscaling=auto(high=3)), series(5, load(40)), 3),
    ("window not covered by samples yet", spec(autoscaling=auto()), series(3, load(10)), None),
    (
        "one sample of the window at target: no scale-up",
        spec(autoscaling=auto()),
        [sample(5, load(10)), sample(2, load(2)), sample(0, load(10))],
        None,
    ),
    ("within the 10% tolerance band", spec(autoscaling=auto()), series(5, load(2.1)), None),
    (
        "KV-cache target: replicas scraped x mean use over the target",
        spec(replicas=2, autoscaling=auto(waiting=None, kv=0.5)),
        series(5, load(kv=0.9), load(kv=0.9)),
        4,
    ),
    (
        "both targets set: the larger count",
        spec(replicas=2, autoscaling=auto(waiting=2, kv=0.5)),
        series(5, load(6, kv=0.6), load(6, kv=0.6)),
        6,
    ),
    (
        "a replica of the last scale-up not scraped yet: no further scale-up",
        spec(replicas=3, autoscaling=auto()),
        series(5, load(20), load(20)),
        None,
    ),
    ("at maxReplicas already", spec(replicas=8, autoscaling=auto()), series(5, *[load(9)] * 8), None),
    ("External mode decides nothing", spec(autoscaling=auto(mode="External")), series(5, load(10)), None),
    (
        "state Sleeping: no load decision",
        spec(state="Sleeping", autoscaling=auto()),
        series(5, load(10)),
        None,
    ),
    (
        "scaled to zero: only a wake brings replicas",
        spec(replicas=0, autoscaling=auto(low=0)),
        series(5),
        None,
    ),
]


@pytest.mark.parametrize(("what", "workload", "samples", "to"), UP_CASES, ids=[c[0] for c in UP_CASES])
def test_scale_up(what: str, workload: InferenceWorkloadSpec, samples: list[Sample], to: int | None) -> None:
    decision = decide(spec=workload, samples=samples, idle_since=None, last_decision=None, now=NOW)
    if to is None:
        assert decision is None, decision
        return
    assert decision is not None
    assert (decision.action, decision.from_replicas, decision.to_replicas) == (
        "ScaleUp",
        workload.replicas,
        to,
    )
    assert decision.state == "Running"
    assert decision.figures.window_seconds == 4
    assert decision.figures.replicas_scraped == workload.replicas
    assert "load above target" in decision.message


DOWN_CASES: list[tuple[str, InferenceWorkloadSpec, list[Sample], int | None]] = [
    (
        "quiet for the window: down to the most it wanted",
        spec(replicas=4, autoscaling=auto()),
        [sample(11, *[load(1)] * 4), sample(6, *[load(1.2)] * 4), sample(0, *[load(0.5)] * 4)],
        3,
    ),
    (
        "never below max(1, minReplicas)",
        spec(replicas=4, autoscaling=auto(low=2)),
        series(11, *[load()] * 4),
        2,
    ),
    (
        "minReplicas 0: load alone keeps 1",
        spec(replicas=3, autoscaling=auto(low=0)),
        series(11, *[load()] * 3),
        1,
    ),
    ("window not covered", spec(replicas=4, autoscaling=auto()), series(8, *[load()] * 4), None),
    (
        "a replica did not answer in the window: no scale-down",
        spec(replicas=2, autoscaling=auto()),
        [*series(11, load(), load())[:-1], sample(0, load(), None)],
        None,
    ),
    (
        "a replica not Ready (not asked) in the window: no scale-down",
        spec(replicas=2, autoscaling=auto()),
        [*series(11, load(), load())[:-1], sample(0, load(), replicas=2)],
        None,
    ),
    (
        "one busy sample in the window: no scale-down",
        spec(replicas=2, autoscaling=auto()),
        [sample(11, load(), load()), sample(5, load(4), load(4)), sample(0, load(), load())],
        None,
    ),
]


@pytest.mark.parametrize(("what", "workload", "samples", "to"), DOWN_CASES, ids=[c[0] for c in DOWN_CASES])
def test_scale_down(
    what: str, workload: InferenceWorkloadSpec, samples: list[Sample], to: int | None
) -> None:
    decision = decide(spec=workload, samples=samples, idle_since=None, last_decision=None, now=NOW)
    if to is None:
        assert decision is None, decision
        return
    assert decision is not None
    assert (decision.action, decision.from_replicas, decision.to_replicas) == (
        "ScaleDown",
        workload.replicas,
        to,
    )
    assert decision.figures.window_seconds == 10
    assert "load below target" in decision.message


@pytest.mark.parametrize(("ago", "decides"), [(30, False), (59, False), (60, True), (300, True)])
def test_cooldown_since_the_last_decision(ago: int, decides: bool) -> None:
    workload = spec(autoscaling=auto(cooldown=60))
    last = NOW - dt.timedelta(seconds=ago)
    decision = decide(
        spec=workload, samples=series(5, load(10)), idle_since=None, last_decision=last, now=NOW
    )
    assert (decision is not None) is decides


@pytest.mark.parametrize(
    ("replicas", "low", "high", "action", "to"),
    [(12, 1, 8, "ScaleDown", 8), (1, 3, 8, "ScaleUp", 3), (3, 3, 8, None, None), (8, 1, 8, None, None)],
)
def test_spec_replicas_outside_the_bounds_is_clamped(
    replicas: int, low: int, high: int, action: str | None, to: int | None
) -> None:
    """Even within the cooldown, and with no load figures to go by (quiet or not)."""
    workload = spec(replicas=replicas, autoscaling=auto(low=low, high=high, cooldown=600))
    samples = [sample(0, *[load(2)] * replicas)]
    decision = decide(spec=workload, samples=samples, idle_since=None, last_decision=NOW, now=NOW)
    if action is None:
        assert decision is None
        return
    assert decision is not None
    assert (decision.action, decision.to_replicas) == (action, to)
    assert "outside" in decision.message


def test_stopped_is_never_touched() -> None:
    workload = spec(
        replicas=12,
        state="Stopped",
        sleep_mode=True,
        autoscaling=auto(low=0),
        idle={"sleepAfterSeconds": 10, "zeroAfterSeconds": 10},
    )
    idle = NOW - dt.timedelta(hours=1)
    assert decide(spec=workload, samples=series(11), idle_since=idle, last_decision=None, now=NOW) is None


def test_wanted_is_none_without_an_answer() -> None:
    workload = spec(autoscaling=auto())
    assert wanted(workload, sample(0, None)) is None
    assert wanted(workload, sample(0, load(9))) == 5


# -- idle ------------------------------------------------------------------------------------

IDLE = load()


def test_idle_clock() -> None:
    first = sample(10, IDLE)
    assert advance_idle(None, first, None) == first.at  # the first sample starts it
    carried = NOW - dt.timedelta(hours=2)
    assert advance_idle(None, first, carried) == carried  # the status' own, after a restart
    busy = sample(5, load(running=1))
    assert advance_idle(first, busy, first.at) is None
    quiet = sample(4, IDLE)
    assert advance_idle(busy, quiet, None) == busy.at  # since the last busy sample
    assert advance_idle(quiet, sample(3, IDLE), busy.at) == busy.at


@pytest.mark.parametrize(
    ("what", "previous", "current"),
    [
        ("a request waiting", sample(2, IDLE), sample(1, load(waiting=1))),
        ("the request counter moved", sample(2, load(total=5)), sample(1, load(total=6))),
        ("a replica did not answer", sample(2, IDLE, IDLE), sample(1, IDLE, None)),
        ("a replica not Ready", sample(2, IDLE), sample(1, IDLE, replicas=2)),
        ("no replica to ask (starting, or zero)", sample(2, IDLE), sample(1, replicas=1)),
        ("a replica new since the last sample", sample(2, IDLE), sample(1, IDLE, IDLE)),
        ("just woken from Sleeping", sample(2, IDLE, state="Sleeping"), sample(1, IDLE)),
    ],
)
def test_not_evidence_of_idleness(what: str, previous: Sample, current: Sample) -> None:
    assert advance_idle(previous, current, NOW - dt.timedelta(hours=1)) is None


def test_asleep_stays_idle() -> None:
    assert advance_idle(sample(2, IDLE), sample(1, IDLE, state="Sleeping"), NOW) == NOW


def idle_after(seconds: int) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


IDLE_CASES: list[tuple[str, InferenceWorkloadSpec, int, tuple[str, int, str, int | None] | None]] = [
    (
        "idle sleepAfterSeconds: Sleeping",
        spec(sleep_mode=True, idle={"sleepAfterSeconds": 60}),
        60,
        ("Sleep", 1, "Sleeping", None),
    ),
    ("not yet", spec(sleep_mode=True, idle={"sleepAfterSeconds": 60}), 59, None),
    (
        "asleep already: nothing until zeroAfterSeconds more",
        spec(state="Sleeping", sleep_mode=True, idle={"sleepAfterSeconds": 60, "zeroAfterSeconds": 60}),
        119,
        None,
    ),
    (
        "asleep and zeroAfterSeconds more: zero replicas, state Running",
        spec(
            replicas=2,
            state="Sleeping",
            sleep_mode=True,
            idle={"sleepAfterSeconds": 60, "zeroAfterSeconds": 60},
        ),
        120,
        ("ScaleToZero", 0, "Running", 2),
    ),
    (
        "zeroAfterSeconds alone",
        spec(replicas=3, idle={"zeroAfterSeconds": 30}),
        30,
        ("ScaleToZero", 0, "Running", 3),
    ),
    (
        "with autoscaling: a wake brings back max(1, minReplicas)",
        spec(replicas=3, autoscaling=auto(low=0), idle={"zeroAfterSeconds": 30}),
        31,
        ("ScaleToZero", 0, "Running", 1),
    ),
    (
        "External mode: sleep, never zero",
        spec(sleep_mode=True, autoscaling=auto(mode="External"), idle={"sleepAfterSeconds": 10}),
        3600,
        ("Sleep", 1, "Sleeping", None),
    ),
    ("busy (the clock is unset)", spec(idle={"zeroAfterSeconds": 30}), -1, None),
    ("zero replicas already", spec(replicas=0, idle={"zeroAfterSeconds": 30}), 3600, None),
]


@pytest.mark.parametrize(
    ("what", "workload", "idle_for", "expected"), IDLE_CASES, ids=[c[0] for c in IDLE_CASES]
)
def test_idle_policy(
    what: str,
    workload: InferenceWorkloadSpec,
    idle_for: int,
    expected: tuple[str, int, str, int | None] | None,
) -> None:
    since = None if idle_for < 0 else idle_after(idle_for)
    replicas = [IDLE] * workload.replicas
    decision = decide(
        spec=workload, samples=[sample(0, *replicas)], idle_since=since, last_decision=NOW, now=NOW
    )
    if expected is None:
        assert decision is None, decision
        return
    assert decision is not None
    assert (decision.action, decision.to_replicas, decision.state, decision.resume_replicas) == expected
    assert decision.from_replicas == workload.replicas
    assert decision.figures.window_seconds == idle_for
    assert f"idle for {idle_for} s" in decision.message
    record = decision.record(NOW)
    assert (record.action, record.time, record.figures) == (decision.action, NOW, decision.figures)
