"""A rollback target gets the spec's gates (``revisions.rollback_refused`` reuses
``gates.state_refused``): with ``spec.state: Sleeping``, a pin to a revision whose engine ran
without sleep mode is refused, by the planner (the newest keeps serving, ``UpToDate`` says why)
and by the operations before the pin is written (409 ``rollback_refused``), as a spec with that
state and no sleep mode is refused."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.errors import Conflict
from sparkrun_operator.plan.workload import plan
from tests.unit.plan.test_history import IMAGE_A, IMAGE_B, _cond, _running, _seen, _world
from tests.unit.plan.test_workload_plan import NAME, _obs, _spec
from tests.unit.test_rollout_reads import PagingRest


def _engine(image: str, *, sleep: bool, **extra: Any) -> InferenceWorkloadSpec:
    return _spec(engine={"image": image, "enableSleepMode": sleep}, **extra)


def _two() -> tuple[Any, Any, str]:
    """Revision 1 without sleep mode, revision 2 with it (serving)."""
    first, one, rev_a = _world(_engine(IMAGE_A, sleep=False))
    second = plan(
        _obs(_engine(IMAGE_B, sleep=True), revisions=one, jobsets=_running(rev_a), status=first.status)
    )
    assert second.revision is not None
    return second, one + _seen(second), second.revision


def test_a_pin_to_a_revision_without_sleep_mode_while_sleeping_is_refused() -> None:
    second, both, rev_b = _two()
    sleeping = _engine(IMAGE_B, sleep=True, state="Sleeping", rollout={"revision": 1})
    p = plan(_obs(sleeping, revisions=both, jobsets=_running(rev_b), status=second.status))
    assert p.revisions == []
    assert p.revision == rev_b
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_REVISION_PINNED)
    assert "enableSleepMode" in message
    # Running, the same pin is made
    running = _engine(IMAGE_B, sleep=True, rollout={"revision": 1})
    made = plan(_obs(running, revisions=both, jobsets=_running(rev_b), status=second.status))
    assert [d["data"]["rollbackOf"] for d in made.revisions] == [1]


async def test_the_operations_refuse_it_before_the_pin_is_written() -> None:
    second, _both, _rev_b = _two()
    first, _one, _rev_a = _world(_engine(IMAGE_A, sleep=False))
    docs = [
        {**doc, "metadata": {**doc["metadata"], "uid": f"u{doc['revision']}"}}
        for doc in (*first.revisions, *second.revisions)
    ]
    workload = {
        "metadata": {"name": NAME, "namespace": "ns", "uid": "uid-w", "generation": 3},
        "spec": _engine(IMAGE_B, sleep=True, state="Sleeping").to_wire(),
    }
    with pytest.raises(Conflict) as refused:
        await rollout.rollback(PagingRest(docs), workload, revision=1)  # type: ignore[arg-type]
    assert refused.value.attrs["reason"] == "rollback_refused"
    assert "enableSleepMode" in str(refused.value)
