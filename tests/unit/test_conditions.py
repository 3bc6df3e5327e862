"""``set_condition``: transitions, observedGeneration and change detection."""

from __future__ import annotations

import datetime as dt

from sparkrun_operator.api.meta import Condition, find_condition, is_true, set_condition

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def test_new_condition_is_appended_with_now() -> None:
    conds: list[Condition] = []
    assert set_condition(
        conds, type="Ready", status="False", reason="Creating", observed_generation=1, now=T0
    )
    assert conds[0].last_transition_time == T0
    assert conds[0].observed_generation == 1


def test_same_status_keeps_transition_time_but_updates_message_and_generation() -> None:
    conds: list[Condition] = []
    set_condition(
        conds, type="Ready", status="False", reason="Creating", message="a", observed_generation=1, now=T0
    )
    changed = set_condition(
        conds, type="Ready", status="False", reason="PodsPending", message="b", observed_generation=2, now=T1
    )
    assert changed
    (cond,) = conds
    assert cond.last_transition_time == T0
    assert (cond.reason, cond.message, cond.observed_generation) == ("PodsPending", "b", 2)


def test_flip_moves_transition_time() -> None:
    conds: list[Condition] = []
    set_condition(conds, type="Ready", status="False", reason="Creating", now=T0)
    set_condition(conds, type="Ready", status="True", reason="AllReplicasReady", now=T1)
    assert conds[0].last_transition_time == T1
    assert is_true(conds, "Ready")


def test_no_change_reports_false() -> None:
    conds: list[Condition] = []
    set_condition(
        conds, type="Ready", status="True", reason="AllReplicasReady", observed_generation=3, now=T0
    )
    assert not set_condition(
        conds, type="Ready", status="True", reason="AllReplicasReady", observed_generation=3, now=T1
    )
    assert conds[0].last_transition_time == T0


def test_other_types_are_untouched() -> None:
    conds: list[Condition] = []
    set_condition(conds, type="Ready", status="True", reason="AllReplicasReady", now=T0)
    set_condition(conds, type="Degraded", status="False", reason="AsExpected", now=T1)
    assert [c.type for c in conds] == ["Ready", "Degraded"]
    ready = find_condition(conds, "Ready")
    assert ready is not None
    assert ready.last_transition_time == T0
    assert find_condition(conds, "Scheduled") is None


def test_wire_shape_is_metav1_condition() -> None:
    conds: list[Condition] = []
    set_condition(
        conds, type="Ready", status="True", reason="AllReplicasReady", observed_generation=4, now=T0
    )
    assert conds[0].to_wire() == {
        "type": "Ready",
        "status": "True",
        "reason": "AllReplicasReady",
        "message": "",
        "lastTransitionTime": "2026-01-01T12:00:00Z",
        "observedGeneration": 4,
    }
