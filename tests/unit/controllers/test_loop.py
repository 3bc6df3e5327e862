"""The reconcile loop's mechanics (``controllers/loop.py``, ``controllers/triggers.py``), with
real asyncio timing and no apiserver: pokes coalesce, requeues come back, a precheck that says
"wait" costs no pass, the gate bounds passes over all objects, an unavailable apiserver becomes
kopf's TemporaryError while a conflict requeues the pass soon, a status write is neither sent
when equal nor repeated before the watch shows it, and the status lane serves pokes while full
passes hold every slot of the gate."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

import httpx
import kopf
import pytest

from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.controllers import lane
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.gate import ACTION, PROGRESS, URGENT, PriorityGate
from sparkrun_operator.controllers.loop import run_loop
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.operator import observing_gc
from sparkrun_operator.controllers.status import StatusMemory
from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.k8s import errors


class Stopped:
    """Stands in for kopf's DaemonStopped flag."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class FakeKube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def merge_patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.patches.append(args[2])
        return {}


def _ctx(*, gate: int = 16, debounce: float = 0.0) -> Memo:
    return Memo(
        config=OperatorConfig(drift_seconds=60, debounce_seconds=debounce),
        kube=FakeKube(),  # type: ignore[arg-type]
        http=httpx.AsyncClient(),
        metrics=Metrics(),
        gate=asyncio.Semaphore(gate),
    )


def _wake_all(ctx: Memo) -> None:
    """Wake every daemon (to see it stopped)."""
    for key in [*ctx.triggers.keys()]:  # NB: Triggers is no mapping (ruff SIM118 takes it for one)
        ctx.triggers.poke(key)


async def _run(ctx: Memo, key: str, stopped: Stopped, reconcile: Any, **kwargs: Any) -> asyncio.Task[None]:
    return asyncio.create_task(
        run_loop(
            ctx,
            key=key,
            kind="Test",
            stopped=stopped,  # type: ignore[arg-type]
            logger=logging.getLogger("test"),
            reconcile=reconcile,
            **kwargs,
        )
    )


async def test_pokes_during_a_pass_coalesce_into_one_more_pass() -> None:
    ctx = _ctx()
    stopped = Stopped()
    passes = 0
    release = asyncio.Event()

    async def reconcile() -> float | None:
        nonlocal passes
        passes += 1
        if passes == 1:
            await release.wait()
        return None

    task = await _run(ctx, "a", stopped, reconcile)
    await asyncio.sleep(0.05)
    assert passes == 1  # the first pass runs at once
    for _ in range(5):
        ctx.triggers.poke("a")
    release.set()
    await asyncio.sleep(0.1)
    assert passes == 2
    stopped.event.set()
    ctx.triggers.poke("a")
    await asyncio.wait_for(task, 1)
    assert "a" not in list(ctx.triggers.keys())
    await ctx.http.aclose()


async def test_requeue_and_precheck() -> None:
    ctx = _ctx()
    stopped = Stopped()
    passes = 0
    waiting = True

    async def reconcile() -> float | None:
        nonlocal passes
        passes += 1
        return 0.1 if passes == 1 else None

    task = await _run(ctx, "b", stopped, reconcile, precheck=lambda: 30.0 if waiting else None)
    await asyncio.sleep(0.2)
    assert passes == 0  # the precheck said wait: no pass, no slot
    waiting = False
    ctx.triggers.poke("b")
    await asyncio.sleep(0.05)
    assert passes == 1
    await asyncio.sleep(0.2)
    assert passes == 2  # the requested re-check came back without a poke
    stopped.event.set()
    await asyncio.wait_for(task, 1)
    await ctx.http.aclose()


async def test_the_gate_bounds_passes_over_all_objects() -> None:
    ctx = _ctx(gate=2)
    stopped = Stopped()
    running = 0
    most = 0

    async def reconcile() -> float | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1
        return None

    tasks = [await _run(ctx, f"k{i}", stopped, reconcile) for i in range(6)]
    await asyncio.sleep(0.3)
    assert most == 2
    stopped.event.set()
    _wake_all(ctx)
    await asyncio.wait_for(asyncio.gather(*tasks), 2)
    await ctx.http.aclose()


