"""The retry helper (``sparkrun_operator/retry.py``): caps, jitter spread, attempts, floors."""

from __future__ import annotations

import random
import statistics

import pytest

from sparkrun_operator.retry import Attempts, Backoff, Schedule, retry


def test_caps_grow_exponentially_up_to_the_maximum() -> None:
    policy = Backoff(initial=0.5, maximum=8.0, factor=2.0)
    assert [policy.cap(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert policy.cap(10_000) == 8.0  # no overflow


def test_jittered_delays_stay_within_bounds_and_spread() -> None:
    policy = Backoff(initial=1.0, maximum=4.0, jitter=0.5, rng=random.Random(7))
    delays = [policy.delay(5) for _ in range(500)]
    assert min(delays) >= 2.0
    assert max(delays) <= 4.0
    # NB: uniform on [2, 4]: the standard deviation is 2/sqrt(12) ~ 0.58.
    assert statistics.pstdev(delays) > 0.4
    assert len({round(d, 3) for d in delays}) > 400  # no two clients in lockstep


def test_full_and_no_jitter() -> None:
    full = Backoff(initial=1.0, maximum=1.0, jitter=1.0, rng=random.Random(1))
    spread = [full.delay(0) for _ in range(200)]
    assert min(spread) < 0.1
    assert max(spread) > 0.9
    exact = Backoff(initial=1.0, maximum=1.0, jitter=0.0)
    assert {exact.delay(3) for _ in range(10)} == {1.0}


def test_floor_is_a_lower_bound_with_jitter_above() -> None:
    policy = Backoff(initial=0.1, maximum=5.0, jitter=0.5, rng=random.Random(3))
    delays = [policy.delay(0, floor=2.0) for _ in range(200)]
    assert min(delays) >= 2.0
    assert max(delays) <= 3.0
    assert statistics.pstdev(delays) > 0.2


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=0.0)
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=2.0, maximum=1.0)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=1.5)


def test_attempts_count_and_reset() -> None:
    state = Attempts(Backoff(initial=1.0, maximum=100.0, jitter=0.0))
    assert [state.next_delay() for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert state.failures == 4
    state.reset()
    assert state.next_delay() == 1.0


async def test_retry_stops_after_the_attempts() -> None:
    calls = 0
    seen: list[float] = []

    async def failing() -> int:
        nonlocal calls
        calls += 1
        raise ConnectionError(f"call {calls}")

    with pytest.raises(ConnectionError, match="call 3"):
        await retry(
            failing,
            attempts=3,
            retryable=lambda e: isinstance(e, ConnectionError),
            backoff=Backoff(initial=0.001, maximum=0.004),
            on_retry=lambda _e, delay: seen.append(delay),
        )
    assert calls == 3
    assert len(seen) == 2
    assert all(0.0005 <= d <= 0.004 for d in seen)


async def test_retry_returns_on_success_and_does_not_retry_other_errors() -> None:
    outcomes: list[BaseException | int] = [ConnectionError("once"), 42]

    async def flaky() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert (
        await retry(
            flaky,
            attempts=5,
            retryable=lambda e: isinstance(e, ConnectionError),
            backoff=Backoff(0.001, 0.001),
        )
        == 42
    )

    calls = 0

    async def refused() -> int:
        nonlocal calls
        calls += 1
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await retry(refused, attempts=5, retryable=lambda e: isinstance(e, ConnectionError))
    assert calls == 1


async def test_retry_honours_a_floor() -> None:
    seen: list[float] = []
    outcomes: list[BaseException | str] = [TimeoutError("busy"), "done"]

    async def busy() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    result = await retry(
        busy,
        attempts=2,
        retryable=lambda _e: True,
        backoff=Backoff(initial=0.001, maximum=1.0),
        floor=lambda _e: 0.02,
        on_retry=lambda _e, delay: seen.append(delay),
    )
    assert result == "done"
    assert 0.02 <= seen[0] <= 0.03


def test_a_schedule_is_jittered_anew_for_every_caller() -> None:
    schedule = Schedule(Backoff(initial=1.0, maximum=21.0, factor=1.6, jitter=0.5), count=8)
    first, second = list(schedule), list(schedule)
    assert len(first) == len(second) == len(schedule) == 8
    assert first != second
    for attempt, delay in enumerate(first):
        cap = schedule.policy.cap(attempt)
        assert cap / 2 <= delay <= cap
