"""The gateway benchmark's nginx target (``bench._nginx``): its config, and a real nginx streaming.

The config is read as text (buffering off, kept-alive upstream connections, the gateway's worker
count, every written path in its own directory); then a real nginx (Debian's package) runs it in
front of a loopback upstream that streams server-sent events with a pause after the first one,
and both load generators of ``bench.gateway`` read through it: every token arrives, and the first
before the pause ends (nginx passes chunks on, it does not collect the answer). A missing nginx
skips the live tests, and fails them under ``CI=true`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench import _loadgen, _nginx
from bench import gateway as bench_gateway
from bench._common import Proc, free_port

TOKENS = 8
PAUSE = 0.6  # seconds between the first event and the rest


class _Streamer(BaseHTTPRequestHandler):
    """An OpenAI-style streaming answer: one event, a pause, the other events, ``[DONE]``."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(TOKENS):
            self._chunk(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i)
            if i == 0:
                time.sleep(PAUSE)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def nginx(require: Any) -> str:
    found = _nginx.find()
    require(found is not None, "nginx is not installed (apt-get install nginx)")
    assert found is not None
    return found


@pytest.fixture
def upstream() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Streamer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def proxy(nginx: str, upstream: int, tmp_path: Path) -> Iterator[tuple[Proc, int]]:
    port = free_port()
    proc = _nginx.start(nginx, tmp_path / "nginx", port, upstream, 2)
    try:
        proc.wait_http(_nginx.health_url(port), timeout=30)
        yield proc, port
    finally:
        proc.stop()


def test_config_streams_over_kept_alive_connections(tmp_path: Path) -> None:
    text = _nginx.render(tmp_path, 8080, 9090, 3)
    lines = {line.strip() for line in text.splitlines()}
    for expected in (
        "worker_processes 3;",
        "daemon off;",
        "master_process on;",
        "proxy_buffering off;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        f"keepalive {_nginx.KEEPALIVE};",
        "server 127.0.0.1:9090;",
        "listen 127.0.0.1:8080 backlog=4096;",
        "access_log off;",
        f"pid {tmp_path / 'nginx.pid'};",
        f"proxy_temp_path {tmp_path / 'proxy'};",
    ):
        assert expected in lines, (expected, text)
    # Nothing written outside the directory: every absolute path in the config lies in it.
    paths = [
        word.rstrip(";")
        for line in lines
        if not line.startswith("location")  # URL paths, not files
        for word in line.split()
        if word.startswith("/")
    ]
    assert len(paths) >= 7, paths  # pid, error log, five temp paths
    assert all(Path(p).is_relative_to(tmp_path) for p in paths), paths


def test_nginx_accepts_the_config(nginx: str, tmp_path: Path) -> None:
    config = tmp_path / "nginx.conf"
    config.write_text(_nginx.render(tmp_path, free_port(), free_port(), 2))
    done = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("generator", ["go", "python"])
def test_nginx_streams_each_token_as_it_comes(proxy: tuple[Proc, int], generator: str) -> None:
    loadgen = _loadgen.binary() if generator == "go" else None
    samples, errors, _wall, _cpu = bench_gateway.measure(loadgen, proxy[1], 2, 2)
    assert errors == 0
    assert [s.tokens for s in samples] == [TOKENS] * 4
    for s in samples:
        # The first token came through before the upstream's pause was over, the rest after it.
        assert s.ttft < PAUSE / 2 < PAUSE <= s.total, s


def test_workers_are_children_pinned_with_the_master(proxy: tuple[Proc, int]) -> None:
    proc, _port = proxy
    workers = _nginx.children(proc.proc.pid)
    assert len(workers) == 2, workers  # worker_processes 2; no cache manager without a cache
    cpu = {max(os.sched_getaffinity(0))}
    moved = _nginx.pin_tree(proc.proc.pid, cpu)
    assert sorted(moved) == sorted([proc.proc.pid, *workers])
    assert all(os.sched_getaffinity(pid) == cpu for pid in moved)
    assert proc.cpu_seconds(children=True) >= proc.cpu_seconds()


def test_floor_rows_compare_the_gateway_with_nginx() -> None:
    row: dict[str, Any] = {
        "direct": {"tokens_per_s": 1000.0},
        "gateway": {"added_ttft_p50_ms": 0.9, "added_ttft_p99_ms": 3.0, "tokens_per_s": 950.0},
        "nginx": {"added_ttft_p50_ms": 0.2, "added_ttft_p99_ms": 1.0, "tokens_per_s": 1000.0},
        "loadgen_cpu_s": 1.0,
    }
    out = bench_gateway.floor(row)
    assert set(out) == {"gateway"}
    assert out["gateway"]["added_ttft_p50_minus_nginx_ms"] == pytest.approx(0.7)
    assert out["gateway"]["added_ttft_p99_minus_nginx_ms"] == pytest.approx(2.0)
    assert out["gateway"]["tokens_ratio_vs_nginx"] == pytest.approx(0.95)
