"""``spec.rollout.approve`` counts only for drift a pass has shown (ADR 0046,
``plan/workload/history.py`` :func:`approved`): an approve left over from before a rollback, or
written together with the change, never rolls a hash out unseen; the hash is first shown as
``OnRequest`` drift, and the pass that shows it asks to be looked at again soon.
"""

from __future__ import annotations

from sparkrun_operator.api import conditions as c
from sparkrun_operator.plan.workload import plan
from sparkrun_operator.plan.workload.history import APPROVAL_RECHECK_SECONDS
from tests.unit.plan.test_history import IMAGE_A, IMAGE_B, _cond, _on_request, _running, _seen, _world
from tests.unit.plan.test_workload_plan import _obs


def test_an_approve_written_with_the_change_waits_for_the_drift_to_be_shown() -> None:
    first, revisions, rev_a = _world(_on_request(IMAGE_A))
    probe = plan(
        _obs(_on_request(IMAGE_B), revisions=revisions, jobsets=_running(rev_a), status=first.status)
    )
    assert probe.status.drift is not None
    wanted = probe.status.drift.revision
    assert wanted is not None
    ahead = plan(
        _obs(
            _on_request(IMAGE_B, approve=wanted),
            revisions=revisions,
            jobsets=_running(rev_a),
            status=first.status,
        )
    )
    assert not ahead.revisions  # not shown before: no rollout yet
    assert ahead.revision == rev_a
    assert ahead.status.drift is not None
    assert (ahead.status.drift.reason, ahead.status.drift.revision) == ("OnRequest", wanted)
    assert _cond(ahead, c.UP_TO_DATE)[:2] == ("False", c.REASON_DRIFT_PENDING)
    assert ahead.requeue_after is not None
    assert ahead.requeue_after <= APPROVAL_RECHECK_SECONDS
    # the next pass sees the drift it showed: the approve is honoured
    then = plan(
        _obs(
            _on_request(IMAGE_B, approve=wanted),
            revisions=revisions,
            jobsets=_running(rev_a),
            status=ahead.status,
        )
    )
    assert [d["data"]["cause"] for d in then.revisions] == ["DriftApplied"]
    assert then.revision == wanted


def test_an_approve_left_from_before_a_rollback_does_not_roll_out_on_unpin() -> None:
    first, one, rev_a = _world(_on_request(IMAGE_A))
    shown = plan(_obs(_on_request(IMAGE_B), revisions=one, jobsets=_running(rev_a), status=first.status))
    assert shown.status.drift is not None
    rev_b = shown.status.drift.revision
    assert rev_b is not None
    # approve B: revision 2 serves B
    approved = _on_request(IMAGE_B, approve=rev_b)
    second = plan(_obs(approved, revisions=one, jobsets=_running(rev_a), status=shown.status))
    assert [d["data"]["cause"] for d in second.revisions] == ["DriftApplied"]
    two = one + _seen(second)
    # roll back to revision 1 (kubectl: the approve stays): revision 3 serves A, B is pinned drift
    pinned = _on_request(IMAGE_B, approve=rev_b, revision=1)
    back = plan(_obs(pinned, revisions=two, jobsets=_running(rev_b), status=second.status))
    assert [(d["data"]["cause"], d["data"]["rollbackOf"]) for d in back.revisions] == [("Rollback", 1)]
    assert back.status.drift is not None
    assert (back.status.drift.reason, back.status.drift.revision) == ("RevisionPinned", rev_b)
    three = two + _seen(back)
    # unpin: the stale approve names B, which no pass showed as OnRequest drift: A keeps serving
    unpinned = plan(_obs(approved, revisions=three, jobsets=_running(rev_a), status=back.status))
    assert not unpinned.revisions
    assert unpinned.revision == rev_a
    assert unpinned.status.drift is not None
    assert (unpinned.status.drift.reason, unpinned.status.drift.revision) == ("OnRequest", rev_b)
    assert _cond(unpinned, c.UP_TO_DATE)[:2] == ("False", c.REASON_DRIFT_PENDING)
