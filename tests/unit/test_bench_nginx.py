"""The gateway benchmark's nginx target (``bench._nginx``): its config, and a real nginx streaming.

The config is read as text (buffering off, kept-alive upstream connections, the gateway's worker
count, every written path quoted and in its own directory); then a real nginx (Debian's package)
runs it in front of a loopback upstream that streams server-sent events with a long pause after
the first one, and both load generators of ``bench.gateway`` read through it: every token
arrives, and the first long before the pause ends (nginx passes chunks on, it does not collect
the answer). Stopping it leaves no worker behind, even when its master died first. A missing
nginx skips the target in a benchmark run (when it cannot be installed), skips the live tests,
and fails them under ``CI=true`` (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench import _loadgen, _nginx
from bench import gateway as bench_gateway
from bench._common import Proc, free_port

TOKENS = 8
#: Seconds between the first event and the rest: long, so that "the first event came before the
#: pause ended" holds with a wide margin on a loaded CI machine.
PAUSE = 5.0
#: Requests to this path get the whole answer at once (no pause).
NO_PAUSE = "/no-pause"


class _Streamer(BaseHTTPRequestHandler):
    """An OpenAI-style streaming answer: one event, a pause, the other events, ``[DONE]``."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-body-length", str(len(body)))
        self.end_headers()
        for i in range(TOKENS):
            self._chunk(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i)
            if i == 0 and self.path != NO_PAUSE:
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


def _config_words(text: str) -> list[str]:
    return [word for line in text.splitlines() for word in line.split()]


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
        f'pid "{tmp_path / "nginx.pid"}";',
        f'proxy_temp_path "{tmp_path / "proxy"}";',
    ):
        assert expected in lines, (expected, text)
    # Nothing written outside the directory: every path in the config is quoted and lies in it.
    paths = [word.rstrip(";") for word in _config_words(text) if word.startswith('"/')]
    assert len(paths) >= 7, paths  # pid, error log, five temp paths
    assert all(p.startswith('"') and p.endswith('"') for p in paths), paths
    assert all(Path(p.strip('"')).is_relative_to(tmp_path) for p in paths), paths
    # Unquoted, only the URL paths of the locations.
    assert {w for w in _config_words(text) if w.startswith("/")} == {"/", _nginx.HEALTH}, text


@pytest.mark.parametrize("char", ['"', "\\", "$", ";", "{", "}", "\n", "\t", "\x7f"])
def test_a_directory_nginx_would_misread_is_refused(tmp_path: Path, char: str) -> None:
    with pytest.raises(ValueError, match="nginx directory"):
        _nginx.render(tmp_path / f"a{char}b", 8080, 9090, 1)


