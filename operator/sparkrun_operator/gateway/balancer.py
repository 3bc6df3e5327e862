"""Choosing a backend: least outstanding requests, optional prefix affinity, passive health.

- **Least outstanding requests**: among a workload's healthy endpoints, the one with the fewest
  requests in flight through this gateway; ties go to the one picked least recently, so idle
  backends are used in turn.
- **Prefix affinity** (per workload): requests sharing a prompt prefix go to the same backend
  (consistent hashing over virtual nodes), unless that backend already carries more than
  ``load_factor`` times its fair share; then the walk continues round the ring (consistent hashing
  with bounded loads, Mirrokni et al. 2018). Keeps vLLM's prefix cache warm without hot spots.
- **Passive health** (outlier ejection as Envoy does it): ``consecutive`` failures in a row (a
  5xx, a timeout, a broken response) eject a backend for a backoff that doubles with each
  ejection (``eject_base`` .. ``eject_max`` seconds); a refused connection ejects at once (it is
  never the request's fault); a success resets both. At most ``max_ejected_percent`` of a
  workload's endpoints are ejected at once (at least one may be), so one request that crashes
  every replica cannot empty the pool. When every endpoint is ejected, all are tried anyway
  (better a likely failure than a certain 503).

State lives per endpoint URL and survives routing-table updates.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass


@dataclass(eq=False)
class Backend:
    """One endpoint as the gateway sees it."""

    url: str
    outstanding: int = 0
    failures: int = 0
    """Failures in a row."""
    ejections: int = 0
    """Ejections since the last success (the backoff doubles with each)."""
    ejected_until: float = 0.0
    last_pick: int = 0

    def healthy(self, now: float) -> bool:
        return self.ejected_until <= now


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class _Ring:
    def __init__(self, urls: Sequence[str], vnodes: int) -> None:
        points = sorted((_hash(f"{url}#{i}".encode()), url) for url in urls for i in range(vnodes))
        self.keys = [p[0] for p in points]
        self.urls = [p[1] for p in points]

    def walk(self, key: bytes) -> list[str]:
        """Distinct URLs in ring order starting at ``key``'s position."""
        start = bisect.bisect(self.keys, _hash(key)) % len(self.keys)
        seen: list[str] = []
        n = len(self.urls)
        for i in range(n):
            url = self.urls[(start + i) % n]
            if url not in seen:
                seen.append(url)
        return seen


class Balancer:
    """Backend state and the choice of one backend per attempt."""

    def __init__(
        self,
        *,
        eject_base: float = 1.0,
        eject_max: float = 30.0,
        consecutive: int = 5,
        max_ejected_percent: int = 50,
        load_factor: float = 1.25,
        vnodes: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.eject_base = eject_base
        self.eject_max = eject_max
        self.consecutive = consecutive
        self.max_ejected_percent = max_ejected_percent
        self.load_factor = load_factor
        self.vnodes = vnodes
        self.clock = clock
        self._backends: dict[str, Backend] = {}
        self._rings: dict[tuple[str, ...], _Ring] = {}
        self._picks = 0

    def backend(self, url: str) -> Backend:
        b = self._backends.get(url)
        if b is None:
            b = self._backends[url] = Backend(url)
        return b

    def backends(self) -> list[Backend]:
        return list(self._backends.values())

    def pick(
        self, endpoints: Sequence[str], *, affinity_key: bytes | None = None, exclude: Collection[str] = ()
    ) -> Backend | None:
        """The backend for the next attempt, or ``None`` when every endpoint is excluded."""
        now = self.clock()
        candidates = [self.backend(u) for u in endpoints if u not in exclude]
        if not candidates:
            return None
        healthy = [b for b in candidates if b.healthy(now)] or candidates
        if affinity_key is not None and len(healthy) > 1:
            chosen = self._pick_affine(endpoints, healthy, affinity_key)
        else:
            chosen = min(healthy, key=lambda b: (b.outstanding, b.last_pick))
        self._picks += 1
        chosen.last_pick = self._picks
        return chosen

    def _pick_affine(self, endpoints: Sequence[str], healthy: list[Backend], key: bytes) -> Backend:
        ring_key = tuple(sorted(endpoints))
        ring = self._rings.get(ring_key)
        if ring is None:
            if len(self._rings) > 1024:
                self._rings.clear()
            ring = self._rings[ring_key] = _Ring(ring_key, self.vnodes)
        by_url = {b.url: b for b in healthy}
        total = sum(b.outstanding for b in healthy)
        capacity = math.ceil(self.load_factor * (total + 1) / len(healthy))
        for url in ring.walk(key):
            b = by_url.get(url)
            if b is not None and b.outstanding < capacity:
                return b
        return min(healthy, key=lambda b: (b.outstanding, b.last_pick))

    def success(self, backend: Backend) -> None:
        if backend.failures or backend.ejections:
            backend.failures = backend.ejections = 0
            backend.ejected_until = 0.0

    def failure(
        self, backend: Backend, endpoints: Sequence[str] = (), *, at_once: bool = False
    ) -> float | None:
        """Count a failure of ``backend`` (one of ``endpoints``); returns the backoff when ejected.

        ``at_once``: the failure cannot be the request's (a refused connection), so it ejects
        without waiting for ``consecutive`` failures in a row.
        """
        backend.failures += 1
        if not at_once and backend.failures < self.consecutive:
            return None
        now = self.clock()
        if not backend.healthy(now):
            return None  # already ejected (a request that was in flight when it was)
        urls = [u for u in endpoints if u != backend.url]
        allowed = max(1, (len(urls) + 1) * self.max_ejected_percent // 100)
        if sum(1 for u in urls if not self.backend(u).healthy(now)) >= allowed:
            return None
        backend.ejections += 1
        backoff = min(self.eject_max, self.eject_base * 2.0 ** (backend.ejections - 1))
        backend.ejected_until = now + backoff
        return backoff