async def test_unavailable_becomes_a_temporary_error() -> None:
    ctx = _ctx()

    async def unavailable() -> float | None:
        raise errors.KubeUnavailable("down", status=503)

    task = await _run(ctx, "u", Stopped(), unavailable)
    with pytest.raises(kopf.TemporaryError) as raised:
        await asyncio.wait_for(task, 1)
    assert raised.value.delay is not None
    assert 10.5 <= raised.value.delay <= 15.0  # 15 s with jitter
    assert isinstance(raised.value.__cause__, errors.KubeUnavailable)
    await ctx.http.aclose()


async def test_a_conflict_runs_the_pass_again_soon_in_the_same_loop() -> None:
    ctx = _ctx()
    stopped = Stopped()
    times: list[float] = []
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def conflicting_twice() -> float | None:
        times.append(loop.time())
        if len(times) <= 2:
            raise errors.KubeConflict("changed", status=409)
        third.set()
        return None

    task = await _run(ctx, "c", stopped, conflicting_twice)
    await asyncio.wait_for(third.wait(), 3.0)
    assert len(times) == 3, times  # no poke needed: the conflict requeued the pass
    assert not task.done()  # the daemon was not restarted by kopf
    first, second = times[1] - times[0], times[2] - times[1]
    assert 0.1 <= first <= 0.5, first  # 0.25 s with jitter
    assert 0.2 <= second <= 0.9, second  # doubled for the second conflict in a row
    assert ctx.metrics.reconcile_errors.labels(kind="Test", error="Conflict")._value.get() == 2
    stopped.event.set()
    ctx.triggers.poke("c")
    await asyncio.wait_for(task, 1)
    await ctx.http.aclose()


async def test_status_memory() -> None:
    ctx = _ctx()
    memory = StatusMemory()
    desired = InferenceWorkloadStatus(phase="Running", revision="r1")
    kwargs: dict[str, Any] = {"resource": None, "name": "w", "namespace": "ns"}
    assert await memory.write(ctx, current=None, desired=desired, **kwargs)
    # the watch has not delivered the write yet: the same status is not sent again
    assert not await memory.write(ctx, current=None, desired=desired, **kwargs)
    # once it has, nothing differs
    current = desired.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert not await memory.write(ctx, current=current, desired=desired, **kwargs)
    changed = InferenceWorkloadStatus(phase="Running")
    assert await memory.write(ctx, current=current, desired=changed, **kwargs)
    kube = ctx.kube
    assert isinstance(kube, FakeKube)
    assert kube.patches[-1] == {
        "status": {
            "phase": "Running",
            "replicas": 0,
            "readyReplicas": 0,
            "restarts": 0,
            "conditions": [],
            "endpoints": [],
            "startup": [],
            "revision": None,
        }
    }
    await ctx.http.aclose()


def test_group_pokes_wake_a_kind_or_a_kind_in_one_namespace() -> None:
    triggers = Triggers()
    keys = [
        ("ib", "a", "one"),
        ("ib", "a", "two"),
        ("ib", "b", "one"),
        ("ic", "x"),
        ("mc", "a", "one"),
        "plain",
    ]
    events = {key: triggers.register(key) for key in keys}
    for event in events.values():
        event.clear()

    def woken() -> set[object]:
        out = {key for key, event in events.items() if event.is_set()}
        for event in events.values():
            event.clear()
        return out

    assert triggers.poke_group("ib", "a") == 2
    assert woken() == {("ib", "a", "one"), ("ib", "a", "two")}
    assert triggers.poke_group("ib") == 3
    assert woken() == {("ib", "a", "one"), ("ib", "a", "two"), ("ib", "b", "one")}
    assert triggers.poke_group("ic") == 1
    assert woken() == {("ic", "x")}
    assert triggers.poke_group("ib", "c") == 0
    assert woken() == set()
    triggers.unregister(("ib", "a", "one"))
    triggers.unregister(("ib", "a", "one"))  # twice: no error
    assert triggers.poke_group("ib", "a") == 1
    assert woken() == {("ib", "a", "two")}
    triggers.unregister(("ib", "a", "two"))
    assert triggers.poke_group("ib", "a") == 0
    assert triggers.poke_group("ib") == 1
    assert woken() == {("ib", "b", "one")}
    with pytest.raises(ValueError, match="one or two parts"):
        triggers.poke_group("ib", "a", "one")


