"""What a held request costs and who may cause one (issue 27, a hostile second look).

A tenant can create a workload that never becomes ready in its own namespace and flood it: every
request is held (the workload is "starting") until ``--wake-timeout``. These tests bound what
that costs the gateway and the other tenants on loopback: the per-tenant in-flight limit refuses
the rest at once, each held request is one handler task (one shared wake task per workload), a
held request keeps only the body bytes it sent and one tenant at most half of the body budget
(else a few held requests block every tenant's requests with a body), a client that hangs up
gives its slot and its body reservation back at once, a workload deleted
meanwhile answers its held requests at once, a key may not wake a workload it may not use, and
the Anthropic and Ollama routes hold and share one wake exactly like the OpenAI ones (with the
real client libraries).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from typing import Any

import anthropic
import httpx
import ollama
import pytest

from sparkrun_operator.gateway import GatewaySettings, Workload
from sparkrun_operator.gateway.auth import DigestTable, Grant
from sparkrun_operator.gateway.errors import GatewayError
from sparkrun_operator.gateway.limits import ByteBudget

from .conftest import StartGateway
from .rawserver import raw_upstream
from .test_bounded_wake import CHAT, LiveSource, SourceWaker, _engine, _entry

BROKEN = Workload(namespace="bad", name="broken", served_name="broken", replicas=1)  # never ready


def _good(url: str) -> Workload:
    return Workload(namespace="good", name="fine", served_name="fine", replicas=1, endpoints=(url,))


def _gateway_tasks(loop: asyncio.AbstractEventLoop) -> int:
    """Tasks alive on the gateway's loop (asked from the loop itself)."""
    out: list[int] = []
    done = threading.Event()

    def count() -> None:
        out.append(len(asyncio.all_tasks(loop)))
        done.set()

    loop.call_soon_threadsafe(count)
    assert done.wait(5)
    return out[0]


def test_a_flooded_broken_workload_costs_one_slot_per_request_and_only_its_tenants(
    start_gateway: StartGateway,
) -> None:
    keys = DigestTable({"sk-bad": Grant("bad", None, "bad"), "sk-good": Grant("good", None, "good")})
    settings = GatewaySettings(wake_timeout=60, max_in_flight=64, max_in_flight_per_tenant=16)
    with raw_upstream(_engine) as up:
        source = LiveSource([BROKEN, _good(up.url)])
        gw = start_gateway([], source=source, keys=keys, settings=settings)
        admission = gw.gateway.services.admission
        wakes = admission.wakes
        statuses: list[int] = []

        async def flood() -> None:
            body = {**CHAT, "model": "broken", "pad": "x" * 100_000}
            headers = {"authorization": "Bearer sk-bad"}
            async with httpx.AsyncClient(timeout=60) as client:

                async def one() -> None:
                    try:
                        r = await client.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers)
                        statuses.append(r.status_code)
                    except asyncio.CancelledError:
                        statuses.append(-1)
                        raise

                tasks = [asyncio.create_task(one()) for _ in range(40)]
                deadline = time.monotonic() + 10
                while admission.in_flight.total < 16 or len([s for s in statuses if s == 429]) < 24:
                    assert time.monotonic() < deadline, (admission.in_flight.total, statuses)
                    await asyncio.sleep(0.05)
                # the other tenant is served at once while 16 requests of "bad" are held
                started = time.monotonic()
                fine = await client.post(
                    f"{gw.url}/v1/chat/completions",
                    json={**CHAT, "model": "fine"},
                    headers={"authorization": "Bearer sk-good"},
                )
                assert fine.status_code == 200
                assert time.monotonic() - started < 30  # not held (half the 60 s wake): its engine's
                settled = time.monotonic() + 10  # NB: "fine" gives its slot back just after its answer
                while admission.in_flight.total != 16:
                    assert time.monotonic() < settled, admission.in_flight.total
                    await asyncio.sleep(0.02)
                assert len(wakes._pending) == 1  # one shared wait for the broken workload
                assert admission.bodies.used <= 16 * 110_000
                gateway_loop = wakes._pending["bad/broken"].task.get_loop()
                held_tasks = _gateway_tasks(gateway_loop)
                print(f"\n16 held requests: {held_tasks} tasks on the gateway loop, "
                      f"{admission.bodies.used} body bytes reserved")  # fmt: skip
                assert held_tasks <= 16 * 2 + 10  # a handler (and its disconnect watch) each, bounded
                for task in tasks:
                    task.cancel()  # the clients hang up
                await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(flood())
        assert statuses.count(429) == 24
        deadline = time.monotonic() + 10
        while admission.in_flight.total or admission.bodies.used:
            assert time.monotonic() < deadline, (admission.in_flight.total, admission.bodies.used)
            time.sleep(0.02)