def test_nginx_accepts_the_config_in_a_directory_with_a_space(nginx: str, tmp_path: Path) -> None:
    directory = tmp_path / "with space"
    directory.mkdir()
    config = directory / "nginx.conf"
    config.write_text(_nginx.render(directory, free_port(), free_port(), 2))
    done = subprocess.run(
        [nginx, "-t", "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_no_nginx_and_no_way_to_install_it_skips_the_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_nginx, "find", lambda: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ran: list[object] = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    assert bench_gateway.nginx_target(None) is None  # the default run: every target
    assert bench_gateway.nginx_target({"direct", "nginx"}) is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert all(line.startswith("nginx: skipped") for line in out), out
    assert ran == []  # no apt-get as a user
    # Not wanted: not even looked for.
    monkeypatch.setattr(_nginx, "find", lambda: pytest.fail("looked for nginx"))
    assert bench_gateway.nginx_target({"direct", "gateway"}) is None


def test_install_as_root_has_a_timeout_and_starts_no_service(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(_nginx, "POLICY_RC_D", policy)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    apt = "/usr/bin/apt-get"
    monkeypatch.setattr(_nginx.shutil, "which", lambda name: apt if name == "apt-get" else None)
    installed: list[str] = []
    monkeypatch.setattr(_nginx, "find", lambda: installed[0] if installed else None)
    calls: list[tuple[list[str], dict[str, Any], str, int]] = []

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        # During the install the policy forbids services to start (exit 101), executable.
        calls.append((cmd, kwargs, policy.read_text(), policy.stat().st_mode & 0o777))
        installed.append("/usr/sbin/nginx")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", run)
    assert _nginx.locate() == "/usr/sbin/nginx"
    [(cmd, kwargs, text, mode)] = calls
    assert cmd[:2] == [apt, "install"]
    assert cmd[-1] == "nginx"
    assert kwargs["timeout"] == _nginx.INSTALL_TIMEOUT
    assert text.splitlines()[-1] == "exit 101"
    assert mode == 0o755
    assert not policy.exists()  # removed afterwards

    # An install that hangs is given up on: the target is skipped, the policy still removed.
    installed.clear()

    def hang(cmd: list[str], **kwargs: Any) -> None:
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(subprocess, "run", hang)
    assert _nginx.locate() is None
    assert "nginx: skipped" in capsys.readouterr().out
    assert not policy.exists()

    # A policy of the machine's own is left as it is.
    policy.write_text("#!/bin/sh\nexit 0\n")
    assert _nginx.locate() is None
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"


@pytest.mark.parametrize("generator", ["go", "python"])
def test_nginx_streams_each_token_as_it_comes(proxy: tuple[Proc, int], generator: str) -> None:
    loadgen = _loadgen.binary() if generator == "go" else None
    samples, errors, _wall, _cpu = bench_gateway.measure(loadgen, proxy[1], 2, 1)
    assert errors == 0
    assert [s.tokens for s in samples] == [TOKENS] * 2
    for s in samples:
        # The first token came through long before the upstream's pause was over, the rest after.
        assert s.ttft < PAUSE / 2 < PAUSE <= s.total, s


def _worker_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


@pytest.fixture(params=["reachable", "private"])
def body_directory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, bool]]:
    """A directory for nginx: under a world-traversable one (the workers can use it as
    ``nobody``), or under pytest's 0700 one (they cannot: they stay root)."""
    if request.param == "private":
        yield tmp_path / "nginx", False
        return
    with tempfile.TemporaryDirectory(prefix="nginx-test-") as tmp:
        os.chmod(tmp, 0o711)
        yield Path(tmp) / "nginx", True


def test_a_large_request_body_goes_through_as_root(
    nginx: str, upstream: int, body_directory: tuple[Path, bool]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the worker user only changes when nginx starts as root")
    directory, reachable = body_directory
    port = free_port()
    proc = _nginx.start(nginx, directory, port, upstream, 1)
    try:
        proc.wait_http(_nginx.health_url(port), timeout=30)
        # Above the client body buffer: nginx writes it to client_body_temp, as the worker user.
        body = b"x" * 65536
        answer = httpx.post(f"http://127.0.0.1:{port}{NO_PAUSE}", content=body, timeout=30)
        assert answer.status_code == 200, (answer.text, (directory / "error.log").read_text())
        assert answer.headers["x-body-length"] == str(len(body))
        [worker] = _nginx.children(proc.proc.pid)
        assert (_worker_uid(worker) != 0) is reachable  # nobody where it can reach the directory
    finally:
        proc.stop()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("master_killed", [False, True])
def test_stop_leaves_no_worker_behind(proxy: tuple[Proc, int], master_killed: bool) -> None:
    proc, port = proxy
    workers = _nginx.children(proc.proc.pid)
    assert len(workers) == 2, workers
    assert all(_alive(w) for w in workers), workers
    if master_killed:  # its workers outlive a SIGKILLed master, still listening
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(10)
        assert _port_open(port)
    proc.stop()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)]
    assert not _port_open(port)


def test_workers_are_children_pinned_with_the_master(proxy: tuple[Proc, int]) -> None:
    proc, port = proxy
    workers = _nginx.children(proc.proc.pid)
    assert len(workers) == 2, workers  # worker_processes 2; no cache manager without a cache
    cpu = {max(os.sched_getaffinity(0))}
    moved = _nginx.pin_tree(proc.proc.pid, cpu)
    assert sorted(moved) == sorted([proc.proc.pid, *workers])
    assert all(os.sched_getaffinity(pid) == cpu for pid in moved)
    # The workers answer the requests, so the children-inclusive count is above the master's.
    with httpx.Client(timeout=10) as client:
        for _ in range(3000):
            client.get(_nginx.health_url(port))
    master = proc.cpu_seconds()
    assert proc.cpu_seconds(children=True) > master, master


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
