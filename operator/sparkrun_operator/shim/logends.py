"""How a ``/v1/streams/logs`` stream ended: its completeness marker (issue 29). Pure; no I/O.

Every log stream the shim ends itself ends with one ``completeness`` frame, after every ``log``,
``gap`` and ``error`` frame, saying of each selected source (a container of a pod) whether the
client got all of its output, as sparkwing's log completeness does:

- **complete**: the container terminated and its log was read to the end (a following read
  ended there, or a read that does not follow started after it);
- **incomplete**, with a reason per source (:data:`REASONS`): output exists that the stream did
  not carry, or the shim cannot tell;
- **truncated**, with the bound (:data:`BOUNDS`): the read stopped at a bound the caller asked
  for, so earlier (``tail``) or later (``limit_bytes``) output may exist. A bound counts as
  reached when the read carried that many lines or bytes: with exactly that much output the
  stream says truncated although nothing was cut.

The stream's ``status`` is ``incomplete`` if any source is, else ``truncated`` if any source is,
else ``complete`` (so also for a stream that selected no source). A stream that ends without
the marker was cut on the way (the client's connection, a proxy, the shim stopping): treat it as
incomplete. :func:`judge` decides one source from what its read saw and its pod as read once
the read ended; :func:`marker` builds the frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

__all__ = ["BOUNDS", "REASONS", "SourceRead", "Start", "cut", "judge", "marker", "start_of"]

#: Why a source is incomplete.
REASONS: Final = {
    "pod_deleted": "the pod was deleted (gone, replaced by another of its name, or terminating) "
    "when its read ended",
    "running": "a read that does not follow began while the container had not terminated: more "
    "output may have come after it",
    "stream_cut": "a following read ended while the container still ran: the kubelet or the API "
    "server ended it",
    "container_restarted": "the container restarted during the stream: the stream carries one run",
    "read_error": "reading the log failed (the error frame says why)",
    "dropped": "lines were dropped because the client read too slowly (the gap frames count them)",
    "stream_closed": "the shim ended the stream before the read ended (the error frame says why)",
    "status_unknown": "the pod could not be read after its log ended, so its state is unknown",
}
#: Bounds a read stops at: ``tail`` (the caller's ``tail``, the pod log API's ``tailLines``) and
#: ``limit_bytes`` (the caller's ``limit_bytes``, the pod log API's ``limitBytes``).
BOUNDS: Final = ("tail", "limit_bytes")


@dataclass
class SourceRead:
    """What the read of one source saw."""

    source_id: str
    #: ``log`` frames the stream carried for the source.
    lines: int = 0
    #: Lines the source's read received (carried or dropped; a line the stream carries in
    #: pieces counts once), and their bytes.
    read_lines: int = 0
    read_bytes: int = 0
    dropped: int = 0
    #: Why the read failed, when it did.
    error: str | None = None
    #: The source's findings once decided (``None``: its read has not ended).
    findings: list[dict[str, Any]] | None = field(default=None)
    #: Whether the last piece read ended without a newline (a line still open).
    open_line: bool = False

    def take(self, raw: bytes) -> None:
        """Count one piece the read received (a whole line ends with a newline)."""
        self.read_bytes += len(raw)
        self.open_line = not raw.endswith(b"\n")
        if not self.open_line:
            self.read_lines += 1

    def eof(self) -> None:
        """The read ended: a last line without a newline counts too."""
        if self.open_line:
            self.read_lines += 1
            self.open_line = False


def _container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for entry in (*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())):
        if isinstance(entry, Mapping) and entry.get("name") == container:
            return entry
    return None


def _restarts(entry: Mapping[str, Any] | None) -> int:
    count = (entry or {}).get("restartCount")
    return count if isinstance(count, int) else 0


class Start(NamedTuple):
    """A source's container when the stream began."""

    #: Its restart count (0 without a status).
    restarts: int
    #: Whether it had terminated: its log was whole before the read started.
    terminated: bool


def start_of(pod: Mapping[str, Any], container: str) -> Start:
    """The container of ``pod`` as the stream begins."""
    entry = _container_status(pod, container)
    return Start(_restarts(entry), bool(((entry or {}).get("state") or {}).get("terminated")))


def _incomplete(read: SourceRead, reason: str, detail: str) -> dict[str, Any]:
    return {"kind": "incomplete", "source_id": read.source_id, "reason": reason, "detail": detail}