def test_a_workload_deleted_while_requests_are_held_answers_them_at_once(
    start_gateway: StartGateway,
) -> None:
    source = LiveSource([_entry(replicas=1)])  # starting, never ready
    gw = start_gateway([], source=source, settings=GatewaySettings(wake_timeout=60))
    out: list[tuple[int, float]] = []

    def ask() -> None:
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=60)
        out.append((r.status_code, time.monotonic()))

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while gw.gateway.services.admission.in_flight.total < 5:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    published = time.monotonic()
    source.publish()  # deleted
    for t in threads:
        t.join(40)
    assert [status for status, _ in out] == [404] * 5
    assert max(at for _, at in out) - published < 30  # at once: not the 60 s wake timeout


def test_a_key_may_not_wake_a_workload_of_another_namespace(start_gateway: StartGateway) -> None:
    keys = DigestTable({"sk-other": Grant("other", None, "other")})
    source = LiveSource([_entry(state="Stopped", resting="Stopped")])  # in "ml"
    waker = SourceWaker(source, "http://127.0.0.1:9")
    gw = start_gateway([], source=source, keys=keys, waker=waker, settings=GatewaySettings(wake_timeout=10))
    for path, body in (
        ("/v1/chat/completions", CHAT),
        ("/v1/messages", CHAT),
        ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        ("/api/generate", {"model": "m"}),  # Ollama's "load the model"
    ):
        r = httpx.post(f"{gw.url}{path}", json=body, headers={"x-api-key": "sk-other"}, timeout=10)
        assert r.status_code == 404, (path, r.text)
    assert waker.calls == []


def test_anthropic_and_ollama_clients_are_held_and_share_the_one_wake(start_gateway: StartGateway) -> None:
    with raw_upstream(_engine) as up:
        created = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        source = LiveSource([_entry(resting="Zero", replicas=0, created=created)])
        waker = SourceWaker(source, up.url, ready_after=1.0)
        gw = start_gateway([], source=source, waker=waker, settings=GatewaySettings(wake_timeout=10))
        answers: dict[str, Any] = {}

        def claude() -> None:
            with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=20) as c:
                answers["anthropic"] = c.messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                )

        def llama() -> None:
            with ollama.Client(host=gw.url, timeout=20) as c:
                chat = [{"role": "user", "content": "hi"}]
                answers["ollama"] = c.chat(model="m", messages=chat, stream=False)

        threads = [threading.Thread(target=f) for f in (claude, llama, claude, llama)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert time.monotonic() - started >= 0.9  # held for the wake, not answered before it
        assert answers["anthropic"].content[0].text
        assert answers["ollama"].message.content
        assert len(waker.calls) == 1


def _ask_fine(url: str) -> tuple[int, float]:
    """The other tenant's small request to its own, serving model: (status, seconds)."""
    started = time.monotonic()
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={**CHAT, "model": "fine"},
        headers={"authorization": "Bearer sk-good"},
        timeout=30,
    )
    return answer.status_code, time.monotonic() - started


def _hold(url: str, bodies: list[Any], out: list[int]) -> list[threading.Thread]:
    """Tenant "bad" sends each of ``bodies`` (bytes, or an iterator: sent chunked, no length)
    to its never-ready workload; the statuses go to ``out``."""

    def one(body: Any) -> None:
        headers = {"authorization": "Bearer sk-bad", "content-type": "application/json"}
        try:
            r = httpx.post(f"{url}/v1/chat/completions", content=body, headers=headers, timeout=30)
            out.append(r.status_code)
        except httpx.HTTPError:
            out.append(-1)

    threads = [threading.Thread(target=one, args=(b,), daemon=True) for b in bodies]
    for t in threads:
        t.start()
    return threads


