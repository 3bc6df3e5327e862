"""``sparkrun-k8s lease hold`` ends promptly on Ctrl-C (SIGINT), whatever it is doing.

A cold CI run found ``hold`` still renewing 30 s after SIGINT: the run had been started as a
background job of a non-interactive shell, so every process under it inherited SIGINT ignored,
and ``asyncio.run`` installs its Ctrl-C handler only over Python's default one. ``hold`` now
takes SIGINT back. Each test here starts the real CLI with SIGINT ignored (as that job did)
against a stand-in apiserver on loopback (real HTTP) and interrupts it:

- as soon as its claim is answered (printing it, or asleep for ttl/3 until the next renew);
- while a renew is in flight, the stand-in holding the request unanswered: the renew is
  abandoned, not awaited (the client's own deadline is 30 s).

Both must exit 130 ("interrupted") within :data:`PROMPT` seconds; before the fix both ran on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

NAMESPACE = "ns1"
NAME = "held"
#: Seconds the interrupted hold may take to exit (it takes well under one unloaded).
PROMPT = 15.0
#: Seconds the CLI may take to start and make its first claim (imports, on a loaded machine).
START = 60.0
#: Launches the CLI with SIGINT ignored, as ``cmd &`` in a non-interactive shell does.
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, '-m', 'sparkrun_operator.cli.main', *sys.argv[1:]])"
)


class _Apiserver(ThreadingHTTPServer):
    """Answers what ``hold`` asks: who am I, the workload, its Lease (create, read, replace).
    Once ``block`` is set, Lease reads get no answer until ``release`` is (the test's end)."""

    daemon_threads = True
    lease: dict[str, Any] | None
    writes: int
    wrote: threading.Event
    block: threading.Event
    blocked: threading.Event
    release: threading.Event


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Apiserver

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        return body

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.endswith(f"/inferenceworkloads/{NAME}"):
            workload = {
                "apiVersion": "sparkrun.dev/v1alpha1",
                "kind": "InferenceWorkload",
                "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-1", "resourceVersion": "1"},
                "spec": {"model": {"name": "m"}, "lease": {"ttlSeconds": 10}},
            }
            return self._send(200, workload)
        if "/leases/" in path and self.server.block.is_set():
            self.server.blocked.set()
            self.server.release.wait(timeout=120)
            return  # NB: no answer: the connection closes with the server
        if "/leases/" in path and self.server.lease is not None:
            return self._send(200, self.server.lease)
        self._send(404, {"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound"})

    def _write(self, code: int) -> None:
        lease = self._body()
        self.server.writes += 1
        lease["metadata"]["resourceVersion"] = str(self.server.writes + 1)
        self.server.lease = lease
        self._send(code, lease)
        self.server.wrote.set()

    def do_POST(self) -> None:
        if self.path.split("?")[0].endswith("/selfsubjectreviews"):
            return self._send(201, {**self._body(), "status": {"userInfo": {"username": "alice"}}})
        self._write(201)

    def do_PUT(self) -> None:
        self._write(200)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[_Apiserver, Path]]:
    server = _Apiserver(("127.0.0.1", 0), _Handler)
    server.lease, server.writes = None, 0
    server.wrote, server.block = threading.Event(), threading.Event()
    server.blocked, server.release = threading.Event(), threading.Event()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, kubeconfig
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _wait(event: threading.Event, hold: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START
    while not event.wait(timeout=0.2):
        assert hold.poll() is None, f"hold exited ({hold.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {START:.0f} s"


@pytest.mark.parametrize("moment", ["after the claim", "renew in flight"])
def test_sigint_ends_hold_promptly_even_when_started_ignoring_it(
    apiserver: tuple[_Apiserver, Path], moment: str
) -> None:
    server, kubeconfig = apiserver
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    command = [sys.executable, "-c", IGNORING_SIGINT, "lease", "hold", NAME, "-n", NAMESPACE]
    hold = subprocess.Popen(
        [*command, "--kubeconfig", str(kubeconfig)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        _wait(server.wrote, hold, "claim")
        if moment == "renew in flight":
            server.block.set()  # the next renew's Lease read (ttl/3 = 3.3 s later) gets no answer
            _wait(server.blocked, hold, "renew")
        writes = server.writes
        hold.send_signal(signal.SIGINT)
        try:
            out, err = hold.communicate(timeout=PROMPT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hold still running {PROMPT:.0f} s after SIGINT ({moment})")
    finally:
        if hold.poll() is None:
            hold.kill()
        hold.communicate()  # NB: reaps it and closes its pipes, whatever happened above
    assert hold.returncode == 130, err.decode()
    assert err.decode().endswith("interrupted\n"), err.decode()
    if moment == "renew in flight":
        assert b"held by alice" in out  # the claim, printed before the renew that blocked
        assert server.writes == writes  # that renew was abandoned at its read, never written
