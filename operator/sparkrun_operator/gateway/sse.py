"""Incremental Server-Sent Events parsing (for translating upstream OpenAI streams)."""

from __future__ import annotations

import json
from typing import Any

DONE = object()
"""Marks OpenAI's ``data: [DONE]`` sentinel."""


class SSEParser:
    """Feed bytes, get complete events' ``data`` payloads (JSON-decoded, or :data:`DONE`).

    Comment lines (``:`` ...) and fields other than ``data`` are ignored; a ``data`` that is not
    JSON raises ``ValueError`` (an upstream speaking something else is a protocol error).
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[Any]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        out: list[Any] = []
        for event in events:
            data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if not data:
                continue
            payload = b"\n".join(data)
            if payload == b"[DONE]":
                out.append(DONE)
            else:
                try:
                    out.append(json.loads(payload))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"upstream sent a non-JSON event: {payload[:80]!r}") from exc
        return out

    @property
    def pending(self) -> bool:
        """True while a partial event is buffered."""
        return bool(self._buf.strip())
