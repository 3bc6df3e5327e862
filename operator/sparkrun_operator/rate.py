"""The project's one transfer-rate meter: a rate and an ETA only once they mean something. Pure.

A rate from the first half second of a download, or from two samples a few bytes apart, is
noise: the demo once printed ``0.0 MB/s, ETA 15686s`` for a 1.5 MiB file that finished a second
later. :class:`RateMeter` answers ``None`` (show nothing) until its samples span at least
``min_seconds`` and ``min_bytes``, measures over a sliding window of the last
``window_seconds``, and never gives an ETA from a rate below ``min_rate`` (bytes per second).
Time is the caller's (``now`` in seconds from any monotonic clock), so tests use a fake one.

Every progress display uses it, at the source and at the screen: the downloader's
``runtime/progress.Reporter`` (the ``rate_bytes_per_s``/``eta_s`` of its JSON lines, which the
operator copies into ``ModelCache.status``), ``plan/modelcache`` (which writes the status
message) and the CLI's ``demo``. Where a rate and an ETA were measured elsewhere (the status
the operator writes, what the CLI reads back), :func:`reported` is the one rule for believing
them::

    meter = RateMeter()
    meter.update(done_bytes, time.monotonic())
    meter.describe(total_bytes)   # "" until sampled, then "1.2 MiB/s, ETA 4s"

Imports nothing of the project (it sits below every layer, beside ``retry``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "MIN_BYTES",
    "MIN_RATE",
    "MIN_SECONDS",
    "WINDOW_SECONDS",
    "RateMeter",
    "format_eta",
    "format_rate",
    "real_rate",
    "reported",
]

#: A rate needs samples this many seconds apart...
MIN_SECONDS: Final = 2.0
#: ...and this many bytes apart.
MIN_BYTES: Final = 256 * 1024
#: The rate is measured over the samples of the last this many seconds.
WINDOW_SECONDS: Final = 10.0
#: No ETA from a rate below this (bytes per second): a trickle's ETA says nothing.
MIN_RATE: Final = 1024.0
#: A reported rate below this (bytes per second) is a first sample's noise ("0 B/s"), not a rate.
MIN_SHOWN_RATE: Final = 1.0
#: The units :func:`format_rate` uses (binary, as ``ls -h`` and the Hub's sizes).
_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass
class RateMeter:
    """The rate of a growing byte count, from ``update(done, now)`` samples."""

    min_seconds: float = MIN_SECONDS
    min_bytes: int = MIN_BYTES
    window_seconds: float = WINDOW_SECONDS
    min_rate: float = MIN_RATE
    _samples: deque[tuple[float, int]] = field(default_factory=deque, repr=False)

    def update(self, done: int, now: float) -> None:
        """Record that ``done`` bytes were done at ``now``. A count that went down (a restart)
        or a clock that went back starts the measurement afresh."""
        if self._samples and (done < self._samples[-1][1] or now < self._samples[-1][0]):
            self._samples.clear()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_seconds:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Bytes per second over the window; ``None`` until the samples span ``min_seconds``
        and ``min_bytes``."""
        if len(self._samples) < 2:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        if t1 - t0 < self.min_seconds or b1 - b0 < self.min_bytes:
            return None
        return (b1 - b0) / (t1 - t0)

    def eta_for(self, remaining: int) -> float | None:
        """Seconds until ``remaining`` more bytes are done at the current rate; 0 when nothing
        remains; ``None`` without a rate of at least ``min_rate``."""
        if remaining <= 0:
            return 0.0
        rate = self.rate()
        if rate is None or rate < self.min_rate:
            return None
        return remaining / rate

    def eta(self, total: int) -> float | None:
        """Seconds until ``total`` (counted like the samples) at the current rate: see
        :meth:`eta_for`; ``None`` before the first sample."""
        if not self._samples:
            return None
        return self.eta_for(total - self._samples[-1][1])

    def describe(self, total: int) -> str:
        """``"1.2 MiB/s, ETA 4s"``, ``"1.2 MiB/s"`` (no total), or ``""`` (not sampled yet)."""
        rate = self.rate()
        if rate is None:
            return ""
        eta = self.eta(total) if total > 0 else None
        return format_rate(rate) + ("" if eta is None else f", ETA {format_eta(eta)}")


def real_rate(value: object) -> float | None:
    """``value`` as a rate someone reported (a JSON number of bytes per second), or ``None``
    when it is not one: absent, not a finite number, negative, or zero."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    rate = float(value)
    return rate if math.isfinite(rate) and rate > 0 else None


def reported(rate: object, eta: object) -> tuple[float | None, float | None]:
    """The rule for believing a rate and an ETA someone else measured (a downloader's JSON line,
    a ModelCache's ``status.progress``): ``(rate, eta)``, each ``None`` where it is not to be
    shown. A rate only when :func:`real_rate` and at least :data:`MIN_SHOWN_RATE` (``0 B/s`` is
    a first sample's noise); an ETA only beside a rate of at least :data:`MIN_RATE`, and only a
    finite, non-negative number. ``plan/modelcache`` (the status it writes) and the CLI (what it
    reads back) both decide with it."""
    believed = real_rate(rate)
    if believed is None or believed < MIN_SHOWN_RATE:
        return None, None
    if isinstance(eta, bool) or not isinstance(eta, int | float) or believed < MIN_RATE:
        return believed, None
    seconds = float(eta)
    return believed, (seconds if math.isfinite(seconds) and seconds >= 0 else None)


def format_rate(bytes_per_second: float) -> str:
    """``"820 KiB/s"``, ``"1.5 MiB/s"``: three significant figures at most."""
    value, unit = float(bytes_per_second), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    digits = 0 if value >= 100 or unit == 0 else (1 if value >= 10 else 2)
    return f"{value:.{digits}f} {_UNITS[unit]}/s"


def format_eta(seconds: float) -> str:
    """``"4s"``, ``"2m05s"``, ``"1h02m"`` (``"?"`` for no finite number)."""
    if not math.isfinite(seconds):
        return "?"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
