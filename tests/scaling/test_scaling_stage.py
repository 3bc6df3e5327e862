"""The planner's ``status.scaling`` stage (``plan/workload/scaling.py``) and the ``ScaledToZero``
phase, through the whole pipeline (``plan()``), each pass fed the status the previous one wrote
as the apiserver stores it (camelCase JSON, read back).

Tested: a wake from each resting kind (Sleeping, zero replicas, Stopped) begun, carried while
the workload is not serving yet, measured (at the first Ready replica) and recorded, with one
``Woke`` Event per wake; the bounded history (oldest dropped);
a wake abandoned when the spec rests again; the autoscaler's news (newer decision, idle clock
only once scraped, resume replicas cleared once serving); carry-over with ``obs.scaling`` None
(an operator restart); a wake begun on a status an older operator wrote (no ``status.scaling``,
phase ``Stopped`` with ``NoReplicasDesired``); plain workloads keep ``status.scaling`` unset;
and that the status write (``controllers/status.py``) clears a wake that ended.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import Condition, find_condition
from sparkrun_operator.api.scaling import WAKE_HISTORY, ScalingDecision, ScalingStatus
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers.status import status_patch
from sparkrun_operator.plan.workload import (
    Observation,
    ObservedJobSet,
    ObservedPod,
    Plan,
    plan,
    status_only,
)
from sparkrun_operator.plan.workload.model import ScalingView
from sparkrun_operator.plan.workload.scaling import DECISION_MESSAGE_MAX, resting_from
from sparkrun_operator.render import keys

T0 = dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.UTC)
NAME = "qwen"
SERVICE = {
    "spec": {
        "selector": {keys.LABEL_WORKLOAD: NAME, keys.LABEL_ROLE: "leader"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
        "publishNotReadyAddresses": False,
    }
}
IDLE = {"idle": {"zeroAfterSeconds": 600}}
SLEEPY = {"engine": {"enableSleepMode": True}, "idle": {"sleepAfterSeconds": 60, "zeroAfterSeconds": 600}}
AUTO = {"autoscaling": {"minReplicas": 0, "maxReplicas": 4, "target": {"waitingPerReplica": 2}}}


def _spec(**extra: Any) -> InferenceWorkloadSpec:
    doc: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}
    doc.update(extra)
    return InferenceWorkloadSpec.model_validate(doc)


@dataclass
class World:
    """One workload seen pass after pass; each pass reads the status the last one wrote."""

    spec: InferenceWorkloadSpec
    status: InferenceWorkloadStatus = field(default_factory=InferenceWorkloadStatus)
    now: dt.datetime = T0

    def run(
        self,
        *,
        after: float = 0,
        replicas: int = 0,
        ready: bool = True,
        asleep: bool | None = None,
        scaling: ScalingView | None = None,
        ready_count: int | None = None,
    ) -> Plan:
        """One pass ``after`` seconds later with ``replicas`` JobSets at the serving revision, the
        first ``ready_count`` of them Ready (all when ``ready``, none otherwise, by default)."""
        self.now += dt.timedelta(seconds=after)
        revision = plan(self._obs((), (), {}, None)).revision
        assert revision is not None
        suspended = self.spec.state == "Stopped"
        count = ready_count if ready_count is not None else (replicas if ready else 0)
        jobsets, pods = _group(replicas, revision, ready=count, suspended=suspended)
        states = {js.name: asleep for js in jobsets if asleep is not None}
        p = plan(self._obs(jobsets, pods, states, scaling))
        # the apiserver stores JSON: the next pass reads it back from there
        self.status = InferenceWorkloadStatus.model_validate(p.status.to_wire())
        return p

    def _obs(
        self,
        jobsets: tuple[ObservedJobSet, ...],
        pods: tuple[ObservedPod, ...],
        asleep: dict[str, bool],
        scaling: ScalingView | None,
    ) -> Observation:
        return Observation(
            name=NAME,
            namespace="ns",
            uid="uid-w",
            generation=1,
            spec=self.spec,
            status=self.status,
            # as the controller passes them: conditions keep whole seconds, wake times do not
            now=self.now.replace(microsecond=0),
            clock=self.now,
            created=T0 - dt.timedelta(hours=1),
            jobsets=jobsets,
            pods=pods,
            service=SERVICE,
            asleep=asleep,
            scaling=scaling,
        )

    def set(self, **changes: Any) -> None:
        doc = self.spec.to_wire()
        doc.update(changes)
        self.spec = InferenceWorkloadSpec.model_validate(doc)


def _group(
    n: int, revision: str, *, ready: int, suspended: bool
) -> tuple[tuple[ObservedJobSet, ...], tuple[ObservedPod, ...]]:
    """``n`` JobSets with a leader pod each; the first ``ready`` of them Ready."""
    jobsets: list[ObservedJobSet] = []
    pods: list[ObservedPod] = []
    for replica in range(n):
        name = f"{NAME}-{replica}-{revision[:5]}"
        up = replica < ready and not suspended
        jobsets.append(
            ObservedJobSet(
                name=name,
                uid=f"uid-{name}",
                replica=replica,
                revision=revision,
                leader_ready=up,
                suspended=suspended,
            )
        )
        if not suspended:
            pods.append(
                ObservedPod(
                    name=f"{name}-leader-0-0-x",
                    jobset=name,
                    role="leader",
                    replica=replica,
                    revision=revision,
                    phase="Running",
                    ready=up,
                    ip=f"10.0.0.{replica + 1}",
                    node="gpu-0",
                )
            )
    return tuple(jobsets), tuple(pods)


def _ready(p: Plan) -> tuple[str, str]:
    found = find_condition(p.status.conditions, c.READY)
    assert found is not None
    return found.status, found.reason


def _scaling(p: Plan) -> ScalingStatus:
    assert p.status.scaling is not None
    return p.status.scaling


def _woke(p: Plan) -> list[str]:
    return [e.message for e in p.events if e.reason == "Woke"]


def _decision(action: Any, at: dt.datetime, to: int, message: str = "") -> ScalingDecision:
    return ScalingDecision(action=action, time=at, from_replicas=1, to_replicas=to, message=message)


# -- the phase of zero replicas ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (IDLE, c.REASON_SCALED_TO_ZERO),
        (AUTO, c.REASON_SCALED_TO_ZERO),
        ({}, c.REASON_NO_REPLICAS),
        # no policy that takes it to zero, so none that a request undoes: the user's 0
        (
            {"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": {"kvCacheUsage": 0.8}}},
            c.REASON_NO_REPLICAS,
        ),
        ({"engine": {"enableSleepMode": True}, "idle": {"sleepAfterSeconds": 60}}, c.REASON_NO_REPLICAS),
    ],
)
def test_zero_replicas_is_scaled_to_zero_not_stopped(extra: dict[str, Any], reason: str) -> None:
    world = World(_spec(replicas=0, **extra))
    p = world.run()
    assert p.status.phase == "ScaledToZero"
    assert _ready(p) == ("False", reason)
    assert resting_from(p.status.conditions) == "Zero"
    # the user's Stopped stays Stopped
    world.set(state="Stopped", replicas=1)
    p = world.run(replicas=1)
    assert (p.status.phase, _ready(p)) == ("Stopped", ("False", c.REASON_STOPPED))


def test_a_plain_workload_never_gets_status_scaling() -> None:
    world = World(_spec(replicas=1, engine={"enableSleepMode": True}))
    for ready in (False, True):
        p = world.run(after=5, replicas=1, ready=ready)
        assert p.status.scaling is None
        assert "scaling" not in p.status.to_wire()
    world.set(replicas=0)
    assert world.run(after=5).status.scaling is None
    world.set(replicas=2, state="Sleeping")  # rests again, not serving: no wake begins
    assert world.run(after=5, replicas=2).status.scaling is None


def test_autoscaling_alone_gives_an_empty_status_scaling() -> None:
    p = World(_spec(replicas=1, **AUTO)).run(replicas=1)
    assert _scaling(p) == ScalingStatus()


# -- wakes -----------------------------------------------------------------------------------


def test_a_wake_from_sleeping_is_measured_once_the_engines_are_awake() -> None:
    world = World(_spec(replicas=1, state="Sleeping", **SLEEPY))
    p = world.run(replicas=1, asleep=True)
    assert (p.status.phase, _ready(p)) == ("Sleeping", ("False", c.REASON_ASLEEP))
    assert _scaling(p).wake is None
    world.set(state="Running")  # the gateway's wake
    p = world.run(after=1, replicas=1, asleep=True)
    # the leader is Ready to Kubernetes while its engine still sleeps: not woken yet
    wake = _scaling(p).wake
    assert wake is not None
    assert (wake.from_, wake.since) == ("Sleeping", world.now)
    assert [e.action for e in p.engine] == ["wake_up"]
    p = world.run(after=4.3, replicas=1, asleep=False)
    assert _ready(p) == ("True", c.REASON_ALL_REPLICAS_READY)
    assert _scaling(p).wake is None
    assert _scaling(p).wake_seconds.sleeping == [4.3]
    assert _scaling(p).wake_seconds.zero == []
    assert _scaling(p).wake_seconds.stopped == []
    # a later pass changes nothing
    assert world.run(after=30, replicas=1, asleep=False).status == p.status


def test_a_wake_from_zero_is_measured_and_clears_resume_replicas() -> None:
    world = World(_spec(replicas=0, **IDLE))
    zeroed = _decision("ScaleToZero", T0 - dt.timedelta(seconds=5), 0, "idle for 600s")
    p = world.run(scaling=ScalingView(decision=zeroed, scraped=True, idle_since=T0, resume_replicas=3))
    assert _scaling(p).resume_replicas == 3
    assert _scaling(p).last_decision == zeroed
    assert _scaling(p).idle_since == T0
    world.set(replicas=3)  # the gateway's wake from zero: resumeReplicas
    p = world.run(after=2)
    wake = _scaling(p).wake
    assert wake is not None
    assert (wake.from_, wake.since) == ("Zero", world.now)
    assert _scaling(p).resume_replicas == 3  # carried (obs.scaling None), not serving yet
    p = world.run(after=20, replicas=3, ready=False)
    assert _scaling(p).wake == wake
    p = world.run(after=17.46, replicas=3)
    assert _ready(p)[0] == "True"
    scaling = _scaling(p)
    assert (scaling.wake, scaling.wake_seconds.zero, scaling.resume_replicas) == (None, [37.5], None)
    assert scaling.last_decision == zeroed
    assert scaling.idle_since == T0


def test_a_wake_from_stopped_on_a_plain_workload_is_measured() -> None:
    world = World(_spec(replicas=2, state="Stopped"))
    p = world.run(replicas=2)
    assert p.status.scaling is None
    world.set(state="Running")
    p = world.run(after=1, replicas=2, ready=False)
    wake = _scaling(p).wake
    assert wake is not None
    assert wake.from_ == "Stopped"
    p = world.run(after=61, replicas=2)
    assert _scaling(p).wake is None
    assert _scaling(p).wake_seconds.stopped == [61.0]


def test_a_wake_begun_on_an_older_operators_status() -> None:
    """An older operator wrote phase Stopped with NoReplicasDesired for zero replicas and no
    status.scaling; the new one, restarted (obs.scaling None), sees the wake from zero."""
    older = InferenceWorkloadStatus(
        phase="Stopped",
        conditions=[
            Condition(
                type=c.READY,
                status="False",
                reason=c.REASON_NO_REPLICAS,
                message="spec.replicas is 0",
                last_transition_time=T0 - dt.timedelta(days=2),
            )
        ],
    )
    world = World(_spec(replicas=1, **IDLE), status=older)
    p = world.run(after=3, replicas=1, ready=False)
    wake = _scaling(p).wake
    assert wake is not None
    assert (wake.from_, wake.since) == ("Zero", world.now)
    p = world.run(after=12, replicas=1)
    assert _scaling(p).wake_seconds.zero == [12.0]


def test_a_wake_in_flight_survives_a_restart() -> None:
    """The status alone carries a wake: a restarted operator (no ScalingView) ends it."""
    world = World(_spec(replicas=0, **IDLE))
    world.run()
    world.set(replicas=1)
    world.run(after=1, replicas=1, ready=False)
    since = world.now
    world.status = InferenceWorkloadStatus.model_validate(world.status.to_wire())
    p = world.run(after=9, replicas=1, ready=True, scaling=None)
    assert _scaling(p).wake_seconds.zero == [round((world.now - since).total_seconds(), 1)] == [9.0]


def test_history_keeps_the_newest_of_each_kind() -> None:
    old = [float(n) for n in range(1, WAKE_HISTORY + 1)]
    start = ScalingStatus.model_validate({"wakeSeconds": {"zero": old, "stopped": [5.0]}})
    world = World(_spec(replicas=0, **IDLE))
    p = world.run()
    world.status = p.status.model_copy(update={"scaling": start})
    world.set(replicas=1)
    world.run(after=1, replicas=1, ready=False)
    p = world.run(after=99, replicas=1)
    history = _scaling(p).wake_seconds
    assert history.zero == [*old[1:], 99.0]
    assert len(history.zero) == WAKE_HISTORY
    assert history.stopped == [5.0]


def test_an_abandoned_wake_is_not_recorded() -> None:
    world = World(_spec(replicas=0, **IDLE))
    world.run()
    world.set(replicas=2)
    p = world.run(after=1, replicas=2, ready=False)
    assert _scaling(p).wake is not None
    world.set(replicas=0)  # the spec rests again before the workload served
    p = world.run(after=5)
    assert _scaling(p).wake is None
    assert _scaling(p).wake_seconds.zero == []
    # serving again later starts a new wake, timed from its own start
    world.set(replicas=1)
    world.run(after=100, replicas=1, ready=False)
    p = world.run(after=7, replicas=1)
    assert _scaling(p).wake_seconds.zero == [7.0]


def test_a_wake_back_to_sleep_is_abandoned() -> None:
    world = World(_spec(replicas=1, state="Stopped", **SLEEPY))
    world.run(replicas=1)
    world.set(state="Running")
    assert _scaling(world.run(after=1, replicas=1, ready=False)).wake is not None
    world.set(state="Sleeping")
    p = world.run(after=1, replicas=1, asleep=False)
    assert _scaling(p).wake is None
    assert _scaling(p).wake_seconds.stopped == []


# -- the autoscaler's news -------------------------------------------------------------------


def test_news_from_the_autoscaler_and_carry_over() -> None:
    world = World(_spec(replicas=2, **AUTO))
    first = _decision("ScaleUp", T0, 2, "queue 9 per replica over 30s")
    p = world.run(replicas=2, scaling=ScalingView(decision=first, scraped=True, idle_since=None))
    assert _scaling(p).last_decision == first
    assert _scaling(p).idle_since is None
    # nothing from this process (a restart): everything carried, the same status again
    carried = world.run(after=30, replicas=2, scaling=None)
    assert carried.status == p.status
    # an older decision than the status' own does not win; not scraped yet: the idle clock kept
    stale = _decision("ScaleDown", T0 - dt.timedelta(minutes=5), 1)
    idle = T0 + dt.timedelta(minutes=1)
    p = world.run(after=30, replicas=2, scaling=ScalingView(decision=stale, scraped=False, idle_since=idle))
    assert _scaling(p).last_decision == first
    assert _scaling(p).idle_since is None
    p = world.run(after=30, replicas=2, scaling=ScalingView(decision=stale, scraped=True, idle_since=idle))
    assert _scaling(p).idle_since == idle
    # built without validation, as a bug upstream would: the stage still bounds the message
    newer = ScalingDecision.model_construct(
        **{**dict(_decision("ScaleDown", world.now, 1)), "message": "x" * 5000}
    )
    p = world.run(after=1, replicas=2, scaling=ScalingView(decision=newer, scraped=True, idle_since=idle))
    decision = _scaling(p).last_decision
    assert decision is not None
    assert decision.action == "ScaleDown"
    assert len(decision.message) == DECISION_MESSAGE_MAX
    # busy again: the autoscaler's scrape clears the idle clock
    p = world.run(after=15, replicas=2, scaling=ScalingView(scraped=True, idle_since=None))
    assert _scaling(p).idle_since is None
    assert _scaling(p).last_decision == decision


def test_status_only_writes_the_same_scaling() -> None:
    world = World(_spec(replicas=0, **IDLE))
    world.run()
    world.set(replicas=1)
    world.run(after=1, replicas=1, ready=False)
    world.now += dt.timedelta(seconds=4)
    revision = plan(world._obs((), (), {}, None)).revision
    assert revision is not None
    jobsets, pods = _group(1, revision, ready=1, suspended=False)
    obs = world._obs(jobsets, pods, {}, None)
    full = plan(obs)
    assert full.idle
    assert _scaling(full).wake_seconds.zero == [4.0]
    # the pass that ends the wake posts Woke: left to the full pass, which writes that status
    assert [e.reason for e in full.events] == ["Woke"]
    assert status_only(obs) is None
    world.status = InferenceWorkloadStatus.model_validate(full.status.to_wire())
    world.now += dt.timedelta(seconds=15)
    later = world._obs(jobsets, pods, {}, None)
    assert plan(later).events == []
    assert status_only(later) == plan(later).status


def test_no_wake_when_it_serves_at_once() -> None:
    """Replicas back before the last JobSet went (or a status read older than the last write):
    it never stopped serving, so there is nothing to measure."""
    world = World(_spec(replicas=0, **IDLE))
    world.run(replicas=1)  # the JobSet of the scale to zero is not deleted yet
    world.set(replicas=1)
    p = world.run(after=1, replicas=1)
    assert _ready(p)[0] == "True"
    assert _scaling(p) == ScalingStatus()


def test_the_status_write_clears_an_ended_wake() -> None:
    """A merge patch merges nested objects: the write of the pass that ends a wake must null
    ``scaling.wake`` (and a cleared ``resumeReplicas``), or the wake would stay, and end again."""
    world = World(_spec(replicas=0, **IDLE))
    world.run(scaling=ScalingView(scraped=True, idle_since=T0, resume_replicas=2))
    world.set(replicas=2)
    world.run(after=1, replicas=2, ready=False)
    before = world.status.to_wire()
    assert set(before["scaling"]) >= {"wake", "resumeReplicas", "idleSince"}
    p = world.run(after=5, replicas=2)
    patch = status_patch(before, p.status)
    assert patch is not None
    assert patch["scaling"]["wake"] is None
    assert patch["scaling"]["resumeReplicas"] is None
    assert patch["scaling"]["idleSince"] == before["scaling"]["idleSince"]
    assert patch["scaling"]["wakeSeconds"]["zero"] == [5.0]
    # the merge the apiserver does leaves exactly the new status
    assert _merged(before, patch) == p.status.to_wire()


def _merged(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch applied to ``target``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


def test_wake_times_keep_fractions_of_a_second() -> None:
    """Conditions keep whole seconds (``obs.now``); a wake is timed by ``obs.clock``, so a wake
    of a few seconds from Sleeping is not off by up to a second at either end."""
    world = World(_spec(replicas=1, state="Sleeping", **SLEEPY))
    world.run(replicas=1, asleep=True)
    world.set(state="Running")
    p = world.run(after=1.7, replicas=1, asleep=True)
    wake = _scaling(p).wake
    assert wake is not None
    assert wake.since == world.now
    assert wake.since.microsecond == 700_000
    p = world.run(after=2.2, replicas=1, asleep=False)
    assert _scaling(p).wake_seconds.sleeping == [2.2]


def test_a_wake_ends_at_the_first_ready_replica_and_posts_one_event() -> None:
    """The gateway answers from the first Ready replica: a wake from zero to 3 replicas ends when
    1 of 3 is Ready (the others may never fit), and the pass that measures it posts one ``Woke``
    Event; later passes post none."""
    world = World(_spec(replicas=0, **IDLE))
    world.run()
    world.set(replicas=3)
    p = world.run(after=1)
    assert _scaling(p).wake is not None
    assert _woke(p) == []
    p = world.run(after=5, replicas=3, ready_count=0)
    assert (_scaling(p).wake is not None, _woke(p)) == (True, [])
    p = world.run(after=10.2, replicas=3, ready_count=1)
    assert _ready(p)[0] != "True"  # not all replicas Ready: the Ready condition still says so
    assert p.status.ready_replicas == 1
    assert (_scaling(p).wake, _scaling(p).wake_seconds.zero) == (None, [15.2])
    assert _woke(p) == ["woke from Zero in 15.2 s"]
    event = next(e for e in p.events if e.reason == "Woke")
    assert event.type == "Normal"
    for count in (1, 3):  # once per wake: the next passes, and all replicas Ready later, post none
        p = world.run(after=30, replicas=3, ready_count=count)
        assert (_woke(p), _scaling(p).wake_seconds.zero) == ([], [15.2])


def test_a_wake_from_sleeping_posts_its_event_once_the_engines_are_awake() -> None:
    world = World(_spec(replicas=1, state="Sleeping", **SLEEPY))
    world.run(replicas=1, asleep=True)
    world.set(state="Running")
    p = world.run(after=1, replicas=1, asleep=True)
    assert _woke(p) == []  # the leader is Ready but its engine still asleep
    p = world.run(after=2.5, replicas=1, asleep=False)
    assert _woke(p) == ["woke from Sleeping in 2.5 s"]
    assert _woke(world.run(after=5, replicas=1, asleep=False)) == []
