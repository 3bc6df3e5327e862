"""The gateway benchmark's arrivals: waves of ``concurrency`` at once, or first requests staggered.

Both load generators (the compiled one in ``bench/loadgen`` and the asyncio one) against a real
HTTP/1.1 server on loopback that records when each request arrives.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import _loadgen
from bench import gateway as bench_gateway

ANSWER = b'{"choices":[{"message":{"role":"assistant","content":"ok"}}]}'


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True
    arrivals: list[float]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as both generators expect
    server: _Recorder

    def do_POST(self) -> None:
        self.server.arrivals.append(time.monotonic())
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder(("127.0.0.1", 0), _Handler)
    server.arrivals = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(params=["go", "python"])
def loadgen(request: pytest.FixtureRequest) -> Path | None:
    return _loadgen.binary() if request.param == "go" else None


def test_burst_arrivals_come_together(recorder: _Recorder, loadgen: Path | None) -> None:
    samples, errors, _wall, _cpu = bench_gateway.measure(loadgen, recorder.server_address[1], 4, 1)
    assert (len(samples), errors) == (4, 0)
    assert max(recorder.arrivals) - min(recorder.arrivals) < 0.25, recorder.arrivals


def test_staggered_arrivals_spread_over_the_stagger(recorder: _Recorder, loadgen: Path | None) -> None:
    samples, errors, wall, _cpu = bench_gateway.measure(
        loadgen, recorder.server_address[1], 4, 1, stagger=1.2
    )
    assert (len(samples), errors) == (4, 0)
    arrivals = sorted(recorder.arrivals)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # First requests at 0, 0.3, 0.6 and 0.9 s: gaps of about 0.3 s (a loaded machine can delay a
    # start, and so shorten the gap after it, but never brings one forward).
    assert all(gap >= 0.1 for gap in gaps), gaps
    assert arrivals[-1] - arrivals[0] >= 0.7, arrivals
    assert wall >= 0.85, wall
