"""Daemon jobs as ``DaemonJob`` objects: naming, idempotency digests, status transitions and the
public envelopes (Job, Prompt, Event). Pure functions; no I/O.

A job's ``job_id`` is its DaemonJob's name: 32 lowercase hex characters, random for a
submission without ``Idempotency-Key`` and ``sha256(principal NUL key)`` otherwise, so a retry
with the same key from the same principal addresses the same object and the apiserver's
``AlreadyExists`` is the idempotency check. ``spec.requestDigest`` is
``sha256`` of the canonical JSON of ``{op, version, arguments, manager}``; a retry with the
same key and a different digest is a conflict (409). The digest also pins the arguments,
and the arguments have the CRD's bounds before a job is created and again before it is
executed (``ops/jobargs.py``).

Status protocol (both the shim and the operator write ``status``, always as a read-modify-write
guarded by ``resourceVersion``):

- an empty status means ``queued``; the event log then reads as one synthesized event
  ``{"id": 1, "type": "state", "state": "queued"}``, which the first real status write records;
- events get consecutive ids from 1 (``status.nextEventId`` is the next one); at most
  :data:`~sparkrun_operator.api.daemonjob.MAX_EVENTS` are kept and ``status.firstEventId`` is
  the oldest kept. A replay cursor older than ``firstEventId - 1`` has expired (410);
- a state change appends ``{"type": "state", "state": ...}``; a finish appends ``result``
  (``{"available": true}``, never the result itself) and/or ``error`` before the final state.

Retention (:func:`retention_actions`): terminal jobs are kept 7 days (and at most 1000); a job
submitted with an idempotency key then becomes a *tombstone* (label
``sparkrun.dev/tombstone=true``, result/events/error removed) that keeps its key answering 409
for 30 days after submission; other jobs are deleted. Active jobs are never touched.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import gzip
import hashlib
import json
import uuid
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from sparkrun_operator import safeload
from sparkrun_operator.api.daemonjob import (
    MAX_EVENTS,
    RESULT_INLINE_BYTES,
    DaemonJobStatus,
    JobError,
    JobEvent,
    JobPrompt,
    JobState,
)
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.ops.errors import Conflict, DaemonError
from sparkrun_operator.ops.jobargs import check_arguments, request_digest, verified_arguments
from sparkrun_operator.render import keys

__all__ = [
    "ACTIVE",
    "LABEL_OPERATION",
    "LABEL_PRINCIPAL",
    "LABEL_TOMBSTONE",
    "MAX_KEY_LENGTH",
    "MAX_RESULT_BYTES",
    "NONTERMINAL",
    "TERMINAL",
    "add_event",
    "cancel",
    "check_arguments",
    "encode_result",
    "epoch",
    "events",
    "finish",
    "job_error",
    "job_name",
    "new_job",
    "principal_label",
    "public_event",
    "public_job",
    "request_digest",
    "result_of",
    "retention_actions",
    "set_state",
    "state_of",
    "status_of",
    "verified_arguments",
]

TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "lost"})
ACTIVE: frozenset[str] = frozenset({"starting", "running", "waiting_input", "cancelling"})
NONTERMINAL: frozenset[str] = ACTIVE | {"queued"}

LABEL_PRINCIPAL = keys.LABEL_PRINCIPAL
LABEL_OPERATION = keys.LABEL_OPERATION
LABEL_TOMBSTONE = keys.LABEL_TOMBSTONE
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"

MAX_KEY_LENGTH = 200
MAX_RESULT_BYTES = 2 * 1024 * 1024
RETENTION = dt.timedelta(days=7)
TOMBSTONE_RETENTION = dt.timedelta(days=30)
#: Tombstones kept at most (the oldest beyond are deleted): bounds what idempotency costs.
MAX_TOMBSTONES = 10_000
RETAINED_JOBS = 1000


def principal_label(username: str) -> str:
    """Label value identifying a principal (a digest: user names may not be label values)."""
    return hashlib.sha256(username.encode()).hexdigest()[:40]


def job_name(username: str, key: str | None) -> str:
    """The job id: derived from (principal, key) when keyed, else random."""
    if key is None:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{username}\0{key}".encode()).hexdigest()[:32]


def new_job(
    *,
    name: str,
    namespace: str,
    operation: str,
    version: int,
    arguments: Mapping[str, Any],
    username: str,
    uid: str | None,
    groups: Iterable[str],
    manager: str,
    client: str | None,
    key: str | None,
    digest: str,
    if_match: str | None = None,
) -> dict[str, Any]:
    """The DaemonJob object a submission creates (``if_match``: ``spec.ifMatch``, ADR 0049)."""
    principal: dict[str, Any] = {"username": username, "groups": list(groups)}
    if uid:
        principal["uid"] = uid
    spec: dict[str, Any] = {
        "operation": operation,
        "operationVersion": version,
        "arguments": dict(arguments),
        "principal": principal,
        "manager": manager,
        "requestDigest": digest,
    }
    if client:
        spec["client"] = client[:100]
    if key is not None:
        spec["idempotencyKey"] = key
    if if_match is not None:
        spec["ifMatch"] = if_match
    return {
        "apiVersion": API_VERSION,
        "kind": DAEMON_JOB.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                LABEL_PRINCIPAL: principal_label(username),
                LABEL_OPERATION: operation,
                LABEL_MANAGED_BY: keys.MANAGED_BY_SHIM,
            },
        },
        "spec": spec,
    }


def status_of(obj: Mapping[str, Any]) -> DaemonJobStatus:
    """The typed status (empty when the object has none yet)."""
    return DaemonJobStatus.model_validate(obj.get("status") or {})


def state_of(obj: Mapping[str, Any]) -> str:
    """The job state; an object without status is ``queued``."""
    status = obj.get("status") or {}
    return str(status.get("state") or "queued")


def is_tombstone(obj: Mapping[str, Any]) -> bool:
    return (obj.get("metadata", {}).get("labels") or {}).get(LABEL_TOMBSTONE) == "true"


def _created(obj: Mapping[str, Any]) -> dt.datetime:
    raw = obj.get("metadata", {}).get("creationTimestamp")
    if not raw:
        return dt.datetime.now(dt.UTC)
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def epoch(value: dt.datetime | str | None) -> float | None:
    """Seconds since the epoch (the daemon's timestamps), or ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


# ---------------------------------------------------------------------------------------------
# Status transitions (mutate a DaemonJobStatus in place)
# ---------------------------------------------------------------------------------------------


def _record_queued(status: DaemonJobStatus, created: dt.datetime) -> None:
    """Make the implicit first event (queued) explicit."""
    if status.next_event_id == 0:
        status.events.append(JobEvent(id=1, time=created, type="state", data={"state": "queued"}))
        status.first_event_id = 1
        status.next_event_id = 2
        status.state = status.state or "queued"


def add_event(
    status: DaemonJobStatus, type: str, data: Mapping[str, Any], *, now: dt.datetime, created: dt.datetime
) -> int:
    """Append one event; returns its id. Keeps at most ``MAX_EVENTS``."""
    _record_queued(status, created)
    event_id = status.next_event_id
    status.events.append(JobEvent(id=event_id, time=now, type=type, data=dict(data)))
    status.next_event_id = event_id + 1
    if len(status.events) > MAX_EVENTS:
        del status.events[: len(status.events) - MAX_EVENTS]
    status.first_event_id = status.events[0].id
    status.updated_at = now
    return event_id


def set_state(status: DaemonJobStatus, state: JobState, *, now: dt.datetime, created: dt.datetime) -> None:
    """Change state (recording a ``state`` event); no event when unchanged."""
    _record_queued(status, created)
    if status.state == state:
        return
    status.state = state
    add_event(status, "state", {"state": state}, now=now, created=created)


def job_error(error: DaemonError) -> JobError:
    """The stored form of a failure."""
    return JobError(
        type=error.error_type, message=error.detail, retryable=error.retryable, details=error.attrs or None
    )


def encode_result(result: Any) -> tuple[Any, str | None, int]:
    """``(inline, gzip_b64, size)`` for a result: inline when small, compressed otherwise."""
    encoded = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
    size = len(encoded)
    if size <= RESULT_INLINE_BYTES:
        return result, None, size
    return None, base64.b64encode(gzip.compress(encoded, compresslevel=6)).decode("ascii"), size


#: A stored result read back: at most the result cap decompressed, nested at most 128 levels.
STORED_RESULT: Final = safeload.Bounds("stored result", MAX_RESULT_BYTES, safeload.MAX_DEPTH)


def _unpacked(packed: str) -> bytes:
    """``resultGzip`` decompressed, never more than :data:`MAX_RESULT_BYTES` (a small gzip
    member can expand a thousandfold). Raises ``DaemonError``."""
    try:
        data = base64.b64decode(packed, validate=True)
        inflate = zlib.decompressobj(wbits=31)  # gzip framing
        out = inflate.decompress(data, MAX_RESULT_BYTES + 1)
    except (binascii.Error, zlib.error) as error:
        raise DaemonError(
            f"The stored result is not valid gzip ({error})", type_name="ResultUnreadable"
        ) from None
    if len(out) > MAX_RESULT_BYTES or inflate.unconsumed_tail:
        raise DaemonError(
            f"The stored result expands beyond {MAX_RESULT_BYTES} bytes",
            attrs={"limit_bytes": MAX_RESULT_BYTES},
            type_name="ResultTooLarge",
        )
    if not inflate.eof or inflate.unused_data:
        raise DaemonError("The stored result is not one complete gzip member", type_name="ResultUnreadable")
    return out


def result_of(status: Mapping[str, Any]) -> Any:
    """The stored result (decompressing ``resultGzip`` within :data:`STORED_RESULT`). Raises
    ``DaemonError`` for a ``resultGzip`` that is not a result the operator could have written."""
    packed = status.get("resultGzip")
    if packed:
        try:
            return safeload.load_json(_unpacked(str(packed)), STORED_RESULT)
        except safeload.DocumentError as error:
            raise DaemonError(str(error), type_name="ResultUnreadable") from None
    return status.get("result")


def finish(
    status: DaemonJobStatus,
    state: Literal["succeeded", "failed", "cancelled", "lost"],
    *,
    now: dt.datetime,
    created: dt.datetime,
    result: Any = None,
    error: DaemonError | None = None,
) -> bool:
    """Reach a terminal state; ``False`` (nothing changed) when already terminal.

    A result larger than :data:`MAX_RESULT_BYTES` encoded fails the job instead
    (``ResultTooLarge``).
    """
    _record_queued(status, created)
    if status.state in TERMINAL:
        return False
    inline, packed = None, None
    if state == "succeeded" and result is not None:
        inline, packed, size = encode_result(result)
        if size > MAX_RESULT_BYTES:
            state, inline, packed = "failed", None, None
            error = DaemonError(
                f"Result exceeds 2 MiB ({size} bytes encoded)",
                attrs={"size_bytes": size, "limit_bytes": MAX_RESULT_BYTES},
                type_name="ResultTooLarge",
            )
        else:
            add_event(status, "result", {"available": True}, now=now, created=created)
    status.result, status.result_gzip = inline, packed
    status.prompt = None
    if error is not None:
        stored = job_error(error)
        status.error = stored
        add_event(status, "error", {"error": public_error(stored)}, now=now, created=created)
    set_state(status, state, now=now, created=created)
    status.finished_at = now
    return True


def cancel(status: DaemonJobStatus, *, now: dt.datetime, created: dt.datetime) -> None:
    """A cancellation request: queued jobs are cancelled at once, running ones start cancelling.

    Raises :class:`Conflict` for a finished job.
    """
    state = status.state or "queued"
    if state in TERMINAL:
        raise Conflict("Job is already finished")
    status.cancelled_at = status.cancelled_at or now
    if state == "queued":
        set_state(status, "cancelled", now=now, created=created)
        status.finished_at = now
    else:
        set_state(status, "cancelling", now=now, created=created)


# ---------------------------------------------------------------------------------------------
# Public envelopes
# ---------------------------------------------------------------------------------------------


def public_error(error: JobError | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"detail", "error": {"type", "retryable", "attrs"}}``."""
    if error is None:
        return None
    if isinstance(error, JobError):
        raw: Mapping[str, Any] = error.model_dump()
    else:
        raw = error
    return {
        "detail": str(raw.get("message", "")),
        "error": {
            "type": str(raw.get("type", "InternalError")),
            "retryable": bool(raw.get("retryable", False)),
            "attrs": dict(raw.get("details") or {}),
        },
    }


def public_prompt(prompt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"prompt_id", "kind", "message", "default", "deadline"}``."""
    if not prompt:
        return None
    return {
        "prompt_id": prompt["id"],
        "kind": prompt["kind"],
        "message": prompt.get("message", ""),
        "default": prompt.get("default"),
        "deadline": epoch(prompt.get("expiresAt")) or 0.0,
    }


def public_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """One SSE payload: ``{"id", "type", ...data}``."""
    return {"id": event["id"], "type": event["type"], **(event.get("data") or {})}


def events(obj: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """``(public events, first retained id)``; an object without status has the queued event."""
    status = obj.get("status") or {}
    stored = status.get("events") or []
    if not stored and not status.get("nextEventId"):
        created = _created(obj).isoformat()
        return [public_event({"id": 1, "type": "state", "data": {"state": "queued"}, "time": created})], 1
    return [public_event(e) for e in stored], int(status.get("firstEventId") or 1)


def last_event_id(obj: Mapping[str, Any]) -> int:
    """The id of the newest event (the Job's ``seq``)."""
    status = obj.get("status") or {}
    return max(int(status.get("nextEventId") or 2) - 1, 1)


def public_job(obj: Mapping[str, Any], *, scope: str) -> dict[str, Any]:
    """The Job envelope of ``GET /v1/jobs/{id}`` (no arguments, worker or lease details). A
    stored result that cannot be read back (:func:`result_of`) is reported as the job's error,
    so one such job does not break a listing."""
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    status = obj.get("status") or {}
    created = epoch(meta.get("creationTimestamp")) or 0.0
    error = public_error(status.get("error"))
    try:
        result = result_of(status)
    except DaemonError as unreadable:
        result, error = None, error or public_error(job_error(unreadable))
    return {
        "id": meta.get("name", ""),
        "operation": spec.get("operation", ""),
        "version": int(spec.get("operationVersion", 1)),
        "principal": (spec.get("principal") or {}).get("username", ""),
        "client": spec.get("client") or "",
        "scope": scope,
        "state": state_of(obj),
        "created": created,
        "updated": epoch(status.get("updatedAt")) or created,
        "result": result,
        "error": error,
        "prompt": public_prompt(status.get("prompt")),
        "cancelled": epoch(status.get("cancelledAt")),
        "seq": last_event_id(obj),
        "manager": spec.get("manager", "daemon"),
    }


# ---------------------------------------------------------------------------------------------
# Retention
# ---------------------------------------------------------------------------------------------


def _finished(obj: Mapping[str, Any]) -> dt.datetime:
    status = obj.get("status") or {}
    raw = status.get("finishedAt") or status.get("updatedAt")
    if raw:
        return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    return _created(obj)


def retention_actions(
    jobs: Iterable[Mapping[str, Any]],
    *,
    now: dt.datetime,
    max_age: dt.timedelta = RETENTION,
    tombstone_age: dt.timedelta = TOMBSTONE_RETENTION,
    max_count: int = RETAINED_JOBS,
    max_tombstones: int = MAX_TOMBSTONES,
) -> list[tuple[str, Literal["tombstone", "delete"]]]:
    """What to do with which job: ``(name, "tombstone" | "delete")``; active jobs never appear."""
    actions: list[tuple[str, Literal["tombstone", "delete"]]] = []
    finished = []
    tombstones = []
    for obj in jobs:
        name = obj["metadata"]["name"]
        if is_tombstone(obj):
            if _created(obj) < now - tombstone_age:
                actions.append((name, "delete"))
            else:
                tombstones.append(obj)
            continue
        if state_of(obj) in TERMINAL:
            finished.append(obj)
    finished.sort(key=_finished, reverse=True)
    for index, obj in enumerate(finished):
        if index < max_count and _finished(obj) >= now - max_age:
            continue
        keyed = bool((obj.get("spec") or {}).get("idempotencyKey"))
        if keyed and _created(obj) >= now - tombstone_age:
            actions.append((obj["metadata"]["name"], "tombstone"))
            tombstones.append(obj)
        else:
            actions.append((obj["metadata"]["name"], "delete"))
    # NB: the newest tombstones are kept; a new tombstone may push out an old one.
    tombstones.sort(key=_created, reverse=True)
    doomed = {o["metadata"]["name"] for o in tombstones[max(0, max_tombstones) :]}
    actions = [(n, "delete" if n in doomed else a) for n, a in actions]
    actions += [(n, "delete") for n in sorted(doomed - {n for n, _ in actions})]
    return actions


def new_prompt(prompt_id: str, kind: str, message: str, *, default: Any, expires: dt.datetime) -> JobPrompt:
    """A pending prompt."""
    return JobPrompt.model_validate(
        {"id": prompt_id, "kind": kind, "message": message, "default": default, "expiresAt": expires}
    )
