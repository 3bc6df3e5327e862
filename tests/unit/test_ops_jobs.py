"""Daemon jobs as DaemonJob objects (``ops/jobs.py``): pure functions, no cluster.

Tested: job ids and request digests (idempotency), the event log (ids, the synthesized queued
event, trimming and ``firstEventId``), terminal transitions with results (inline, compressed,
over the 2 MiB limit), cancellation, and that the public Job, Prompt, Error and Event envelopes
satisfy the reference daemon's envelope schemas (including the per-operation result
discrimination); retention (delete, tombstone, never active jobs).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import gzip
import time
import zlib
from typing import Any

import jsonschema
import pytest

from sparkrun_operator.api.daemonjob import MAX_EVENTS, DaemonJobStatus
from sparkrun_operator.ops import catalog, jobs
from sparkrun_operator.ops.errors import Conflict, DaemonError, NotFound
from sparkrun_operator.shim import openapi

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
OPS = catalog.load()
DOCUMENT = openapi.build(OPS, version="test")


def _job(state: str | None = None, **status: Any) -> dict[str, Any]:
    obj = jobs.new_job(
        name="a" * 32,
        namespace="ns",
        operation="cluster.create",
        version=1,
        arguments={"name": "lab", "hosts": ["x"]},
        username="alice",
        uid="u1",
        groups=["g"],
        manager="daemon",
        client="cli",
        key="k",
        digest="0" * 64,
    )
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if state is not None or status:
        obj["status"] = {"state": state, **status} if state else dict(status)
    return obj


def _validate(instance: Any, name: str) -> None:
    schema = {"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]}
    jsonschema.Draft202012Validator(schema).validate(instance)


def test_job_ids_derive_from_principal_and_key() -> None:
    assert jobs.job_name("alice", "k") == jobs.job_name("alice", "k")
    assert jobs.job_name("alice", "k") != jobs.job_name("bob", "k")
    assert len(jobs.job_name("alice", "k")) == len(jobs.job_name("alice", None)) == 32
    assert jobs.job_name("alice", None) != jobs.job_name("alice", None)


def test_request_digest_covers_operation_version_arguments_and_manager() -> None:
    base = jobs.request_digest("cluster.create", 1, {"a": 1, "b": [1, 2]}, "daemon")
    assert base == jobs.request_digest("cluster.create", 1, {"b": [1, 2], "a": 1}, "daemon")
    assert base != jobs.request_digest("cluster.update", 1, {"a": 1, "b": [1, 2]}, "daemon")
    assert base != jobs.request_digest("cluster.create", 2, {"a": 1, "b": [1, 2]}, "daemon")
    assert base != jobs.request_digest("cluster.create", 1, {"a": 1, "b": [2, 1]}, "daemon")
    assert base != jobs.request_digest("cluster.create", 1, {"a": 1, "b": [1, 2]}, "automation")


def test_a_new_job_reads_as_queued_with_one_event() -> None:
    obj = _job()
    assert jobs.state_of(obj) == "queued"
    events, first = jobs.events(obj)
    assert events == [{"id": 1, "type": "state", "state": "queued"}]
    assert first == 1
    public = jobs.public_job(obj, scope="admin")
    assert public["seq"] == 1
    assert public["principal"] == "alice"
    assert public["client"] == "cli"
    assert "arguments" not in public
    _validate(public, "DaemonJob")


def test_event_log_ids_and_trimming() -> None:
    status = DaemonJobStatus()
    jobs.set_state(status, "starting", now=T0, created=T0)
    assert [(e.id, e.data) for e in status.events] == [(1, {"state": "queued"}), (2, {"state": "starting"})]
    jobs.set_state(status, "starting", now=T0, created=T0)  # unchanged: no event
    assert status.next_event_id == 3
    for index in range(MAX_EVENTS + 50):
        jobs.add_event(status, "log", {"message": str(index)}, now=T0, created=T0)
    assert len(status.events) == MAX_EVENTS
    assert status.first_event_id == status.events[0].id == status.next_event_id - MAX_EVENTS
    wire = {**_job(), "status": status.to_wire()}
    events, first = jobs.events(wire)
    assert first == status.first_event_id
    assert [e["id"] for e in events] == list(range(first, status.next_event_id))
    assert jobs.last_event_id(wire) == status.next_event_id - 1


def test_finish_with_a_small_result() -> None:
    status = DaemonJobStatus()
    assert jobs.finish(status, "succeeded", now=T0, created=T0, result={"ok": True})
    assert status.result == {"ok": True}
    assert [e.type for e in status.events][-2:] == ["result", "state"]
    assert status.events[-2].data == {"available": True}
    assert not jobs.finish(status, "failed", now=T0, created=T0)  # already terminal


def test_large_results_are_compressed_and_too_large_ones_fail() -> None:
    big = {"rows": ["x" * 100] * 5000}  # ~520 KB encoded
    status = DaemonJobStatus()
    jobs.finish(status, "succeeded", now=T0, created=T0, result=big)
    assert status.result is None
    assert status.result_gzip
    assert jobs.result_of(status.to_wire()) == big
    huge = {"rows": [str(i) * 10 for i in range(300_000)]}
    status = DaemonJobStatus()
    jobs.finish(status, "succeeded", now=T0, created=T0, result=huge)
    assert status.state == "failed"
    assert status.error is not None
    assert status.error.type == "ResultTooLarge"
    assert status.result is None
    assert status.result_gzip is None


def test_results_may_be_any_json_value() -> None:
    for value in ([1, 2], True, 3, "s"):
        status = DaemonJobStatus()
        jobs.finish(status, "succeeded", now=T0, created=T0, result=value)
        assert jobs.result_of(status.to_wire()) == value


def test_cancel_queued_running_and_finished() -> None:
    status = DaemonJobStatus()
    jobs.cancel(status, now=T0, created=T0)
    assert status.state == "cancelled"
    assert status.cancelled_at == T0
    status = DaemonJobStatus()
    jobs.set_state(status, "running", now=T0, created=T0)
    jobs.cancel(status, now=T0, created=T0)
    assert status.state == "cancelling"
    jobs.finish(status, "cancelled", now=T0, created=T0)
    with pytest.raises(Conflict):
        jobs.cancel(status, now=T0, created=T0)


def test_public_envelopes_match_the_reference_schemas() -> None:
    status = DaemonJobStatus()
    jobs.set_state(status, "running", now=T0, created=T0)
    status.prompt = jobs.new_prompt("p1", "approval", "Launch?", default=False, expires=T0)
    obj = {**_job(), "status": status.to_wire()}
    public = jobs.public_job(obj, scope="admin")
    assert public["prompt"] == {
        "prompt_id": "p1",
        "kind": "approval",
        "message": "Launch?",
        "default": False,
        "deadline": T0.timestamp(),
    }
    _validate(public, "DaemonJob")
    _validate(public["prompt"], "DaemonPrompt")
    jobs.finish(status, "failed", now=T0, created=T0, error=NotFound("Unknown cluster: x"))
    failed = jobs.public_job({**_job(), "status": status.to_wire()}, scope="admin")
    assert failed["error"] == {
        "detail": "Unknown cluster: x",
        "error": {"type": "LookupError", "retryable": False, "attrs": {}},
    }
    _validate(failed, "DaemonJob")
    _validate(failed["error"], "DaemonOperationError")
    for event in jobs.events({**_job(), "status": status.to_wire()})[0]:
        _validate(event, "DaemonEvent")


def test_a_succeeded_result_is_discriminated_by_operation() -> None:
    status = DaemonJobStatus()
    jobs.finish(status, "succeeded", now=T0, created=T0, result={"not": "a cluster"})
    wrong = jobs.public_job({**_job(), "status": status.to_wire()}, scope="admin")
    with pytest.raises(jsonschema.ValidationError):
        _validate(wrong, "DaemonJob")


def _finished(name: str, *, days: float, keyed: bool, created_days: float | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(_job("succeeded"))
    obj["metadata"]["name"] = name
    stamp = (T0 - dt.timedelta(days=days)).isoformat()
    obj["metadata"]["creationTimestamp"] = (
        T0 - dt.timedelta(days=created_days if created_days is not None else days)
    ).isoformat()
    obj["status"]["finishedAt"] = stamp
    if not keyed:
        obj["spec"].pop("idempotencyKey")
    return obj


def test_retention_deletes_tombstones_and_never_touches_active_jobs() -> None:
    active = _job("running")
    active["metadata"]["name"] = "active"
    active["metadata"]["creationTimestamp"] = (T0 - dt.timedelta(days=90)).isoformat()
    tombstone = _finished("old-tomb", days=40, keyed=True)
    tombstone["metadata"]["labels"][jobs.LABEL_TOMBSTONE] = "true"
    fresh_tomb = _finished("new-tomb", days=10, keyed=True)
    fresh_tomb["metadata"]["labels"][jobs.LABEL_TOMBSTONE] = "true"
    actions = jobs.retention_actions(
        [
            active,
            _finished("recent", days=1, keyed=True),
            _finished("keyed", days=8, keyed=True),
            _finished("plain", days=8, keyed=False),
            _finished("ancient-keyed", days=31, keyed=True),
            tombstone,
            fresh_tomb,
        ],
        now=T0,
    )
    assert sorted(actions) == [
        ("ancient-keyed", "delete"),
        ("keyed", "tombstone"),
        ("old-tomb", "delete"),
        ("plain", "delete"),
    ]


def test_retention_keeps_at_most_the_newest_jobs() -> None:
    many = [_finished(f"j{i}", days=i / 100, keyed=False) for i in range(10)]
    actions = jobs.retention_actions(many, now=T0, max_count=7)
    assert sorted(name for name, _ in actions) == ["j7", "j8", "j9"]


def test_job_errors_keep_type_retryable_and_attrs() -> None:
    stored = jobs.job_error(DaemonError("boom", attrs={"a": 1}, retryable=True, type_name="X"))
    assert jobs.public_error(stored) == {
        "detail": "boom",
        "error": {"type": "X", "retryable": True, "attrs": {"a": 1}},
    }


def test_retention_bounds_the_number_of_tombstones() -> None:
    tombs = []
    for i in range(6):
        tomb = _finished(f"t{i}", days=1 + i, keyed=True)
        tomb["metadata"]["labels"][jobs.LABEL_TOMBSTONE] = "true"
        tombs.append(tomb)
    expired = [_finished(f"k{i}", days=8 + i / 100, keyed=True) for i in range(2)]  # would become tombstones
    actions = jobs.retention_actions([*tombs, *expired], now=T0, max_tombstones=4)
    # Newest first by creation: k0, k1 (created 8 days ago) are older than t0..t5 (1-6 days):
    # the four newest tombstones (t0..t3) stay; t4, t5 and the would-be tombstones go.
    assert sorted(actions) == [("k0", "delete"), ("k1", "delete"), ("t4", "delete"), ("t5", "delete")]


def _packed(data: bytes) -> str:
    return base64.b64encode(gzip.compress(data, compresslevel=9)).decode("ascii")


def _bomb(mebibytes: int) -> str:
    """``resultGzip`` of ``mebibytes`` MiB of spaces, compressed chunk by chunk (never held whole)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1024 * 1024)
    packed = b"".join(deflate.compress(chunk) for _ in range(mebibytes)) + deflate.flush()
    return base64.b64encode(packed).decode("ascii")


