"""The project's one retry and back-off helper: capped exponential delays with jitter.

Every loop that waits before trying again uses this module, so that many clients failing at
the same moment (an apiserver restart seen by every watch, a conflict storm) spread their
retries instead of hammering the server in lockstep.

- :class:`Backoff` is a policy: delay ``n`` (0-based) is ``min(maximum, initial * factor**n)``
  scaled down by a random fraction of at most ``jitter`` (``jitter=0.5``: somewhere in
  ``[cap/2, cap]``; ``1.0``: anywhere in ``[0, cap]``, "full jitter").
- :class:`Attempts` is the state of one long-running loop (a watch): :meth:`Attempts.wait`
  sleeps the next delay, :meth:`Attempts.reset` starts again from ``initial`` after a success.
- :class:`Schedule` is a fixed number of delays of a policy, drawn afresh each time it is
  iterated: for libraries that take a list of delays (kopf's ``networking.error_backoffs``,
  which would otherwise retry every failed request on the same fixed steps).
- :func:`retry` calls an async function until it succeeds, fails with an error that is not
  retryable, or ``attempts`` calls have been made; a ``floor`` hook may raise a delay to what
  the server asked for (``Retry-After``).

Pure: imports nothing of the project (it sits below every layer).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Attempts", "Backoff", "Schedule", "retry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Capped exponential back-off with jitter (see module docs)."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.maximum >= self.initial and self.factor >= 1.0):
            raise ValueError("Backoff needs 0 < initial <= maximum and factor >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("Backoff.jitter is a fraction in [0, 1]")

    def cap(self, attempt: int) -> float:
        """The un-jittered delay before retry ``attempt`` (0-based)."""
        # NB: min() before the power would overflow for large attempts.
        exponent = min(attempt, 64)
        return float(min(self.maximum, self.initial * self.factor**exponent))

    def delay(self, attempt: int, *, floor: float = 0.0) -> float:
        """The jittered delay before retry ``attempt`` (0-based).

        ``floor`` (a server's ``Retry-After``) is a lower bound that gets its own jitter on
        top (``[floor, floor * (1 + jitter)]``), so clients told the same delay still spread.
        """
        delay = self.cap(attempt) * (1.0 - self.jitter * self.rng.random())
        if floor > 0.0:
            delay = max(delay, floor * (1.0 + self.jitter * self.rng.random()))
        return delay


@dataclass(frozen=True)
class Schedule:
    """``count`` delays of ``policy`` (``policy.delay(0)``, ``delay(1)``, ...), jittered anew on
    every iteration, so that each caller iterating it gets its own sequence."""

    policy: Backoff
    count: int

    def __iter__(self) -> Iterator[float]:
        return (self.policy.delay(attempt) for attempt in range(self.count))

    def __len__(self) -> int:
        return self.count


class Attempts:
    """The back-off state of one loop: consecutive failures so far."""

    def __init__(self, policy: Backoff | None = None) -> None:
        self.policy = policy or Backoff()
        self.failures = 0

    def next_delay(self, *, floor: float = 0.0) -> float:
        """The delay after one more failure (counts it)."""
        delay = self.policy.delay(self.failures, floor=floor)
        self.failures += 1
        return delay

    async def wait(self, *, floor: float = 0.0) -> float:
        """Count a failure and sleep its delay; returns the delay slept."""
        delay = self.next_delay(floor=floor)
        await asyncio.sleep(delay)
        return delay

    def reset(self) -> None:
        """A success: the next failure waits ``initial`` again."""
        self.failures = 0


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    retryable: Callable[[BaseException], bool],
    backoff: Backoff | None = None,
    floor: Callable[[BaseException], float] | None = None,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """``await call()`` up to ``attempts`` times while it raises ``retryable`` errors.

    Between calls it sleeps :meth:`Backoff.delay` (at least ``floor(error)`` when given); the
    last error is re-raised when no attempt is left. ``on_retry(error, delay)`` observes each
    retry (logs, metrics, tests). Cancellation is never retried.
    """
    if attempts < 1:
        raise ValueError("retry needs at least one attempt")
    state = Attempts(backoff)
    for index in range(attempts):
        try:
            return await call()
        except Exception as error:
            if index == attempts - 1 or not retryable(error):
                raise
            delay = state.next_delay(floor=floor(error) if floor is not None else 0.0)
            if on_retry is not None:
                on_retry(error, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
