"""``--workers N``: N gateway processes share one port (SO_REUSEPORT), every one of them routes,
``/metrics`` on any of them counts the requests of all, and SIGTERM stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.engine.conftest import Launcher, free_port
from tests.gateway.conftest import workload, write_routes

WORKERS = 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def gateway_workers(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    launcher = Launcher(tmp_path)
    engine = launcher("org/chat", "--served-model-name", "chat-model")
    routes = tmp_path / "routes.json"
    write_routes(routes, [workload("chat", "chat-model", [engine.url])])
    port = free_port()
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(WORKERS)),
            *("--log-level", "warning"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < WORKERS and time.monotonic() < deadline:  # until every worker listens
        assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
        try:
            seen.add(httpx.get(url + "/healthz", timeout=2).json()["worker"])
        except httpx.TransportError:
            time.sleep(0.1)
    yield url, proc
    if proc.poll() is None:
        proc.kill()
        for child in _children(proc.pid):
            os.kill(child, signal.SIGKILL)
        proc.wait()
    log.close()
    launcher.close()


def test_workers_share_the_port_and_all_route(gateway_workers: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, proc = gateway_workers
    served_by: dict[int, int] = {}
    streams = 24
    body = {"model": "chat-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for _ in range(streams):
        # A fresh connection each time: the kernel picks the worker per connection.
        with httpx.Client(base_url=url, timeout=30) as client:
            worker = client.get("/healthz").json()["worker"]
            with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                assert answer.status_code == 200
                text = "".join(answer.iter_text())
        assert text.startswith(": command_id ")
        assert text.rstrip().endswith("data: [DONE]")
        served_by[worker] = served_by.get(worker, 0) + 1
    assert sorted(served_by) == list(range(WORKERS)), served_by  # every worker served streams

    # /metrics on any worker counts every worker's requests.
    for _ in range(4):
        with httpx.Client(base_url=url, timeout=10) as client:
            text = client.get("/metrics").text
        counted = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("sparkrun_gateway_requests_total{") and 'route="chat/completions"' in line
        ]
        assert sum(counted) == streams, text

    workers = _children(proc.pid)
    assert len(workers) == WORKERS
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not [pid for pid in workers if _alive(pid)]


def test_a_worker_that_dies_takes_the_others_down(
    gateway_workers: tuple[str, subprocess.Popen[bytes]],
) -> None:
    _, proc = gateway_workers
    workers = _children(proc.pid)
    os.kill(workers[0], signal.SIGKILL)
    assert proc.wait(30) == 1  # a half-served port is not kept: the pod restarts as a whole
    assert not [pid for pid in workers if _alive(pid)]
