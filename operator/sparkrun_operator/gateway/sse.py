"""Incremental Server-Sent Events parsing (for translating upstream OpenAI streams).

Linear in the bytes fed, however they are split into reads: every byte is scanned once (by
``bytes.splitlines``, which splits at LF, CRLF and CR, and nothing else), complete lines are
handled as they arrive, and only the unfinished last line of a read is kept (appended to, never
copied again). A CR that ends a read may be the first half of a CRLF: the line ends there, and an
LF that starts the next read is dropped instead of being taken for an empty line. The bytes of an
unfinished event, whatever its lines are, are counted against ``max_event``. An event larger than
:data:`COUNTED_BYTES` is decoded by :func:`enginejson.loads` (what it holds is counted first).
"""

from __future__ import annotations

import json
from typing import Any

from . import enginejson

DONE = object()
"""Marks OpenAI's ``data: [DONE]`` sentinel."""

MAX_EVENT_BYTES = 256 * 1024
"""Real chat events are a few KiB (one token, or one piece of a tool call, and their framing)."""
COUNTED_BYTES = 16 * 1024
"""Events up to this size decode in well under a millisecond, whatever they hold: not counted."""


class SSEParser:
    """Feed bytes, get complete events' ``data`` payloads (JSON-decoded, or :data:`DONE`).

    Lines may end in LF, CRLF or CR (the SSE grammar allows all three). Comment lines (``:`` ...)
    and fields other than ``data`` are ignored; a ``data`` that is not JSON (or nests deeper than
    the decoder recurses) raises ``ValueError`` (an upstream speaking something else is a protocol
    error), and so does an event longer than ``max_event`` bytes (the parser never holds more).
    """

    def __init__(self, max_event: int = MAX_EVENT_BYTES) -> None:
        self.max_event = max_event
        self._line = bytearray()  # the unfinished last line
        self._data: list[bytes] = []  # the data lines of the unfinished event
        self._size = 0  # bytes of the unfinished event, complete lines and their ends included
        self._after_cr = False  # the last read ended with CR: an LF first in the next one ends nothing

    def feed(self, chunk: bytes) -> list[Any]:
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = chunk[-1:] == b"\r"
        if not chunk:
            return []
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        if last[-1:] not in (b"\n", b"\r"):  # unfinished: kept, appended to by later reads
            lines.pop()
        else:
            last = b""
        events: list[Any] = []
        for line in lines:
            self._size += len(line)
            self._check()
            if self._line:
                self._line += line
                line = bytes(self._line)
                self._line.clear()
            if line[0] in b"\r\n":  # an empty line ends the event
                if self._data:
                    events.append(_payload(self._data))
                    self._data = []
                self._size = 0
            elif line.startswith(b"data:"):
                self._data.append(line[5:].rstrip(b"\r\n").lstrip(b" "))
        if last:
            self._size += len(last)
            self._check()
            self._line += last
        return [e for e in events if e is not None]

    def _check(self) -> None:
        if self._size > self.max_event:
            raise ValueError(f"Upstream sent an event larger than {self.max_event} bytes")

    @property
    def pending(self) -> bool:
        """True while a partial event is buffered."""
        return bool(self._data or self._line.strip())


def _payload(data: list[bytes]) -> Any:
    payload = b"\n".join(data)
    if payload == b"[DONE]":
        return DONE
    try:
        return enginejson.loads(payload) if len(payload) > COUNTED_BYTES else json.loads(payload)
    except enginejson.Refused:
        raise
    except (ValueError, RecursionError) as exc:  # NB: a nest deeper than the decoder recurses
        raise ValueError(f"Upstream sent an event that is not JSON: {payload[:80]!r}") from exc
