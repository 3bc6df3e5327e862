"""The single-flight review cache (``k8s/auth.py`` ``TtlCache``).

Tested: concurrent identical lookups share one load; when the first caller (the one whose
lookup started the load) is cancelled, as an SSE client that disconnects is, the other waiters
still get the answer, and the answer is cached; a failing load fails every waiter with its own
error, and the next lookup loads again.
"""

from __future__ import annotations

import asyncio

import pytest

from sparkrun_operator.k8s.auth import TtlCache


class _Loader:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self) -> tuple[str, float]:
        self.calls += 1
        await self.release.wait()
        if self.fail:
            raise RuntimeError("apiserver said no")
        return "alice", 60.0


async def test_cancelled_first_waiter_leaves_others_their_answer() -> None:
    cache: TtlCache[str, str] = TtlCache()
    loader = _Loader()
    first = asyncio.create_task(cache.get("token", loader))
    await asyncio.sleep(0)
    others = [asyncio.create_task(cache.get("token", loader)) for _ in range(5)]
    await asyncio.sleep(0.01)
    first.cancel()  # the first client disconnects mid-review
    await asyncio.sleep(0.01)
    loader.release.set()
    assert await asyncio.gather(*others) == ["alice"] * 5
    with pytest.raises(asyncio.CancelledError):
        await first
    assert loader.calls == 1
    assert cache.peek("token") == "alice"  # the shared answer was cached despite the cancellation
    assert await cache.get("token", loader) == "alice"
    assert loader.calls == 1


async def test_every_waiter_cancelled_the_load_still_completes() -> None:
    cache: TtlCache[str, str] = TtlCache()
    loader = _Loader()
    waiters = [asyncio.create_task(cache.get("token", loader)) for _ in range(3)]
    await asyncio.sleep(0.01)
    for waiter in waiters:
        waiter.cancel()
    loader.release.set()
    await asyncio.gather(*waiters, return_exceptions=True)
    for _ in range(10):
        await asyncio.sleep(0)
    assert cache.peek("token") == "alice"


async def test_failure_reaches_every_waiter_and_is_not_cached() -> None:
    cache: TtlCache[str, str] = TtlCache()
    loader = _Loader()
    loader.fail = True
    waiters = [asyncio.create_task(cache.get("token", loader)) for _ in range(3)]
    await asyncio.sleep(0.01)
    loader.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results), results
    loader.fail = False
    assert await cache.get("token", loader) == "alice"
    assert loader.calls == 2
