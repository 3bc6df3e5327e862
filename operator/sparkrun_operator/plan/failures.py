"""The failures of a workload's pods and the first failure of a group (ADR 0046). Pure.

Two halves:

- **parsing** a pod (as the apiserver returns it) into a :class:`FailureRecord`: the container
  that failed, its exit code or reason, when, the pod's replica, rank (leader 0; a worker the
  Job controller's completion index plus 1, as ``--node-rank`` is rendered), role and serving
  revision; with :func:`failure_of`'s ``redact``, also its last log lines: the termination
  message, which the kubelet fills with the end of the log when a container with
  ``terminationMessagePolicy: FallbackToLogsOnError`` fails (at most 80 lines / 2048 bytes).
  Every string comes from a tenant's pod, so each read is bounded before it is scanned, the
  log is redacted (the caller's ``redact``: the linear redaction of ADR 0037) before it is
  clipped, and clipped to :data:`~..api.history.FAILURE_LOG_LINES` lines, each at most
  :data:`~..api.history.FAILURE_LOG_LINE_CHARS` characters, their JSON at most
  :data:`~..api.history.FAILURE_LOG_BYTES` bytes.
- **keeping** (:func:`keep`): ``status.lastFailure`` is the newest failure seen;
  ``status.firstFailure`` the first one since the workload was last Ready for
  ``spec.failures.resetAfterReadySeconds`` without a newer failure. "Newer" is measured against
  the ``lastFailure`` already in the status, so a failure reported once (and then kept or
  cleared) never comes back from a pod or the operator's memory, and an operator restart loses
  nothing the status holds.
"""

from __future__ import annotations

import datetime as dt
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.history import FAILURE_LOG_BYTES, FAILURE_LOG_LINE_CHARS, FAILURE_LOG_LINES
from sparkrun_operator.api.meta import parse_time
from sparkrun_operator.api.workload import MAX_NODES, FailureRecord
from sparkrun_operator.render import keys

#: The label (Kubernetes 1.28+) and annotation the Job controller puts the completion index of
#: an Indexed Job's pod in (``JOB_COMPLETION_INDEX`` comes from the annotation).
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
#: How much of a termination message is read at all (the kubelet writes at most 4096 bytes; a
#: hostile status could hold more): the end of it, the partial first line dropped.
LOG_INPUT_CHARS: Final = 8192
#: With ``FallbackToLogsOnError`` the kubelet keeps the last 2048 bytes of the log's last 80
#: lines (a ring buffer): a message this long (in UTF-8; a character cut in half comes back as
#: U+FFFD, never shorter) may begin inside a line, so its first line is not shown.
KUBELET_LOG_BYTES: Final = 2048
#: ``FailureRecord.message`` of a pod failure: what the kubelet said, clipped.
MESSAGE_CHARS: Final = 1024
_REVISION_CHARS: Final = 16
_ROLES: Final = (keys.ROLE_LEADER, keys.ROLE_WORKER)

Redact = Callable[[str], str]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 12 and value.lstrip("-").isdigit():
        return int(value)
    return None