def test_triggers_and_ready_gauge() -> None:
    triggers = Triggers()
    assert not triggers.poke("x")
    event = triggers.register("x")
    assert event.is_set()  # the first pass runs without waiting for an event
    event.clear()
    assert event.taken() is not None  # the set of registration, absorbed by that clear
    assert triggers.poke("x")
    assert event.is_set()
    assert triggers.poke("x")
    assert event.taken() is None  # nothing cleared since
    before = time.monotonic()
    event.clear()
    first = event.taken()  # the first poke absorbed by the clear, not the later ones
    assert first is not None
    assert first <= before
    assert event.taken() is None  # taken
    event.clear()
    assert event.taken() is None  # a clear with no poke since absorbs nothing
    assert not triggers.poke("unknown")
    metrics = Metrics()
    metrics.observe_ready("K", "a", "True")
    metrics.observe_ready("K", "b", "False")
    metrics.observe_ready("K", "a", None)
    metrics.observe_ready("L", "a", "Unknown")

    def gauge(kind: str, ready: str) -> float | None:
        return metrics.registry.get_sample_value("sparkrun_operator_objects", {"kind": kind, "ready": ready})

    assert (gauge("K", "True"), gauge("K", "False"), gauge("K", "Unknown")) == (0, 1, 0)
    assert (gauge("L", "True"), gauge("L", "Unknown")) == (0, 1)
    metrics.observe_ready("K", "b", "False")  # the same again moves nothing
    metrics.observe_ready("K", "c", "True")
    metrics.observe_ready("K", "b", "True")
    metrics.observe_ready("K", "gone", None)  # never seen
    assert (gauge("K", "True"), gauge("K", "False"), gauge("K", "Unknown")) == (2, 0, 0)


def test_gc_pauses_are_observed_while_the_operator_runs() -> None:
    metrics = Metrics()

    def pauses() -> float:
        return (
            metrics.registry.get_sample_value("sparkrun_operator_gc_pause_seconds_count", {"generation": "2"})
            or 0
        )

    with observing_gc(metrics):
        gc.collect()
        gc.collect()
    assert pauses() == 2
    gc.collect()  # after the block: no longer observed
    assert pauses() == 2


def _lane(ctx: Memo, key: str, stopped: Stopped, prepare: Any) -> asyncio.Task[None]:
    return asyncio.create_task(
        lane.run_status_lane(
            ctx,
            key=key,
            kind="Test",
            stopped=stopped,  # type: ignore[arg-type]
            logger=logging.getLogger("test"),
            prepare=prepare,
        )
    )


def _urgent(write: Any) -> Any:
    return lambda: lane.Pending(urgent=True, write=write)


async def test_the_status_lane_does_not_wait_behind_full_passes() -> None:
    ctx = _ctx(gate=1)
    stopped = Stopped()
    full_passes = 0
    status_passes = 0
    blocked = asyncio.Event()

    async def slow_full_pass() -> float | None:
        nonlocal full_passes
        full_passes += 1
        await blocked.wait()  # holds the only full-pass slot
        return None

    async def status_pass() -> bool:
        nonlocal status_passes
        status_passes += 1
        return True

    full = [await _run(ctx, f"full{i}", stopped, slow_full_pass) for i in range(3)]
    status_lane = _lane(ctx, "status", stopped, _urgent(status_pass))
    await asyncio.sleep(0.05)
    assert full_passes == 1  # one holds the gate, two queue behind it
    assert status_passes == 0  # the lane starts idle: the first full pass writes the first status
    for _ in range(3):
        ctx.triggers.poke("status")
        await asyncio.sleep(0.02)
    assert status_passes == 3  # each poke is served while every full pass waits
    assert full_passes == 1
    sample = ctx.metrics.status_passes.labels(kind="Test", wrote="true")._value.get()
    assert sample == 3
    blocked.set()
    stopped.event.set()
    _wake_all(ctx)
    await asyncio.wait_for(asyncio.gather(*full, status_lane), 2)
    assert "status" not in list(ctx.triggers.keys())
    await ctx.http.aclose()


