"""The loop and collector settings of the long-running processes (``sparkrun_operator.runner``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest
import uvloop

from sparkrun_operator import runner


@pytest.fixture
def collector() -> Iterator[None]:
    """Give the test process its collector back as it was."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector")
def test_runs_on_uvloop_with_startup_frozen_and_rare_full_collections() -> None:
    young, middle, _ = gc.get_threshold()

    async def main() -> tuple[type[asyncio.AbstractEventLoop], int]:
        return type(asyncio.get_running_loop()), gc.get_freeze_count()

    loop_type, frozen = runner.run(main())
    assert issubclass(loop_type, uvloop.Loop)
    assert frozen > 10_000  # every module, class and function imported so far
    assert gc.get_threshold() == (young, middle, runner.FULL_COLLECTION_EVERY)
    assert runner.FULL_COLLECTION_EVERY > 10  # rarer than Python's default


@pytest.mark.usefixtures("collector")
def test_what_exists_at_start_is_left_out_of_collections_and_later_objects_are_not() -> None:
    made_before: list[list[int]] = [[1]]
    runner.tune_gc()
    made_after: list[list[int]] = [[2]]
    tracked = gc.get_objects()  # every generation the collector scans; frozen ones are not there
    assert not any(item is made_before for item in tracked)
    assert any(item is made_after for item in tracked)