def _state_findings(
    read: SourceRead,
    pod: Mapping[str, Any] | None,
    *,
    uid: str | None,
    container: str,
    follow: bool,
    start: Start,
) -> list[dict[str, Any]]:
    meta = (pod or {}).get("metadata") or {}
    # NB: another pod of the name: the read (by name) may have carried its log as this source's
    replaced = pod is not None and uid is not None and meta.get("uid") != uid
    deleted = pod is None or replaced or bool(meta.get("deletionTimestamp"))
    if read.error is not None:
        return [_incomplete(read, "pod_deleted" if deleted else "read_error", read.error)]
    entry = None if pod is None or deleted else _container_status(pod, container)
    restarted = entry is not None and _restarts(entry) != start.restarts
    if start.terminated and not restarted and not replaced:
        # NB: a container that had terminated had its whole log: a read to its end is complete,
        # whether its pod is gone or terminating since
        return []
    if deleted:
        return [_incomplete(read, "pod_deleted", "the pod was deleted while its log was read")]
    if restarted:
        count = _restarts(entry) - start.restarts
        return [_incomplete(read, "container_restarted", f"restarted {count} times during the stream")]
    if follow and ((entry or {}).get("state") or {}).get("terminated"):
        return []  # NB: a following read ends where the container's output did
    if follow:
        return [_incomplete(read, "stream_cut", "the log stream ended while the container still ran")]
    # NB: terminated since the stream began or not, output may have come after the read ended
    return [_incomplete(read, "running", "the container had not terminated when the read began")]


def judge(
    read: SourceRead,
    pod: Mapping[str, Any] | None,
    *,
    pod_read: bool,
    uid: str | None,
    container: str,
    follow: bool,
    tail: int | None,
    limit_bytes: int | None,
    start: Start,
) -> list[dict[str, Any]]:
    """The findings of one source whose read ended: ``incomplete`` (reason, detail) and
    ``truncated`` (bound, limit) entries; none for a complete source. ``pod`` is the source's pod
    as read after the read ended (``None``: gone), ``pod_read`` whether that read worked;
    ``start`` its container when the stream began."""
    findings: list[dict[str, Any]] = []
    if read.dropped:
        findings.append(_incomplete(read, "dropped", f"{read.dropped} lines dropped"))
    if tail is not None and read.read_lines >= tail:
        findings.append({"kind": "truncated", "source_id": read.source_id, "bound": "tail", "limit": tail})
    if limit_bytes is not None and read.read_bytes >= limit_bytes:
        # NB: the read ended at the bound: the container's state says nothing about what it missed
        bound = {"kind": "truncated", "source_id": read.source_id, "bound": "limit_bytes"}
        return [*findings, {**bound, "limit": limit_bytes}]
    if not pod_read:
        return [*findings, _incomplete(read, "status_unknown", "the pod could not be read")]
    return findings + _state_findings(read, pod, uid=uid, container=container, follow=follow, start=start)


def cut(read: SourceRead, reason: Literal["stream_closed", "read_error"], why: str) -> list[dict[str, Any]]:
    """The findings of a source whose read ended before its source did: the shim ended it
    (``stream_closed``) or it failed unexpectedly (``read_error``); lines it dropped too."""
    findings = [_incomplete(read, "dropped", f"{read.dropped} lines dropped")] if read.dropped else []
    return [*findings, _incomplete(read, reason, why)]


def marker(reads: list[SourceRead]) -> dict[str, Any]:
    """The ``completeness`` frame of a stream whose sources were decided (see the module docs):
    ``{"type": "completeness", "status", "complete", "truncated", "sources": [{source_id,
    status, lines}], "incomplete": [{source_id, reason, detail}], "truncations": [{source_id,
    bound, limit}]}``."""
    incomplete: list[dict[str, Any]] = []
    truncations: list[dict[str, Any]] = []
    sources = []
    for read in reads:
        findings = read.findings or []
        kinds = {f["kind"] for f in findings}
        state = "incomplete" if "incomplete" in kinds else "truncated" if "truncated" in kinds else "complete"
        sources.append({"source_id": read.source_id, "status": state, "lines": read.lines})
        for found in findings:
            entry = {k: v for k, v in found.items() if k != "kind"}
            (incomplete if found["kind"] == "incomplete" else truncations).append(entry)
    status = "incomplete" if incomplete else "truncated" if truncations else "complete"
    return {
        "type": "completeness",
        "status": status,
        "complete": status == "complete",
        "truncated": bool(truncations),
        "sources": sources,
        "incomplete": incomplete,
        "truncations": truncations,
    }
