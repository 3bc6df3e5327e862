"""Fault knobs (set at runtime) and per-path request/byte counters of the local Hub."""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FaultKind = Literal["drop", "corrupt", "slow", "status", "ignore_range"]
KINDS: tuple[str, ...] = ("drop", "corrupt", "slow", "status", "ignore_range")


@dataclass
class Fault:
    """One knob. ``path`` is an fnmatch pattern over the request key.

    Keys: ``<repo_id>/<file>`` for ``/resolve/`` (and ``/cdn/``) requests, ``api:<repo_id>`` for
    ``/api/...`` requests of a repo. ``times`` is how many requests it hits (None: all).

    - ``drop``: close the connection after ``after_bytes`` body bytes of a GET.
    - ``corrupt``: flip the byte at file ``offset`` in served bodies.
    - ``slow``: serve bodies at ``rate`` bytes per second.
    - ``status``: answer ``status`` (e.g. 429 with ``retry_after`` seconds, 500) instead.
    - ``ignore_range``: answer 200 with the whole file to a Range request.
    """

    kind: FaultKind
    path: str = "*"
    times: int | None = 1
    after_bytes: int = 0
    offset: int = 0
    rate: float = 0.0
    status: int = 500
    retry_after: float | None = None
    method: str | None = None
    hits: int = field(default=0)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.kind == "slow" and self.rate <= 0:
            raise ValueError("a slow fault needs rate > 0 (bytes per second)")

    def matches(self, key: str, method: str) -> bool:
        if self.method is not None and self.method.upper() != method:
            return False
        return fnmatch.fnmatchcase(key, self.path)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Fault:
        allowed = {
            "kind",
            "path",
            "times",
            "after_bytes",
            "offset",
            "rate",
            "status",
            "retry_after",
            "method",
        }
        unknown = set(body) - allowed
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        return cls(**dict(body))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PathStats:
    requests: int = 0
    head: int = 0
    get: int = 0
    bytes: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class Faults:
    """Thread-safe set of active faults plus counters; shared by every request handler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._stats: dict[str, PathStats] = {}

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def active(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, key: str, method: str, kinds: tuple[str, ...], *, limit: int | None = None) -> list[Fault]:
        """The faults of ``kinds`` that hit this request (each counts one use), oldest first."""
        taken: list[Fault] = []
        with self._lock:
            for fault in list(self._faults):
                if fault.kind not in kinds or not fault.matches(key, method):
                    continue
                if limit is not None and len(taken) >= limit:
                    break
                fault.hits += 1
                taken.append(fault)
                if fault.times is not None and fault.hits >= fault.times:
                    self._faults.remove(fault)
        return taken

    def count(self, key: str, method: str, status: int) -> None:
        with self._lock:
            stats = self._stats.setdefault(key, PathStats())
            stats.requests += 1
            if method == "HEAD":
                stats.head += 1
            elif method == "GET":
                stats.get += 1
            stats.statuses[status] = stats.statuses.get(status, 0) + 1

    def add_bytes(self, key: str, n: int) -> None:
        with self._lock:
            self._stats.setdefault(key, PathStats()).bytes += n

    def stats(self) -> dict[str, PathStats]:
        with self._lock:
            return {
                k: PathStats(v.requests, v.head, v.get, v.bytes, dict(v.statuses))
                for k, v in self._stats.items()
            }

    def reset_stats(self) -> None:
        with self._lock:
            self._stats.clear()
