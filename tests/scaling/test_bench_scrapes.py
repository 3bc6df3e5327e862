"""The scale benchmark's scrape targets (``bench/_scrapes.py``) on real loopback sockets.

What ``bench.scale --autoscaling`` relies on: the answer is a load the operator reads (its own
parser, ``plan/enginemetrics.py``) as one request running, none waiting, a counter that moves;
only addresses of the pod CIDR get it, and each is counted as its pod; the counts are served on
``127.0.0.1`` only; the rates come from the per-second counts. The route to loopback
(``local_route``) changes the machine's routing and is exercised by a benchmark run, not here.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx

from bench import _scrapes
from sparkrun_operator.plan.enginemetrics import EngineLoad, parse


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_only_pod_addresses_are_answered_and_each_is_counted() -> None:
    port = free_port()

    async def scrape() -> tuple[list[httpx.Response], dict[str, Any]]:
        # NB: 127.0.0.2 and .3 stand for pods of the CIDR 127.0.0.2/31; 127.0.0.4 is outside it
        server = await _scrapes.serve(
            "127.0.0.2/31", port, ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
        )
        async with server, httpx.AsyncClient(timeout=5) as http:
            asked = [(2, "/metrics"), (2, "/metrics"), (3, "/metrics"), (4, "/metrics"), (1, "/metrics")]
            asked += [(2, "/stats"), (2, "/other")]
            answers = [await http.get(f"http://127.0.0.{host}:{port}{path}") for host, path in asked]
            stats = (await http.get(f"http://127.0.0.1:{port}/stats")).json()
        return answers, stats

    answers, stats = asyncio.run(scrape())
    assert [a.status_code for a in answers] == [200, 200, 200, 404, 404, 404, 404]
    loads = [parse(a.content) for a in answers[:3]]
    assert loads == [
        EngineLoad(waiting=0.0, running=1.0, kv_cache_usage=0.05, requests_total=n) for n in (1.0, 2.0, 1.0)
    ]
    assert 20_000 < len(answers[0].content) < 2 * 1024 * 1024  # vLLM-sized, within the operator's cap
    assert stats["scrapes"] == 3
    assert stats["per_pod"] == {"127.0.0.2": 2, "127.0.0.3": 1}
    assert stats["refused"] == 4
    now = time.time()
    assert _scrapes.rate(stats, now - 10, now + 1) == 3 / 11


def test_the_summary_counts_the_windows_apart() -> None:
    stats = {"scrapes": 9, "pods": 3, "refused": 0, "per_second": {"100": 1, "101": 2, "150": 3, "151": 3}}
    got = _scrapes.summary(stats, start=100.0, converged=110.0, idle=(150.0, 152.0), ready=30, cpu_s=0.5)
    assert got["per_s_converging"] == 0.3
    assert got["per_s_idle"] == 3.0
    assert got["expected_per_s_idle"] == 2.0  # 30 engines every 15 s
    assert got["pods_scraped"] == 3
