"""Incremental Server-Sent Events parsing (for translating upstream OpenAI streams)."""

from __future__ import annotations

import json
from typing import Any

DONE = object()
"""Marks OpenAI's ``data: [DONE]`` sentinel."""

MAX_EVENT_BYTES = 4 * 1024 * 1024


class SSEParser:
    """Feed bytes, get complete events' ``data`` payloads (JSON-decoded, or :data:`DONE`).

    Lines may end in LF, CRLF or CR (the SSE grammar allows all three). Comment lines (``:`` ...)
    and fields other than ``data`` are ignored; a ``data`` that is not JSON raises ``ValueError``
    (an upstream speaking something else is a protocol error), and so does an event longer than
    ``max_event`` bytes (the parser never buffers more than that).
    """

    def __init__(self, max_event: int = MAX_EVENT_BYTES) -> None:
        self._buf = bytearray()
        self.max_event = max_event

    def feed(self, chunk: bytes) -> list[Any]:
        buf = self._buf
        start = max(0, len(buf) - 3)
        buf += chunk
        if b"\n\n" not in buf[start:] and b"\r" not in buf[start:]:
            if len(buf) > self.max_event:
                raise ValueError(f"upstream sent an event larger than {self.max_event} bytes")
            return []
        data = bytes(buf)
        held = b""
        if b"\r" in data:
            if data.endswith(b"\r"):  # maybe the first half of a CRLF: decide with the next bytes
                data, held = data[:-1], b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events = data.split(b"\n\n")
        rest = events.pop()
        self._buf = bytearray(rest + held)
        if len(self._buf) > self.max_event:
            raise ValueError(f"upstream sent an event larger than {self.max_event} bytes")
        return [e for e in map(_payload, events) if e is not None]

    @property
    def pending(self) -> bool:
        """True while a partial event is buffered."""
        return bool(self._buf.strip())


def _payload(event: bytes) -> Any:
    data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    if not data:
        return None
    payload = b"\n".join(data)
    if payload == b"[DONE]":
        return DONE
    try:
        return json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"upstream sent a non-JSON event: {payload[:80]!r}") from exc
