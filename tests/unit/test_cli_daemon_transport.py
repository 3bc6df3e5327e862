"""The CLI's daemon transport (``cli/daemonapi.py``) against loopback HTTP servers that play the
shim's listener (``--url``) and kube-apiserver's aggregated path: the bearer token and the
Idempotency-Key go where they should, a redirect is not followed (the token stays with the URL
the user gave), an answer larger than the bound is refused without being read whole, a 429 says
when to retry, a job is followed to its end and its failure is exit 1, and the events stream is
read line by line (heartbeat comments skipped)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from sparkrun_operator.api.meta import DAEMON_API_PREFIX
from sparkrun_operator.cli import complete, daemonapi, lifecycle
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import daemon_transport

TOKEN = "tok-" + "x" * 20


@dataclass
class Shim:
    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    polls: int = 0
    fail_job: bool = False
    never_end: bool = False
    polled: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def shim() -> AsyncIterator[Shim]:
    found = Shim()

    async def record(request: web.Request) -> None:
        found.seen.append(
            {
                "path": request.path,
                "query": dict(request.query),
                "authorization": request.headers.get("Authorization"),
                "key": request.headers.get("Idempotency-Key"),
                "last_event": request.headers.get("Last-Event-ID"),
            }
        )

    async def info(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"protocol": 1})

    async def op(request: web.Request) -> web.Response:
        await record(request)
        if request.match_info["name"] == "workloads.list":
            names = ("chat", "chat2", "other", "chat;id", "chat$(id)", "Chat", "chat\x1b]0;x")
            rows = [{"workload_id": f"id-{n}", "metadata": {"name": n}} for n in names]
            return web.json_response(rows)
        if request.match_info["name"] == "slow.down":
            body = {
                "detail": "too many",
                "error": {"type": "RateLimited", "attrs": {"retry_after_seconds": 3}},
            }
            return web.json_response(body, status=429, headers={"Retry-After": "0"})
        return web.json_response({"job_id": "j1", "events_url": "/v1/jobs/j1/events"}, status=202)

    async def job(request: web.Request) -> web.Response:
        await record(request)
        found.polls += 1
        if found.polls >= 2:
            found.polled.set()
        if found.polls < 2 or found.never_end:
            return web.json_response({"id": "j1", "state": "running", "seq": 2})
        if found.fail_job:
            error = {"detail": "gone", "error": {"type": "LookupError"}}
            return web.json_response({"id": "j1", "state": "failed", "error": error, "seq": 3})
        return web.json_response({"id": "j1", "state": "succeeded", "result": {"ok": True}, "seq": 3})

    async def events(request: web.Request) -> web.StreamResponse:
        await record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in (b": heartbeat\n\n", b'id: 1\ndata: {"id": 1, "type": "state", "state": "queued"}\n\n'):
            await response.write(frame)
        await response.write(b'id: 2\ndata: {"id": 2, "type": "state", "state": "succeeded"}\n\n')
        return response

    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):  # NB: the client stopped reading, as it should
            await response.write(b"[" + b'"x",' * (daemonapi.MAX_BODY // 4 + 10) + b'"x"]')
        return response

    async def moved(request: web.Request) -> web.Response:
        await record(request)
        raise web.HTTPFound("http://127.0.0.1:9/v1/info")

    app = web.Application()
    for prefix in ("", DAEMON_API_PREFIX):
        app.router.add_get(prefix + "/v1/info", info)
        app.router.add_post(prefix + "/v1/ops/{name}", op)
        app.router.add_get(prefix + "/v1/jobs/j1", job)
        app.router.add_get(prefix + "/v1/jobs/j1/events", events)
        app.router.add_get(prefix + "/v1/huge", huge)
        app.router.add_get(prefix + "/v1/moved", moved)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield found
    finally:
        await runner.cleanup()


def _direct(shim: Shim, tmp_path: Path) -> argparse.Namespace:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return argparse.Namespace(
        url=shim.url, token_file=str(token), ca_cert=None, kubeconfig=None, context=None
    )


def _aggregated(shim: Shim, tmp_path: Path) -> argparse.Namespace:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": shim.url}}],
        "users": [{"name": "u", "user": {"token": "kube-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return argparse.Namespace(url=None, token_file=None, ca_cert=None, kubeconfig=str(path), context=None)


@pytest.mark.parametrize("transport", ["direct", "aggregated"])
async def test_calls_follow_a_job_and_stream_its_events(
    shim: Shim, tmp_path: Path, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daemonapi, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(daemonapi, "MAX_BODY", 64 * 1024)
    args = _direct(shim, tmp_path) if transport == "direct" else _aggregated(shim, tmp_path)
    prefix = "" if transport == "direct" else DAEMON_API_PREFIX
    bearer = f"Bearer {TOKEN}" if transport == "direct" else "Bearer kube-token"
    async with daemon_transport(args) as api:
        assert await api.get("/v1/info") == {"protocol": 1}
        assert await api.call("cluster.create", {"name": "a"}, key="k-1") == {"ok": True}
        events = [e async for e in api.stream("/v1/jobs/j1/events", after=0)]
        assert [e["state"] for e in events] == ["queued", "succeeded"]
        _ = [e async for e in api.stream("/v1/jobs/j1/events", after=1)]
        with pytest.raises(CliError) as limited:
            await api.post("/v1/ops/slow.down", {})
        assert limited.value.code == 5
        assert str(limited.value) == "RateLimited: too many (retry after 3 s)"
        with pytest.raises(CliError) as big:
            await api.get("/v1/huge")
        assert big.value.code == 3
        shim.polls, shim.fail_job = 0, True
        with pytest.raises(CliError) as failed:
            await api.call("cluster.create", {"name": "a"})
        assert failed.value.code == 1
        assert str(failed.value) == "job j1 failed: LookupError: gone"
        assert await api.call("cluster.create", {}, wait=False) == {
            "job_id": "j1",
            "events_url": "/v1/jobs/j1/events",
        }
    assert all(seen["authorization"] == bearer for seen in shim.seen)
    assert all(seen["path"].startswith(prefix + "/v1/") for seen in shim.seen)
    posted = [s for s in shim.seen if "/v1/ops/" in s["path"]]
    assert posted[0]["key"] == "k-1"
    assert [s["last_event"] for s in shim.seen if s["path"].endswith("/events")] == [None, "1"]


async def test_a_redirect_is_not_followed_with_the_token(shim: Shim, tmp_path: Path) -> None:
    async with daemon_transport(_direct(shim, tmp_path)) as api:
        with pytest.raises(CliError) as refused:
            await api.get("/v1/moved")
    assert refused.value.code == 3  # a 302 is not an answer
    assert [s["path"] for s in shim.seen] == ["/v1/moved"]


async def test_unreachable_is_exit_3(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    args = argparse.Namespace(
        url="http://127.0.0.1:9", token_file=str(token), ca_cert=None, kubeconfig=None, context=None
    )
    async with daemon_transport(args) as api:
        with pytest.raises(CliError) as refused:
            await api.get("/v1/info")
    assert refused.value.code == 3
    assert TOKEN not in str(refused.value)


async def test_token_options_go_with_url_only(shim: Shim, tmp_path: Path) -> None:
    args = _aggregated(shim, tmp_path)
    args.token_file = str(tmp_path / "token")
    with pytest.raises(CliError) as refused:
        async with daemon_transport(args):
            pass
    assert refused.value.code == 2
    assert shim.seen == []


async def test_workload_names_complete_within_the_bound(shim: Shim, tmp_path: Path) -> None:
    """``stop --daemon NAME<TAB>``: the daemon's listing, only names a shell may be given (the
    listing is the daemon's answer, not the apiserver's validation), nothing without a cluster."""
    args = _aggregated(shim, tmp_path)
    args.daemon = True
    assert await asyncio.to_thread(lifecycle.complete_workloads, "ch", args) == ["chat", "chat2"]
    direct = _direct(shim, tmp_path)
    assert await asyncio.to_thread(lifecycle.complete_workloads, "", direct) == ["chat", "chat2", "other"]
    nowhere = argparse.Namespace(
        url=None, token_file=None, ca_cert=None, kubeconfig=str(tmp_path / "none"), context=None, daemon=True
    )
    started = time.monotonic()
    assert await asyncio.to_thread(lifecycle.complete_workloads, "", nowhere) == []
    assert time.monotonic() - started < complete.SECONDS + 1


async def test_ctrl_c_while_waiting_names_the_job_that_goes_on(shim: Shim, tmp_path: Path) -> None:
    shim.never_end = True
    env = {**os.environ, daemonapi.TOKEN_ENV: TOKEN}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sparkrun_operator.cli.main", "daemon", "call", "cluster.create", "name=a",
        "--url", shim.url, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await asyncio.wait_for(shim.polled.wait(), 60)  # NB: the command follows its job
    process.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 130, err
    text = err.decode()
    assert "job j1 goes on" in text
    assert "sparkrun-k8s daemon cancel j1" in text
    assert text.endswith("interrupted\n")
    assert TOKEN not in text
    assert TOKEN not in out.decode()


async def test_a_plain_http_token_never_goes_to_a_proxy(
    shim: Shim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R1: http:// is allowed to loopback only so the token never crosses a network in clear;
    ``$HTTP_PROXY`` (often a proxy elsewhere on the network) must not carry it there all the same."""
    asked: list[str | None] = []

    async def proxy(request: web.Request) -> web.Response:
        asked.append(request.headers.get("Authorization"))
        return web.json_response({"proxied": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{runner.addresses[0][1]}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        async with daemon_transport(_direct(shim, tmp_path)) as api:
            assert await api.get("/v1/info") == {"protocol": 1}
    finally:
        await runner.cleanup()
    assert asked == []
    assert [s["authorization"] for s in shim.seen] == [f"Bearer {TOKEN}"]


async def test_a_huge_refusal_is_not_read_whole(tmp_path: Path) -> None:
    """R1: on the aggregated path a refusal's body is bounded too (an answer over the bound is
    refused unread; an error body must not be read to its end, however large)."""
    sent: list[bool] = []

    async def refused(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for _ in range(64):  # 64 MiB of a "Status" that never ends
                await response.write(b'{"message": "' + b"x" * (1 << 20))
        except ConnectionError:
            sent.append(False)  # NB: the client hung up: it stopped reading, as it should
            return response
        sent.append(True)
        return response

    app = web.Application()
    app.router.add_get(DAEMON_API_PREFIX + "/v1/refused", refused)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        args = _aggregated(Shim(url=f"http://127.0.0.1:{runner.addresses[0][1]}"), tmp_path)
        async with daemon_transport(args) as api:
            with pytest.raises(CliError) as failed:
                await api.get("/v1/refused")
        for _ in range(100):
            if sent:
                break
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()
    assert failed.value.code == 3
    assert len(str(failed.value)) < 4000
    assert sent == [False]