async def test_the_status_lane_coalesces_and_survives_errors() -> None:
    ctx = _ctx()
    ctx.write_gate = PriorityGate(1)
    stopped = Stopped()
    calls = 0
    release = asyncio.Event()

    async def status_pass() -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
            raise errors.KubeUnavailable("apiserver down", status=503)
        if calls == 2:
            raise RuntimeError("a bug")
        return False

    status_lane = _lane(ctx, "s", stopped, _urgent(status_pass))
    await asyncio.sleep(0.01)
    ctx.triggers.poke("s")
    await asyncio.sleep(0.02)
    for _ in range(5):  # while the first pass runs: one more pass, not five
        ctx.triggers.poke("s")
    release.set()
    await asyncio.sleep(0.05)
    assert calls == 2
    assert not status_lane.done()  # neither the API error nor the bug stopped the lane
    ctx.triggers.poke("s")
    await asyncio.sleep(0.02)
    assert calls == 3
    assert ctx.metrics.status_passes.labels(kind="Test", wrote="false")._value.get() == 1
    stopped.event.set()
    ctx.triggers.poke("s")
    await asyncio.wait_for(status_lane, 1)
    await ctx.http.aclose()


async def test_progress_settles_into_one_write_and_readiness_does_not_wait() -> None:
    ctx = _ctx()
    ctx.config = OperatorConfig(drift_seconds=60, status_settle_seconds=0.3)
    stopped = Stopped()
    written: list[str] = []
    wrote = asyncio.Event()
    state = {"value": "scheduled", "urgent": False}

    def prepare() -> lane.Pending | None:
        value = state["value"]
        if value == "nothing":
            return None

        async def write() -> bool:
            written.append(str(value))
            wrote.set()
            return True

        return lane.Pending(urgent=bool(state["urgent"]), write=write)

    status_lane = _lane(ctx, "s", stopped, prepare)
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for value in ("scheduled", "pulling", "running"):  # progress in quick steps: one write
        state["value"] = value
        ctx.triggers.poke("s")
        await asyncio.sleep(0.05)
    await asyncio.wait_for(wrote.wait(), 1)
    assert written == ["running"]
    assert loop.time() - start >= 0.3
    # readiness is written at once, even in the middle of a settle window
    state["value"] = "starting"
    ctx.triggers.poke("s")
    await asyncio.sleep(0.05)
    state.update(value="ready", urgent=True)
    wrote.clear()
    start = loop.time()
    ctx.triggers.poke("s")
    await asyncio.wait_for(wrote.wait(), 1)
    assert loop.time() - start < 0.15
    assert written == ["running", "ready"]

    def poked(urgent: str, sample: str) -> float | None:
        labels = {"kind": "Test", "stage": "poked", "urgent": urgent}
        return ctx.metrics.registry.get_sample_value(
            f"sparkrun_operator_status_lane_seconds_{sample}", labels
        )

    # from the first poke to the written status: the progress write waited out the window
    assert poked("false", "count") == 1
    assert (poked("false", "sum") or 0) >= 0.3
    assert poked("true", "count") == 1
    assert (poked("true", "sum") or 1) < 0.15
    # nothing to write (the status is current): no write
    state.update(value="nothing", urgent=False)
    ctx.triggers.poke("s")
    await asyncio.sleep(0.4)
    assert written == ["running", "ready"]
    stopped.event.set()
    ctx.triggers.poke("s")
    await asyncio.wait_for(status_lane, 1)
    await ctx.http.aclose()