def rank_of(meta: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The role and node rank of an engine pod from its labels and annotations: the leader is
    rank 0; a worker is its completion index plus 1 (``--node-rank $((JOB_COMPLETION_INDEX+1))``)."""
    labels = _map(meta.get("labels"))
    role = labels.get(keys.LABEL_ROLE) or labels.get(keys.JOBSET_RJOB_LABEL)
    if role not in _ROLES:
        return None, None
    if role == keys.ROLE_LEADER:
        return role, 0
    index = _int(labels.get(COMPLETION_INDEX))
    if index is None:
        index = _int(_map(meta.get("annotations")).get(COMPLETION_INDEX))
    rank = index + 1 if index is not None and 0 <= index < MAX_NODES else None
    return role, rank


def _killed_by_deletion(meta: Mapping[str, Any], finished: dt.datetime) -> bool:
    """Whether a container ended because its pod was being deleted (a group restart, a scale
    down): it finished after the deletion was asked for (``deletionTimestamp`` minus the grace)."""
    deleting = parse_time(meta.get("deletionTimestamp"))
    if deleting is None:
        return False
    grace = _int(meta.get("deletionGracePeriodSeconds")) or 0
    return finished >= deleting - dt.timedelta(seconds=max(0, min(grace, 86_400)))


def _terminations(status: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        for cs in statuses[:64] if isinstance(statuses, list) else ():
            if not isinstance(cs, Mapping):
                continue
            name = cs.get("name")
            for state in (cs.get("state"), cs.get("lastState")):
                term = _map(state).get("terminated")
                if isinstance(term, Mapping):
                    yield (str(name)[:63] if isinstance(name, str) else "?"), term


def failure_of(obj: Mapping[str, Any], redact: Redact | None = None) -> FailureRecord | None:
    """The newest failure of a workload's pod: a container that exited non-zero (or was
    OOMKilled) on its own, not because the pod was being deleted; else, for a pod Failed without
    one (evicted, preempted, node lost), the pod's reason. With ``redact``, the failed
    container's termination message becomes the record's ``log`` (see :func:`log_lines`);
    without it the log is left out (never unredacted)."""
    meta = _map(obj.get("metadata"))
    status = _map(obj.get("status"))
    labels = _map(meta.get("labels"))
    name = str(meta.get("name") or "")[:253]
    role, rank = rank_of(meta)
    replica = _int(labels.get(keys.LABEL_REPLICA))
    revision = labels.get(keys.LABEL_REVISION)
    common: dict[str, Any] = {
        "object": f"Pod/{name}",
        "replica": replica if replica is not None and replica >= 0 else None,
        "rank": rank,
        "role": role,
        "revision": revision if isinstance(revision, str) and len(revision) <= _REVISION_CHARS else None,
    }
    best: tuple[dt.datetime, str, Mapping[str, Any]] | None = None
    for container, term in _terminations(status):
        code = _int(term.get("exitCode"))
        reason = term.get("reason")
        if code == 0 and reason != "OOMKilled":
            continue
        finished = parse_time(term.get("finishedAt"))
        if finished is None or _killed_by_deletion(meta, finished):
            continue
        if best is None or finished > best[0]:
            best = (finished, container, term)
    if best is not None:
        finished, container, term = best
        code = _int(term.get("exitCode"))
        reason = clip(str(term.get("reason") or "Error"), 64)
        message = _text(term.get("message"))
        return FailureRecord(
            reason=reason,
            message=f"container {container} exited with code {code}"
            + (f" ({reason})" if reason not in ("Error", "Completed") else ""),
            time=finished,
            exit_code=code,
            log=log_lines(message, redact) if redact is not None and message else [],
            **common,
        )
    if status.get("phase") == "Failed" and status.get("reason"):
        when = parse_time(meta.get("deletionTimestamp")) or parse_time(status.get("startTime"))
        return FailureRecord(
            reason=clip(str(status["reason"]), 64),
            message=clip(_text(status.get("message"))[:MESSAGE_CHARS], MESSAGE_CHARS),
            time=when or dt.datetime.fromtimestamp(0, dt.UTC),
            **common,
        )
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def log_lines(text: str, redact: Redact) -> list[str]:
    """The last lines of ``text`` (a termination message), redacted, then bounded: at most
    :data:`FAILURE_LOG_LINES` lines of at most :data:`FAILURE_LOG_LINE_CHARS` characters, whose
    JSON (quotes, escapes and separators included) is at most :data:`FAILURE_LOG_BYTES` bytes.

    Linear in ``text`` whatever it holds: only its last :data:`LOG_INPUT_CHARS` characters are
    read; when it was cut (there, or by the kubelet: :data:`KUBELET_LOG_BYTES`) its first line
    is dropped (a secret cut in half would escape the redaction). What a terminal does not show
    as text is removed *before* the redaction, so that it cannot split a secret's name from its
    value (:func:`_visible`); then the text is redacted whole (a secret spanning a line stays
    recognisable) and split. Blank lines are skipped."""
    cut = len(text) > LOG_INPUT_CHARS
    if cut:
        text = text[-LOG_INPUT_CHARS:]
    if cut or len(text.encode("utf-8", "surrogatepass")) >= KUBELET_LOG_BYTES:
        first = text.find("\n")
        text = text[first + 1 :] if first >= 0 else ""
    clean = redact(_visible(text))
    out: list[str] = []
    budget = FAILURE_LOG_BYTES - 2  # the brackets of the list
    for raw in reversed(clean.split("\n")):
        line = raw.rstrip()
        if not line:
            continue
        line = clip(line, FAILURE_LOG_LINE_CHARS)
        cost = len(json.dumps(line, ensure_ascii=False).encode("utf-8", "surrogatepass")) + (1 if out else 0)
        if cost > budget:
            break
        out.append(line)
        budget -= cost
        if len(out) == FAILURE_LOG_LINES:
            break
    out.reverse()
    return out


#: Line breaks besides ``\n``: a carriage return (a progress bar redraws its line), NEL, the
#: Unicode line and paragraph separators.
_BREAKS: Final = frozenset("\r\x85\u2028\u2029")
_ESC: Final = "\x1b"


def _escape_end(text: str, at: int) -> int:
    """Where the terminal escape sequence starting at ``text[at]`` (ESC) ends: a CSI sequence
    (``ESC [`` parameters, intermediates, a final byte), an OSC string (``ESC ]`` up to BEL,
    ``ESC \\`` or the line's end), or ESC and one character. Never beyond ``len(text)``."""
    n = len(text)
    if at + 1 >= n:
        return n
    kind = text[at + 1]
    i = at + 2
    if kind == "[":
        while i < n and "\x20" <= text[i] <= "\x3f":
            i += 1
        return min(n, i + 1) if i < n and "\x40" <= text[i] <= "\x7e" else i
    if kind == "]":
        while i < n and text[i] not in "\x07\x1b\n":
            i += 1
        if i < n and text[i] == "\x07":
            return i + 1
        return min(n, i + 2) if text.startswith(_ESC + "\\", i) else i
    return at + 2


def _visible(text: str) -> str:
    """``text`` as a terminal shows it, in one pass: line breaks become ``\n``; terminal escape
    sequences, other control characters and format characters (bidi overrides and isolates,
    zero-width spaces, the byte order mark) are dropped; other spaces become a plain space; a
    lone surrogate (invalid UTF-8 read leniently) becomes U+FFFD. Tabs stay."""
    out: list[str] = []
    append = out.append
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if " " <= ch <= "~" or ch in "\n\t":
            append(ch)
        elif ch == _ESC:
            i = _escape_end(text, i)
            continue
        elif ch in _BREAKS:
            if not (ch == "\r" and text.startswith("\n", i + 1)):
                append("\n")
        elif ch > "\x9f":
            kind = unicodedata.category(ch)
            if kind == "Cs":
                append("\ufffd")
            elif kind == "Zs":
                append(" ")
            elif kind != "Cf":
                append(ch)
        i += 1
    return "".join(out)


# -- keeping: status.firstFailure and status.lastFailure --------------------------------------


def _order(record: FailureRecord) -> tuple[dt.datetime, bool]:
    """Earliest first; at the same second a record with log lines. Sorting is stable: within a
    second the candidates keep the order they were recorded in (the pod events' order), as
    the rank that died first is usually the one whose pod the kubelet reported first (its
    peers die of losing it, in the same second)."""
    return record.time, not record.log


def _same(a: FailureRecord, b: FailureRecord) -> bool:
    return a.object == b.object and a.time == b.time and a.reason == b.reason


def _richer(kept: FailureRecord | None, candidates: list[FailureRecord]) -> FailureRecord | None:
    """``kept``, or the same failure as a candidate has it with its log lines (the pod event's
    record, when a pass saw the pod before the event was recorded)."""
    if kept is None or kept.log:
        return kept
    twin = next((c for c in candidates if c.log and _same(c, kept)), None)
    return twin or kept


def keep(
    *,
    first: FailureRecord | None,
    last: FailureRecord | None,
    candidates: Iterable[FailureRecord],
    ready_since: dt.datetime | None,
    now: dt.datetime,
    reset_after: int,
) -> tuple[FailureRecord | None, FailureRecord | None, float | None]:
    """The new ``(firstFailure, lastFailure)`` from the status' and the failures seen now, and
    in how many seconds the first failure is to be cleared (``None``: not while nothing changes).

    A candidate is new when it is newer than ``last``. The newest new one becomes ``last``; when
    no first failure is kept, the earliest new one becomes ``first``. ``first`` is cleared once
    ``ready_since`` (the Ready condition True since then) and the newest failure are both
    ``reset_after`` seconds in the past."""
    seen = list(candidates)
    mark = last.time if last is not None else None
    new = sorted((c for c in seen if mark is None or c.time > mark), key=_order)
    if new:
        newest = [c for c in new if c.time == new[-1].time]
        last = next((c for c in reversed(newest) if c.log), newest[-1])
    else:
        last = _richer(last, seen)
    first = _richer(first, seen) if first is not None else (new[0] if new else None)
    if first is None or ready_since is None:
        return first, last, None
    quiet_since = max(ready_since, last.time if last is not None else ready_since)
    left = (quiet_since + dt.timedelta(seconds=reset_after) - now).total_seconds()
    if left <= 0:
        return None, last, None
    return first, last, left
