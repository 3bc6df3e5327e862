"""Full garbage collections at quiet moments (``controllers/collector.py``, ADR 0032)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator

from sparkrun_operator.controllers.collector import collect_when_quiet
from sparkrun_operator.controllers.triggers import Triggers


def full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def full_collection() -> asyncio.Event:
    """Set at the end of the next full collection (the collector runs it on this loop)."""
    done = asyncio.Event()

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            done.set()
            gc.callbacks.remove(callback)

    gc.callbacks.append(callback)
    return done


def make_due() -> None:
    """One generation 1 collection: with ``every=1`` a full collection is due."""
    gc.collect(1)


@contextlib.asynccontextmanager
async def collector(triggers: Triggers, **options: float) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(collect_when_quiet(triggers, period=0.02, every=1, **options))
    await asyncio.sleep(0)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_due_full_collection_waits_for_a_quiet_moment() -> None:
    triggers = Triggers()
    triggers.register("w")
    async with collector(triggers, quiet=1.0, overdue=60):
        make_due()
        before = full_collections()
        busy_until = time.monotonic() + 1.5
        while time.monotonic() < busy_until:  # an object changes every 20 ms: never quiet
            triggers.poke("w")
            await asyncio.sleep(0.02)
        assert full_collections() == before
        quiet_since = time.monotonic()
        await asyncio.wait_for(full_collection().wait(), 5)
        assert full_collections() == before + 1
        assert time.monotonic() - quiet_since >= 1.0  # after a second without changes
        await asyncio.sleep(0.2)
        assert full_collections() == before + 1  # not due again until young collections ran


async def test_a_never_quiet_operator_still_collects_once_overdue() -> None:
    triggers = Triggers()
    triggers.register("w")
    # NB: quiet is never reached (pokes every 20 ms, and 60 s is far beyond the loop's bound), so
    # the one collection is the overdue one; no upper bound tighter than that: a loaded CI machine
    # once took 3.6 s to run it (a timing threshold is no unit test's business).
    async with collector(triggers, quiet=60, overdue=0.3):
        make_due()
        before = full_collections()
        start = time.monotonic()
        while full_collections() == before and time.monotonic() - start < 30:
            triggers.poke("w")
            await asyncio.sleep(0.02)
        assert full_collections() == before + 1
        assert 0.3 <= time.monotonic() - start < 30


async def test_automatic_full_collections_are_off_while_any_collector_runs() -> None:
    automatic = gc.get_threshold()[2]
    first = asyncio.create_task(collect_when_quiet(Triggers()))
    second = asyncio.create_task(collect_when_quiet(Triggers()))
    await asyncio.sleep(0)
    assert gc.get_threshold()[2] > 10**9
    for task in (first, second):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if task is first:
            assert gc.get_threshold()[2] > 10**9  # the other one still runs
    assert gc.get_threshold()[2] == automatic