async def test_the_priority_gate_serves_urgent_waiters_first() -> None:
    gate = PriorityGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with gate.slot(PROGRESS):
            await release.wait()

    async def waiter(name: str, priority: int) -> None:
        async with gate.slot(priority):
            order.append(name)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(waiter("p1", PROGRESS))]
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(waiter("gone", URGENT))
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(waiter("p2", PROGRESS)), asyncio.create_task(waiter("u1", URGENT))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(waiter("u2", URGENT)))
    await asyncio.sleep(0)
    cancelled.cancel()
    release.set()
    await asyncio.wait_for(asyncio.gather(first, *tasks), 1)
    assert order == ["u1", "u2", "p1", "p2"]
    assert gate.held == 0
    with pytest.raises(asyncio.CancelledError):
        await cancelled


async def test_reserved_slots_are_left_to_urgent_tickets() -> None:
    gate = PriorityGate(3, reserved=1)
    actions = [gate.enqueue(ACTION) for _ in range(3)]
    assert [t.granted for t in actions] == [True, True, False]  # the third waits: one is reserved
    urgent = gate.enqueue(URGENT)
    assert urgent.granted  # readiness never waits for slow actions to finish
    actions[0].close()
    assert actions[2].granted
    for ticket in (urgent, actions[1], actions[2]):
        ticket.close()
    assert (gate.held, gate.held_other) == (0, 0)


async def test_a_queued_progress_write_that_turns_urgent_moves_up() -> None:
    ctx = _ctx()
    ctx.config = OperatorConfig(drift_seconds=60, status_settle_seconds=0.0)
    ctx.write_gate = PriorityGate(1)
    stopped = Stopped()
    written: list[str] = []
    state = {"urgent": False}

    def prepare() -> lane.Pending:
        hurry = state["urgent"]

        async def write() -> bool:
            written.append("ready" if hurry else "progress")
            action_first.append(action.granted)
            return True

        return lane.Pending(urgent=hurry, write=write)

    action_first: list[bool] = []
    # the budget's one slot is held (a full pass's apply), an action waits behind it
    holder = ctx.write_gate.enqueue(ACTION)
    action = ctx.write_gate.enqueue(ACTION)
    status_lane = _lane(ctx, "s", stopped, prepare)
    await asyncio.sleep(0.01)
    ctx.triggers.poke("s")  # a progress report: queued behind the action
    await asyncio.sleep(0.02)
    state["urgent"] = True  # the leader turns Ready meanwhile
    ctx.triggers.poke("s")
    await asyncio.sleep(0.02)
    holder.close()
    await asyncio.sleep(0.02)
    assert written == ["ready"]  # the progress state never sent
    assert action_first == [False]  # served before the action
    assert action.granted  # which came next
    stopped.event.set()
    ctx.triggers.poke("s")
    await asyncio.wait_for(status_lane, 1)
    action.close()
    assert ctx.write_gate.held == 0
    await ctx.http.aclose()


async def test_status_memory_with_versions_rewrites_after_someone_else_wrote() -> None:
    ctx = _ctx()
    memory = StatusMemory()
    desired = InferenceWorkloadStatus(phase="Running", ready_replicas=1)
    stale = InferenceWorkloadStatus(phase="Pending").model_dump(by_alias=True, exclude_none=True, mode="json")
    kwargs: dict[str, Any] = {"resource": None, "name": "w", "namespace": "ns", "desired": desired}
    assert await memory.write(ctx, current=stale, version="10", **kwargs)
    # the object is still the one the write was planned from: no repeat
    assert not await memory.write(ctx, current=stale, version="10", **kwargs)
    # a newer object still shows a stale status (someone wrote it back): written again
    assert await memory.write(ctx, current=stale, version="12", **kwargs)
    kube = ctx.kube
    assert isinstance(kube, FakeKube)
    assert len(kube.patches) == 2
    await ctx.http.aclose()
