"""Ownership leases, the pure parts (ADR 0049): names, sessions, the verdict, the status and the
observer's clock. The testbed tests (``tests/daytwo/test_ownership_leases.py``) run them for real."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition, lease_record
from sparkrun_operator.api.ownership import (
    LeaseSpec,
    LeaseStatus,
    check_session,
    holder_identity,
    lease_name,
)
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.controllers.ownership import abandoned_message
from sparkrun_operator.ops.leases import RecordClock
from sparkrun_operator.ops.ownership import info, lease_doc
from sparkrun_operator.plan.workload import Observation, plan
from sparkrun_operator.plan.workload.ownership import judge, trusted

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
WORKLOAD = {
    "metadata": {"name": "wl", "namespace": "ns", "uid": "uid-1"},
    "spec": {"lease": {"ttlSeconds": 30}},
}


def _lease(
    holder: str | None = "alice", *, rv: str = "1", uid: str = "uid-1", name: str | None = None
) -> Any:
    doc = lease_doc(WORKLOAD, holder=holder, session=None, ttl=30, now=NOW, acquired=None, transitions=0)
    doc["metadata"]["resourceVersion"] = rv
    doc["metadata"]["ownerReferences"][0]["uid"] = uid
    if name is not None:
        doc["metadata"]["name"] = name
    return doc


def _judge(lease: Any, *, seen: float, since: float = 0.0, now: float, previous: Any = None) -> Any:
    return judge(
        LeaseSpec(ttl_seconds=30, delete_on_exit=False),
        workload="wl",
        lease=lease,
        own=trusted(lease, workload="wl", uid="uid-1"),
        record_seen=seen,
        watched_since=since,
        now=now,
        wall=NOW,
        previous=previous,
    )


def test_lease_name_is_deterministic_and_bounded() -> None:
    assert lease_name("wl") == "sparkrun-lease-wl"
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    assert len(lease_name(long_a)) <= 253
    assert len(lease_name(long_b)) <= 253
    assert lease_name(long_a) != lease_name(long_b)
    assert lease_name(long_a) == lease_name(long_a)


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "ä", "a/b", "a#b"])
def test_sessions_outside_the_charset_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="session must be"):
        check_session(bad)


def test_holder_is_the_principal_with_an_optional_session() -> None:
    assert check_session("run-1.a_b") == "run-1.a_b"
    assert holder_identity("alice", None) == "alice"
    assert holder_identity("alice", "s1") == "alice#s1"


def test_ttl_bounds() -> None:
    assert LeaseSpec().ttl_seconds == 600
    assert LeaseSpec().delete_on_exit is False
    for bad in (9, 7 * 86_400 + 1):
        with pytest.raises(ValueError, match="ttl_seconds"):
            LeaseSpec(ttl_seconds=bad)


def test_only_the_workloads_own_lease_is_trusted() -> None:
    assert trusted(_lease(), workload="wl", uid="uid-1")
    assert not trusted(_lease(uid="someone-else"), workload="wl", uid="uid-1")
    assert not trusted(_lease(name="sparkrun-lease-other"), workload="wl", uid="uid-1")
    assert not trusted(None, workload="wl", uid="uid-1")


def test_held_until_the_record_is_unchanged_for_the_ttl() -> None:
    held = _judge(_lease(), seen=100.0, now=129.0)
    assert held.status.state == "Held"
    assert held.status.holder == "alice"
    assert held.remaining == pytest.approx(1.0)
    lapsed = _judge(_lease(), seen=100.0, now=130.0)
    assert lapsed.status.state == "Lapsed"
    assert lapsed.remaining is None
    assert lapsed.status.holder == "alice"


def test_unclaimed_counts_from_when_the_observer_first_saw_the_workload() -> None:
    fresh = _judge(None, seen=50.0, since=50.0, now=60.0)
    assert fresh.status.state == "Unclaimed"
    assert fresh.remaining == pytest.approx(20.0)
    assert _judge(None, seen=50.0, since=50.0, now=80.0).status.state == "Lapsed"


def test_a_restarted_observer_gives_a_full_ttl() -> None:
    # the record was seen long ago by a previous daemon, but this one started watching at 200
    verdict = _judge(_lease(), seen=0.0, since=200.0, now=229.0)
    assert verdict.status.state == "Held"


def test_a_squatted_lease_is_ignored_and_reported() -> None:
    verdict = _judge(_lease(uid="mallory"), seen=0.0, since=0.0, now=10.0)
    assert verdict.status.state == "Unclaimed"
    assert verdict.status.holder is None
    assert verdict.status.squatted
    assert _judge(_lease(uid="mallory"), seen=0.0, since=0.0, now=31.0).status.state == "Lapsed"


def test_since_is_kept_while_the_state_and_holder_stay() -> None:
    first = _judge(_lease(), seen=100.0, now=101.0)
    later = judge(
        LeaseSpec(ttl_seconds=30),
        workload="wl",
        lease=_lease(rv="2"),
        own=True,
        record_seen=120.0,
        watched_since=0.0,
        now=121.0,
        wall=NOW + dt.timedelta(minutes=5),
        previous=first.status,
    )
    assert later.status == first.status  # a renew changes nothing the status says


def test_status_and_condition_follow_the_verdict() -> None:
    spec = InferenceWorkloadSpec.model_validate(
        {"model": {"name": "Qwen/Qwen3-0.6B"}, "lease": {"ttlSeconds": 30}}
    )
    base: dict[str, Any] = {
        "name": "wl",
        "namespace": "ns",
        "uid": "uid-1",
        "generation": 1,
        "spec": spec,
        "status": InferenceWorkloadStatus(),
        "now": NOW,
    }
    held = _judge(_lease(), seen=0.0, now=1.0).status
    status = plan(Observation(**base, ownership=held)).status
    assert status.lease == held
    owned = find_condition(status.conditions, c.OWNED)
    assert owned is not None
    assert owned.status == "True"
    assert owned.reason == c.REASON_LEASE_HELD
    lapsed = _judge(_lease(), seen=0.0, now=31.0).status
    status = plan(Observation(**base, ownership=lapsed)).status
    owned = find_condition(status.conditions, c.OWNED)
    assert owned is not None
    assert owned.status == "False"
    assert owned.reason == c.REASON_LEASE_EXPIRED
    assert "alice" in owned.message
    assert "orphaned" in owned.message
    # not judged by this process yet: the previous status and condition are carried
    carried = plan(Observation(**{**base, "status": status})).status
    assert carried.lease == lapsed
    kept = find_condition(carried.conditions, c.OWNED)
    assert kept is not None
    assert kept.reason == c.REASON_LEASE_EXPIRED
    # no spec.lease: neither
    plain = plan(
        Observation(**{**base, "spec": InferenceWorkloadSpec.model_validate({"model": {"name": "m"}})})
    )
    assert plain.status.lease is None
    assert find_condition(plain.status.conditions, c.OWNED) is None


def test_record_clock_times_each_record_from_its_first_sight() -> None:
    now = [10.0]
    clock = RecordClock(clock=lambda: now[0], limit=2)
    lease = _lease()
    assert clock.seen("k", lease_record(lease)) == 10.0
    now[0] = 20.0
    assert clock.seen("k", lease_record(lease)) == 10.0
    assert clock.alive("k", lease_record(lease), 11.0)
    assert not clock.alive("k", lease_record(lease), 10.0)
    assert clock.seen("k", lease_record(_lease(rv="2"))) == 20.0  # a renew
    clock.seen("a", ("x", "", "")), clock.seen("b", ("y", "", ""))
    assert "k" not in clock._seen  # bounded: the oldest is forgotten


def test_abandoned_message_says_who_and_how_long() -> None:
    lease = _lease()
    lease["spec"]["renewTime"] = "2026-12-06T12:05:00.000000Z"
    status = LeaseStatus(
        state="Lapsed",
        holder="alice",
        acquired=NOW,
        ttl_seconds=30,
        delete_on_exit=True,
        lease="sparkrun-lease-wl",
    )
    message = abandoned_message(status, lease)
    assert message.startswith("abandoned")
    assert "alice" in message
    assert "5m00s" in message
    assert "30s" in message


def test_listing_entry_reads_only_a_trusted_lease() -> None:
    workload = {
        **WORKLOAD,
        "status": {
            "lease": {"state": "Held", "ttlSeconds": 30, "deleteOnExit": False, "lease": "sparkrun-lease-wl"}
        },
    }
    entry = info(workload, _lease())
    assert entry.owner == "alice"
    assert entry.state == "Held"
    assert entry.expires_at is not None
    squatted = info(workload, _lease(uid="mallory"))
    assert squatted.owner is None
    assert squatted.renewed is None
