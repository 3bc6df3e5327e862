"""The shim's short cache of query answers (the reference daemon's, bounded in bytes too)."""

from __future__ import annotations

import time

__all__ = ["QueryCache"]


class QueryCache:
    """The daemon's short query cache: only for ``cacheable`` operations, cleared by any job.

    Bounded in entries (``size``) and bytes (``max_bytes``; an answer above a quarter of it is
    not cached), oldest first out.
    """

    def __init__(self, ttl: float, size: int, max_bytes: int) -> None:
        self.ttl, self.size, self.max_bytes = ttl, size, max_bytes
        self.values: dict[tuple[str, ...], tuple[float, bytes]] = {}
        self.bytes = 0

    def get(self, key: tuple[str, ...]) -> bytes | None:
        found = self.values.get(key)
        if found is None:
            return None
        if time.monotonic() - found[0] >= self.ttl:
            self._drop(key)
            return None
        return found[1]

    def _drop(self, key: tuple[str, ...]) -> None:
        found = self.values.pop(key, None)
        if found is not None:
            self.bytes -= len(found[1])

    def put(self, key: tuple[str, ...], value: bytes) -> None:
        if len(value) > self.max_bytes // 4:
            return
        self._drop(key)
        while self.values and (len(self.values) >= self.size or self.bytes + len(value) > self.max_bytes):
            self._drop(next(iter(self.values)))
        self.values[key] = (time.monotonic(), value)
        self.bytes += len(value)

    def clear(self) -> None:
        self.values.clear()
        self.bytes = 0
