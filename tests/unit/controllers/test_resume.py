"""A resumed replica plans nothing from stale indexes (``controllers/resume.py``, issue 32).

The contract: after kopf's peering has paused the process, a workload daemon that starts seeds
its expectations with the children the apiserver lists; until the indexes show them (or
``expectation_seconds`` pass) neither lane plans or writes, so a Ready workload whose JobSet
and pods were created during the pause is not written ``Ready=False, "no pods yet"``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import time
from typing import Any

from sparkrun_operator.controllers import resume
from sparkrun_operator.controllers import workload as controller
from tests.unit.controllers.recording_memo import patches_of, recording_memo
from tests.unit.controllers.test_workload_lanes import KEY, _body, _full_lane, _indices


def test_kopf_still_logs_its_pauses_where_they_are_counted() -> None:
    peering = importlib.import_module(resume.PEERING_LOGGER)
    source = inspect.getsource(peering)
    assert "logging.getLogger(__name__)" in source
    assert 'logger.info(f"Pausing operations in favour of' in source
    assert 'logger.warning(f"Pausing all operators, including self' in source


def test_pauses_are_counted_from_kopfs_peering_log_only() -> None:
    pauses = resume.Pauses()
    peering = logging.getLogger(resume.PEERING_LOGGER)
    level = peering.level
    peering.setLevel(logging.WARNING)
    try:
        pauses.install()
        assert peering.isEnabledFor(logging.INFO)  # its pause lines are INFO
        peering.info(
            "Resuming operations after the pause. Conflicting operators with the same priority are gone."
        )
        assert pauses.count == 0
        peering.info("Pausing operations in favour of %s.", ["peer"])
        peering.warning("Pausing all operators, including self: %s", ["peer"])
        logging.getLogger("kopf.objects").info("Pausing operations in favour of nobody")
        assert pauses.count == 2
        pauses.remove()
        peering.info("Pausing operations in favour of %s.", ["peer"])
        assert pauses.count == 2
    finally:
        pauses.remove()
        peering.setLevel(level)


def _children(indices: dict[str, Any]) -> resume.Children:
    (js,) = indices["iw_jobsets"][KEY]
    (pod,) = indices["iw_pods"][KEY]
    return resume.Children(jobsets=frozenset({js.name}), pods=frozenset({pod.name}), revisions=frozenset())


async def test_no_status_is_planned_before_the_indexes_show_what_the_apiserver_lists() -> None:
    ctx = recording_memo()
    full = _full_lane(ctx)
    listed = _indices(ready=True)
    ready = controller.prepare_status(
        ctx, body=_body(), indices=listed, expectations=controller.Expectations(), writes=controller.Writes()
    )
    assert ready is not None
    assert await ready.write()
    written = patches_of(ctx)[-1][1]["status"]
    assert [c["status"] for c in written["conditions"] if c["type"] == "Ready"] == ["True"]
    body = _body(written, version="2")
    stale: dict[str, Any] = {"iw_jobsets": {}, "iw_pods": {}, "iw_services": listed["iw_services"]}
    # what a resumed replica's indexes held: no JobSet, no pod -- planned, Ready would be False
    fresh = controller.prepare_status(
        ctx, body=body, indices=stale, expectations=controller.Expectations(), writes=controller.Writes()
    )
    assert fresh is None  # a plan with actions (the JobSet) is the full lane's...
    assert full.is_set()
    p = controller.plan(
        controller.observation(ctx=ctx, body=body, indices=stale, now=controller.utcnow(), asleep={})
    )
    ready_planned = [c for c in p.status.conditions if c.type == "Ready"]
    assert (ready_planned[0].status, ready_planned[0].message) == (
        "False",
        "0 of 1 replicas Ready; no pods yet",
    )
    # ...which waits, like the status lane, while the indexes lack what was listed
    expectations = controller.Expectations()
    expectations.relisted(_children(listed))
    full.clear()
    writes = controller.Writes()
    assert controller.catching_up(ctx, body=body, indices=stale, expectations=expectations) == 1.0  # type: ignore[arg-type]
    held = controller.prepare_status(ctx, body=body, indices=stale, expectations=expectations, writes=writes)  # type: ignore[arg-type]
    assert held is None
    # the JobSet is listed again, its pod not yet: still waiting
    partial = {**stale, "iw_jobsets": listed["iw_jobsets"]}
    assert controller.catching_up(ctx, body=body, indices=partial, expectations=expectations) == 1.0  # type: ignore[arg-type]
    # both shown: planned, and nothing to write (the status is what it was)
    assert controller.catching_up(ctx, body=body, indices=listed, expectations=expectations) is None  # type: ignore[arg-type]
    assert (
        controller.prepare_status(ctx, body=body, indices=listed, expectations=expectations, writes=writes)
        is None
    )  # type: ignore[arg-type]
    assert len(patches_of(ctx)) == 1
    await ctx.http.aclose()


def test_the_wait_is_bounded_by_expectation_seconds() -> None:
    ctx = recording_memo()
    expectations = controller.Expectations()
    expectations.relisted(
        resume.Children(jobsets=frozenset({"gone"}), pods=frozenset(), revisions=frozenset())
    )
    body = _body()
    assert controller.catching_up(ctx, body=body, indices={}, expectations=expectations) == 1.0  # type: ignore[arg-type]
    expectations.since = time.monotonic() - ctx.config.expectation_seconds - 1
    assert controller.catching_up(ctx, body=body, indices={}, expectations=expectations) is None  # type: ignore[arg-type]
