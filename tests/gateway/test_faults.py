"""Fault injection and routing behaviour: dead and slow backends, wakes, balancing, the CLI.

- a backend killed mid-stream: every protocol ends its stream with an in-band error, no hang;
- one dead backend among three: every request still succeeds and the dead one is ejected;
- a slow backend: the per-backend read timeout answers 504;
- wake-on-request: concurrent requests share one wake and are served once the workload is ready;
  a wake that never completes answers 503 with Retry-After within the bound;
- least outstanding requests and prefix affinity spread or pin requests as documented;
- ``python -m sparkrun_operator.gateway`` serves a routing file and follows its changes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from sparkrun_operator.gateway import GatewaySettings, Workload
from tests.engine.conftest import EngineProc, Launcher, free_port
from tests.engine.test_openai_surface import metric

from .conftest import GatewayThread, StartGateway, workload, write_routes

# NB: long answers, so a stream is still running when the test acts on it, however loaded the machine.
SLOW = {"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "1000"}


@pytest.fixture
def launcher(tmp_path: Path) -> Launcher:
    launch = Launcher(tmp_path)
    yield launch  # type: ignore[misc]
    launch.close()


def _kill(engine: EngineProc) -> None:
    engine.proc.send_signal(signal.SIGKILL)


def _consume_killing(items: Iterable[object], engine: EngineProc, after: int = 1) -> None:
    """Iterate ``items``, killing ``engine`` once ``after`` items went through (mid-stream)."""
    for i, _ in enumerate(items):
        if i == after:
            _kill(engine)


def _claude_stream(claude: anthropic.Anthropic, engine: EngineProc) -> None:
    with claude.messages.stream(model="m", max_tokens=500, messages=[{"role": "user", "content": "go"}]) as s:
        _consume_killing(s, engine, after=3)


def test_backend_killed_mid_stream_openai(launcher: Launcher, start_gateway: StartGateway) -> None:
    engine = launcher("org/x", "--served-model-name", "m", env=SLOW)
    gw = start_gateway([workload("m", "m", [engine.url])])
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 500, "stream": True}
    started = time.monotonic()
    events = []
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=10) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line)
                if len(events) == 2:
                    _kill(engine)  # mid-stream: after the first tokens went through
    assert time.monotonic() - started < 8
    assert len(events) > 2
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert "went away" in error["message"]
    # The official client turns the in-band error into an exception instead of hanging.
    engine2 = launcher("org/x", "--served-model-name", "m", env=SLOW)
    gw.set_routes([workload("m", "m", [engine2.url])])
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0, timeout=10) as c:
        stream = c.chat.completions.create(**body)
        with pytest.raises(openai.APIError):
            _consume_killing(stream, engine2)


def test_backend_killed_mid_stream_anthropic_and_ollama(
    launcher: Launcher, start_gateway: StartGateway
) -> None:
    engines = [launcher("org/x", "--served-model-name", "m", env=SLOW) for _ in range(2)]
    gw = start_gateway([workload("m", "m", [engines[0].url])])
    with anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0, timeout=10) as claude:
        with pytest.raises(anthropic.APIError) as err:
            _claude_stream(claude, engines[0])
        assert "went away" in str(err.value)
    gw.set_routes([workload("m", "m", [engines[1].url])])
    client = ollama.Client(host=gw.url, timeout=10)
    try:
        chat = client.chat(
            model="m", messages=[{"role": "user", "content": "go"}], options={"num_predict": 500}, stream=True
        )
        with pytest.raises(ollama.ResponseError) as oerr:
            _consume_killing(chat, engines[1])
        assert "went away" in oerr.value.error
    finally:
        client.close()


def test_one_dead_backend_among_three(launcher: Launcher, start_gateway: StartGateway) -> None:
    alive = [launcher("org/x", "--served-model-name", "m") for _ in range(2)]
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = start_gateway([workload("m", "m", [alive[0].url, dead, alive[1].url])])
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0, timeout=10) as c:
        for i in range(12):
            reply = c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=2
            )
            assert reply.choices[0].message.content
    served = [metric(e, "vllm:request_success_total") for e in alive]
    assert sum(served) == 12
    assert min(served) >= 3
    text = httpx.get(f"{gw.url}/metrics").text
    assert f'sparkrun_gateway_backend_ejections_total{{backend="{dead}"}}' in text
    assert f'sparkrun_gateway_upstream_errors_total{{backend="{dead}",kind="connect"}}' in text


def test_all_backends_dead_is_502(start_gateway: StartGateway) -> None:
    gw = start_gateway([workload("m", "m", [f"http://127.0.0.1:{free_port()}"])])
    resp = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user"}]})
    assert resp.status_code == 502
    assert "could be reached" in resp.json()["error"]["message"]


def test_slow_backend_times_out(launcher: Launcher, start_gateway: StartGateway) -> None:
    slow = launcher("org/x", "--served-model-name", "m", env={"SPARKRUN_ENGINE_TTFT_SECONDS": "5"})
    gw = start_gateway([workload("m", "m", [slow.url], timeouts={"read": 0.5})])
    started = time.monotonic()
    resp = httpx.post(
        f"{gw.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 504
    assert "timed out" in resp.json()["error"]["message"]
    assert time.monotonic() - started < 3


class FileWaker:
    """Wakes a workload the way the operator would: the engine wakes, then routing shows it."""

    def __init__(self, routes: Path, engine: EngineProc, ready_after: float) -> None:
        self.routes = routes
        self.engine = engine
        self.ready_after = ready_after
        self.calls: list[str] = []

    async def wake(self, wl: Workload) -> None:
        self.calls.append(wl.key)

        async def later() -> None:
            await asyncio.sleep(self.ready_after)
            async with httpx.AsyncClient() as c:
                await c.post(f"{self.engine.url}/wake_up")
            await asyncio.to_thread(
                write_routes, self.routes, [workload("m", "m", [self.engine.url], state="Running")]
            )

        self._task = asyncio.get_running_loop().create_task(later())


def test_wake_on_request_shares_one_wake(
    launcher: Launcher, start_gateway: StartGateway, tmp_path: Path
) -> None:
    engine = launcher("org/x", "--served-model-name", "m", "--enable-sleep-mode")
    assert httpx.post(f"{engine.url}/sleep").status_code == 200
    routes = tmp_path / "routes-0.json"  # the first gateway's routing file (see conftest)
    waker = FileWaker(routes, engine, ready_after=0.5)
    gw = start_gateway([workload("m", "m", [engine.url], state="Sleeping")], waker=waker)
    results: list[int] = []

    def ask() -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "wake"}], "max_tokens": 2}
        results.append(httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=20).status_code)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 5
    assert waker.calls == ["ml/m"]
    text = httpx.get(f"{gw.url}/metrics").text
    assert 'sparkrun_gateway_wakes_total{outcome="started",workload="ml/m"} 1.0' in text
    assert 'sparkrun_gateway_wakes_total{outcome="ready",workload="ml/m"} 1.0' in text


def test_wake_is_bounded(start_gateway: StartGateway) -> None:
    gw = start_gateway([workload("m", "m", [], state="Stopped")], settings=GatewaySettings(wake_timeout=0.5))
    started = time.monotonic()
    resp = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user"}]})
    assert resp.status_code == 503
    assert resp.headers["retry-after"] == "1"
    assert "waking up" in resp.json()["error"]["message"]
    assert time.monotonic() - started < 3


def test_least_outstanding_spreads_concurrent_streams(
    launcher: Launcher, start_gateway: StartGateway
) -> None:
    engines = [launcher("org/x", "--served-model-name", "m", env=SLOW) for _ in range(2)]
    gw = start_gateway([workload("m", "m", [e.url for e in engines])])
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 60, "stream": True}
    with httpx.Client(timeout=20) as c:
        streams = [c.stream("POST", f"{gw.url}/v1/chat/completions", json=body) for _ in range(4)]
        responses = [s.__enter__() for s in streams]
        try:
            iters = [r.iter_lines() for r in responses]
            for it in iters:
                next(it)
            assert [metric(e, "vllm:num_requests_running") for e in engines] == [2, 2]
        finally:
            for s in streams:
                s.__exit__(None, None, None)


def test_prefix_affinity_pins_a_prompt(launcher: Launcher, start_gateway: StartGateway) -> None:
    engines = [launcher("org/x", "--served-model-name", "m") for _ in range(3)]
    gw = start_gateway([workload("m", "m", [e.url for e in engines], prefixAffinity=True)])
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0, timeout=10) as c:
        for _ in range(6):
            c.chat.completions.create(
                model="m", messages=[{"role": "system", "content": "Same long system prompt"}], max_tokens=1
            )
        counts = [metric(e, "vllm:request_success_total") for e in engines]
        assert sorted(counts) == [0, 0, 6]
        for i in range(30):
            c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"different prompt {i}"}], max_tokens=1
            )
    counts = [metric(e, "vllm:request_success_total") for e in engines]
    assert sum(1 for n in counts if n > 0) == 3  # distinct prompts spread over the ring


def test_cli_serves_and_follows_the_routing_file(launcher: Launcher, tmp_path: Path) -> None:
    engine = launcher("org/x", "--served-model-name", "m")
    routes = tmp_path / "routes.yaml"
    routes.write_text(f"workloads:\n  - name: m\n    servedName: m\n    endpoints: [{engine.url}]\n")
    port = free_port()
    log = (tmp_path / "gateway.log").open("wb")
    cmd = [sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--poll-interval", "0.1"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                models = httpx.get(f"{url}/v1/models").json()
                break
            except httpx.TransportError:
                assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert [m["id"] for m in models["data"]] == ["m"]
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 200
        routes.write_text(
            f"workloads:\n  - name: m\n    servedName: m\n    aliases: [mm]\n    endpoints: [{engine.url}]\n"
        )
        deadline = time.monotonic() + 10
        while len(httpx.get(f"{url}/v1/models").json()["data"]) != 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert httpx.post(f"{url}/v1/chat/completions", json={**body, "model": "mm"}).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
        log.close()
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert code in (0, -signal.SIGTERM)


def test_gateway_thread_fixture_is_isolated(start_gateway: StartGateway) -> None:
    gw: GatewayThread = start_gateway([])
    assert httpx.get(f"{gw.url}/v1/models").json() == {"object": "list", "data": []}
