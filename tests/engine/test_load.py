"""The stand-in under real load, as the operator's autoscaler reads it (``_scheduler.py``).

Concurrent requests from the official ``openai`` client (``AsyncOpenAI``) beyond
``--max-num-seqs``, or beyond the KV cache (``SPARKRUN_ENGINE_KV_CACHE_TOKENS``), wait; the
engine's ``/metrics``, read with the operator's own parser (``plan/enginemetrics.py``), shows
them waiting, the running ones and the KV-cache use, and the request counter moves once per
answered request. A client that leaves while waiting leaves the queue (vLLM aborts it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import openai

from sparkrun_operator.plan.enginemetrics import EngineLoad, parse

from .conftest import EngineProc, StartEngine

TOKEN_SECONDS = 0.05
MAX_TOKENS = 60  # a request runs 60 x 0.05 = 3 s: each state observed lasts seconds, even under load
SLOW = {"SPARKRUN_ENGINE_TOKEN_SECONDS": str(TOKEN_SECONDS), "SPARKRUN_ENGINE_OUTPUT_TOKENS": "1000"}


async def load(http: httpx.AsyncClient, engine: EngineProc) -> EngineLoad:
    answer = await http.get(f"{engine.url}/metrics")
    assert answer.status_code == 200
    parsed = parse(answer.content)
    assert parsed is not None, answer.text[:500]
    return parsed


async def until(
    read: Callable[[], Awaitable[EngineLoad]], wanted: Callable[[EngineLoad], bool], within: float = 10
) -> EngineLoad:
    """The first load read that is ``wanted`` (read every 50 ms), else the last one within ``within`` s."""
    deadline = time.monotonic() + within
    for _ in range(int(within / 0.05) + 1):
        now = await read()
        if wanted(now) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return now


def ask(client: openai.AsyncOpenAI, model: str, prompt: str, tokens: int = MAX_TOKENS) -> Awaitable[object]:
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=tokens
    )


def test_requests_beyond_max_num_seqs_wait_and_show_in_metrics(start_engine: StartEngine) -> None:
    engine = start_engine("org/busy", "--max-num-seqs", "4", env=SLOW)

    async def drive() -> tuple[EngineLoad, EngineLoad, EngineLoad, list[int]]:
        async with (
            httpx.AsyncClient(timeout=5) as http,
            openai.AsyncOpenAI(base_url=f"{engine.url}/v1", api_key="-", max_retries=0, timeout=60) as client,
        ):
            before = await load(http, engine)
            calls = [asyncio.ensure_future(ask(client, "org/busy", f"question {i}")) for i in range(12)]
            busy = await until(lambda: load(http, engine), lambda x: x.waiting == 8 and x.running == 4)
            answers = await asyncio.gather(*calls)
            after = await until(lambda: load(http, engine), lambda x: x.running == 0)
            lengths = [a.usage.completion_tokens for a in answers]  # type: ignore[attr-defined]
            return before, busy, after, lengths

    before, busy, after, lengths = asyncio.run(drive())
    assert before == EngineLoad(waiting=0.0, running=0.0, kv_cache_usage=0.0, requests_total=0.0)
    assert (busy.waiting, busy.running) == (8.0, 4.0)
    assert busy.kv_cache_usage is not None
    assert busy.kv_cache_usage > 0
    assert lengths == [MAX_TOKENS] * 12  # every waiting request was answered in full
    assert after == EngineLoad(waiting=0.0, running=0.0, kv_cache_usage=0.0, requests_total=12.0)


def test_a_full_kv_cache_makes_requests_wait(start_engine: StartEngine) -> None:
    # a prompt of 38 words is 40 tokens with "user:"; two fit in 100 tokens, a third does not
    prompt = " ".join(["word"] * 38)
    engine = start_engine(
        "org/kv",
        env={**SLOW, "SPARKRUN_ENGINE_KV_CACHE_TOKENS": "100"},
    )

    async def drive() -> tuple[EngineLoad, EngineLoad]:
        async with (
            httpx.AsyncClient(timeout=5) as http,
            openai.AsyncOpenAI(base_url=f"{engine.url}/v1", api_key="-", max_retries=0, timeout=60) as client,
        ):
            calls = [asyncio.ensure_future(ask(client, "org/kv", prompt)) for _ in range(6)]
            busy = await until(lambda: load(http, engine), lambda x: x.waiting == 4 and x.running == 2)
            await asyncio.gather(*calls)
            after = await until(lambda: load(http, engine), lambda x: x.running == 0)
            return busy, after

    busy, after = asyncio.run(drive())
    assert (busy.waiting, busy.running) == (4.0, 2.0)
    assert busy.kv_cache_usage is not None
    assert busy.kv_cache_usage >= 0.8
    assert after == EngineLoad(waiting=0.0, running=0.0, kv_cache_usage=0.0, requests_total=6.0)


def test_a_client_that_leaves_while_waiting_leaves_the_queue(start_engine: StartEngine) -> None:
    engine = start_engine("org/leave", "--max-num-seqs", "1", env=SLOW)

    async def drive() -> tuple[EngineLoad, EngineLoad, EngineLoad]:
        async with (
            httpx.AsyncClient(timeout=5) as http,
            openai.AsyncOpenAI(base_url=f"{engine.url}/v1", api_key="-", max_retries=0, timeout=60) as client,
        ):
            running = asyncio.ensure_future(ask(client, "org/leave", "first", 2 * MAX_TOKENS))  # 6 s
            await until(lambda: load(http, engine), lambda x: x.running == 1)
            leaving = asyncio.ensure_future(ask(client, "org/leave", "second"))
            queued = await until(lambda: load(http, engine), lambda x: x.waiting == 1)
            leaving.cancel()  # the client closes its connection
            left = await until(lambda: load(http, engine), lambda x: x.waiting == 0, within=5)
            await running
            after = await until(lambda: load(http, engine), lambda x: x.running == 0)
            return queued, left, after

    queued, left, after = asyncio.run(drive())
    assert queued.waiting == 1.0
    assert (left.waiting, left.running) == (0.0, 1.0)
    assert left.requests_total == 1.0  # the abort: gone from the queue before the first request ended
    assert after.requests_total == 2.0  # one stop, one abort