BUDGET = GatewaySettings(
    wake_timeout=8,
    body_timeout=2,
    max_body_bytes=1024 * 1024,
    max_buffered_body_bytes=4 * 1024 * 1024,
    max_in_flight=64,
    max_in_flight_per_tenant=32,
)
TENANT_KEYS = {"sk-bad": Grant("bad", None, "bad"), "sk-good": Grant("good", None, "good")}


def _wait_held(gw: Any, n: int, body_bytes: int, out: list[int] | None = None) -> None:
    """Wait until ``n`` requests are held at one wake with ``body_bytes`` reserved (every body read)."""
    admission = gw.gateway.services.admission
    deadline = time.monotonic() + 10
    while (
        admission.in_flight.total < n
        or len(admission.wakes._pending) < 1
        or admission.bodies.used != body_bytes
    ):
        assert time.monotonic() < deadline, (admission.in_flight.total, admission.bodies.used, out)
        time.sleep(0.02)


def test_a_held_request_with_a_small_chunked_body_reserves_only_its_body(start_gateway: StartGateway) -> None:
    """A body sent without a length reserves ``max_body_bytes`` until it is read; a held request
    must not keep that reservation: four tiny chunked requests held at the broken workload would
    otherwise hold the whole budget, and every other tenant's request would wait and get 503."""
    doc = b'{"model": "broken", "messages": [{"role": "user", "content": "hi"}]}'
    with raw_upstream(_engine) as up:
        source = LiveSource([BROKEN, _good(up.url)])
        gw = start_gateway([], source=source, keys=DigestTable(TENANT_KEYS), settings=BUDGET)
        out: list[int] = []
        threads: list[threading.Thread] = []
        for held in range(1, 5):  # one at a time: an unread chunked body reserves max_body_bytes,
            # so four arriving together could pass the tenant's half of the budget (429) before
            # any body is read; each held one must then reserve its body, not max_body_bytes
            threads += _hold(gw.url, [iter([doc])], out)
            _wait_held(gw, held, held * len(doc), out)
        status, seconds = _ask_fine(gw.url)
        assert status == 200, (status, seconds)  # not 503 after the body timeout
        for t in threads:
            t.join(30)
        assert sorted(out) == [503] * 4  # the held four: the wake deadline


def test_one_tenant_may_not_hold_every_buffered_body_byte(start_gateway: StartGateway) -> None:
    """Held requests keep their bodies (a wake may be answered by sending them on). One tenant
    may hold at most half of ``--max-buffered-body-bytes`` (as with requests in flight); beyond,
    429 at once, and the other tenants' bodies still fit."""
    head, tail = b'{"model": "broken", "messages": [{"role": "user", "content": "', b'"}]}'
    doc = head + b"x" * (BUDGET.max_body_bytes - len(head) - len(tail)) + tail  # 4 fill the budget
    with raw_upstream(_engine) as up:
        source = LiveSource([BROKEN, _good(up.url)])
        gw = start_gateway([], source=source, keys=DigestTable(TENANT_KEYS), settings=BUDGET)
        out: list[int] = []
        threads = _hold(gw.url, [doc] * 4, out)
        deadline = time.monotonic() + 10
        while out.count(429) < 2:
            assert time.monotonic() < deadline, out
            time.sleep(0.02)
        assert gw.gateway.services.admission.bodies.used == 2 * len(doc)
        status, seconds = _ask_fine(gw.url)
        assert status == 200, (status, seconds)  # not 503 after the body timeout
        for t in threads:
            t.join(30)
        assert sorted(out) == [429, 429, 503, 503]  # the held two: the wake deadline


def test_the_tenant_share_of_the_body_budget() -> None:
    async def scenario() -> None:
        budget = ByteBudget(10)  # a tenant's share: 5
        first = await budget.reserve(8, 1, "a")  # its first body may exceed its share
        with pytest.raises(GatewayError) as over:
            await budget.reserve(1, 1, "a")
        assert over.value.status == 429
        assert await budget.reserve(2, 1, "b") == 2  # another tenant: still room
        budget.release(first, "a")
        assert await budget.reserve(5, 1, "a") == 5
        assert await budget.reserve(3, 1, None) == 3  # no tenant (no authentication): no share
        assert budget.used == 10

    asyncio.run(scenario())
