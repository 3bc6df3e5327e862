"""Download progress: events, a rate-bounded reporter, and sinks (JSON lines, a status file).

The controller patches ``ModelCache.status.progress`` from these events: a sink is any
callable taking a :class:`Progress`; :class:`Reporter` calls the sinks at most once per
``interval`` seconds, and always on a phase change and at the end. Its rate and ETA come from
the project's one meter (:mod:`sparkrun_operator.rate`): ``None`` until the download was
sampled for 2 s and 256 KiB, an ETA only from a rate of at least 1 KiB/s (never the
``0.0 MB/s, ETA 15686s`` of a first sample).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal

from sparkrun_operator.api.modelcache import CacheProgress
from sparkrun_operator.rate import RateMeter
from sparkrun_operator.runtime.hfcache import write_atomic

Phase = Literal["Resolving", "Downloading", "Verifying", "Ready", "Failed"]


@dataclass(frozen=True)
class Progress:
    """One observation; field names follow ``ModelCacheStatus`` where they overlap."""

    phase: Phase
    repo: str
    revision: str
    commit: str | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    files_done: int = 0
    files_total: int = 0
    bytes_fetched: int = 0
    rate_bytes_per_s: float | None = None  # None until sampled (:class:`RateMeter`)
    eta_s: float | None = None
    message: str = ""
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"event": "progress", **asdict(self)}

    def status_patch(self) -> dict[str, Any]:
        """The ``ModelCache.status`` fields this event sets (camelCase, as the controller patches)."""
        patch: dict[str, Any] = {
            "phase": self.phase,
            "progress": CacheProgress(bytes_done=self.bytes_done, bytes_total=self.bytes_total).to_wire(),
        }
        if self.commit is not None:
            patch["resolvedRevision"] = self.commit
        return patch


Sink = Callable[[Progress], None]


class JsonLinesSink:
    """Writes each event as one JSON line (stdout by default: the pod log)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    def __call__(self, event: Progress) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(json.dumps(event.to_json()) + "\n")
        stream.flush()


class StatusFileSink:
    """Keeps the latest event in a JSON file (replaced atomically), e.g. on the cache volume."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def __call__(self, event: Progress) -> None:
        write_atomic(self.path, json.dumps(event.to_json()).encode() + b"\n")


class Reporter:
    """Computes rate and ETA and forwards events to ``sinks`` at a bounded rate (thread-safe).

    The rate is of ``bytes_fetched`` (what came over the network, the file in flight included)
    as ``meter`` measures it; the ETA is of the bytes not yet done at that rate."""

    def __init__(
        self,
        sinks: Iterable[Sink],
        *,
        interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        meter: RateMeter | None = None,
    ):
        self.sinks = list(sinks)
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last_emit = float("-inf")
        self._last_phase: str | None = None
        self._meter = meter if meter is not None else RateMeter()
        self.last: Progress | None = None
        self.emitted = 0

    def update(self, event: Progress, *, force: bool = False) -> None:
        now = self._clock()
        with self._lock:
            self._meter.update(event.bytes_fetched, now)
            rate = self._meter.rate()
            remaining = event.bytes_total - event.bytes_done
            eta = self._meter.eta_for(remaining) if event.bytes_total > 0 else None  # total unknown
            event = replace(
                event,
                rate_bytes_per_s=None if rate is None else round(rate, 1),
                eta_s=None if eta is None else round(eta, 1),
            )
            event = replace(event, at=round(time.time(), 3))
            self.last = event
            due = force or event.phase != self._last_phase or now - self._last_emit >= self.interval
            if not due:
                return
            self._last_emit = now
            self._last_phase = event.phase
            self.emitted += 1
            sinks = list(self.sinks)
        for sink in sinks:
            sink(event)