def test_a_stored_result_is_decompressed_within_the_result_cap() -> None:
    # A real compressed result reads back whole.
    result = {"rows": ["x" * 1000] * 1000}
    inline, packed, _ = jobs.encode_result(result)
    assert inline is None
    assert packed is not None
    assert jobs.result_of({"resultGzip": packed}) == result
    # A gzip bomb: 340 KiB of base64 that expands to 256 MiB (JSON whitespace). Reading it stops
    # after the cap (2 MiB) instead of allocating all of it, and says so.
    bomb = _bomb(256)
    assert len(bomb) < 400 * 1024
    started = time.process_time()
    with pytest.raises(DaemonError) as refused:
        jobs.result_of({"resultGzip": bomb})
    assert time.process_time() - started < 0.5
    assert refused.value.error_type == "ResultTooLarge"
    assert refused.value.attrs == {"limit_bytes": jobs.MAX_RESULT_BYTES}
    # At the cap exactly it is still a result.
    at_cap = b'"' + b"y" * (jobs.MAX_RESULT_BYTES - 2) + b'"'
    assert len(jobs.result_of({"resultGzip": _packed(at_cap)})) == jobs.MAX_RESULT_BYTES - 2


@pytest.mark.parametrize(
    "packed",
    [
        "not base64!",
        base64.b64encode(b"not gzip").decode(),
        base64.b64encode(gzip.compress(b"[1]") + gzip.compress(b"[2]")).decode(),  # two members
        base64.b64encode(gzip.compress(b"[1, 2, 3]")[:-6]).decode(),  # truncated
        _packed(b"[" * 200 + b"]" * 200),  # deeper than a result may be read
        _packed(b"{not json"),
    ],
    ids=["not-base64", "not-gzip", "two-members", "truncated", "too-deep", "not-json"],
)
def test_a_stored_result_that_the_operator_could_not_have_written_is_an_error(packed: str) -> None:
    with pytest.raises(DaemonError) as refused:
        jobs.result_of({"resultGzip": packed})
    assert refused.value.error_type in {"ResultUnreadable", "ResultTooLarge"}
    # The job envelope reports it as the job's error (a listing of jobs keeps working).
    public = jobs.public_job(
        {**_job("succeeded"), "status": {"state": "succeeded", "resultGzip": packed}}, scope="admin"
    )
    assert public["result"] is None
    assert public["error"]["error"]["type"] == refused.value.error_type
