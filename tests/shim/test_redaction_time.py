"""Redaction of long tenant strings, on the testbed with the real shim and operator (issue 23).

A tenant controls the strings its own workload spec holds and what its pods print. Both are
redacted before a reader sees them (``diagnostics.collect`` in the operator, ``/v1/streams/logs``
in the shim), so redaction runs in linear time (``ops.redact``, ADR 0037) and, above a size
threshold, in a worker thread: the process's event loop keeps serving meanwhile. Each test
probes the loop of the process doing the redaction from outside, while it works: the operator's
liveness endpoint (kopf serves it on the operator's loop) and the shim's ``/v1/health``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import API, Daemon, start_daemon, stop_daemon
from tests.shim.harness import free_port

#: One engine argument of 30 KiB: under the per-item bound of the CRD (32 KiB), a run of word
#: characters (the quadratic case of the old ``NAME=value`` pattern: minutes for this one item).
LONG_ARG = "--chat-template=" + "x" * 30_000
ARG_SECRET = "PlantedLongArgKey4455"
LINE_SECRET = "hf_PlantedLongLineToken123456"
#: How long one probe of a loop may take while the redaction runs (a blocked loop: minutes).
PROBE_BOUND = 2.0


class _Prober:
    """GETs ``path`` every 0.1 s from a thread until stopped (a client of ``connect``): the
    slowest answer's seconds (30 for a failure) and the count of answers."""

    def __init__(self, connect: Callable[[], httpx.Client], path: str) -> None:
        self.connect, self.path = connect, path
        self.slowest = 0.0
        self.answers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.connect() as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(self.path, timeout=30).status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.monotonic() - started
                self.slowest = max(self.slowest, took if ok else 30.0)
                self.answers += ok
                self._stop.wait(0.1)

    def __enter__(self) -> _Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=40)


@pytest.fixture(scope="module")
def probed(
    request: pytest.FixtureRequest,
    testbed: Testbed,
    crds: list[str],
    kube: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Daemon, str]]:
    """The module's shim and operator, the operator with a liveness endpoint (on its loop)."""
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    workdir: Path = tmp_path_factory.mktemp("shim")
    running = start_daemon(testbed, kube, workdir, extra_operator_args=("--liveness", liveness))
    failed_before = request.session.testsfailed
    try:
        deadline = time.monotonic() + 60
        while True:  # the operator answers once kopf has started
            try:
                if httpx.get(liveness, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, running.runner.logs()
            time.sleep(0.2)
        yield running, liveness
    finally:
        if request.session.testsfailed > failed_before:
            print(running.runner.logs())
        stop_daemon(running)


def test_a_long_engine_argument_keeps_diagnostics_fast_and_the_operator_serving(
    probed: tuple[Daemon, str],
) -> None:
    daemon, liveness = probed
    ns = daemon.namespace
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceWorkload",
            "metadata": {"name": "long-arg", "namespace": ns},
            "spec": {
                "model": {"name": "org/small"},
                "topology": {"nodes": 1, "gpusPerNode": 1},
                "state": "Stopped",
                "engine": {"args": [LONG_ARG, f"--api-key={ARG_SECRET}"]},
            },
        }
    )
    with _Prober(httpx.Client, liveness) as prober:
        started = time.monotonic()
        job_id = daemon.submit("reader", "diagnostics.collect", {"log_tail": 10})
        try:
            state = daemon.wait_job(job_id, "reader", timeout=30)["state"]
        except AssertionError:
            state = "unfinished after 30 s"
        took = time.monotonic() - started
    seen = f"job {state} after {took:.1f} s; the operator's loop answered within {prober.slowest:.2f} s"
    print(seen)
    assert state == "succeeded", seen
    assert took < 15, seen
    assert prober.answers > 0
    assert prober.slowest < PROBE_BOUND, seen
    with daemon.http("reader") as client:
        bundle = client.get(f"/v1/jobs/{job_id}/artifacts/diagnostics").text
    records = [json.loads(line) for line in bundle.splitlines()]
    args = [
        r["record"]["spec"]["engine"]["args"]
        for r in records
        if r["section"] == "workloads" and r["record"]["metadata"]["name"] == "long-arg"
    ]
    assert args == [[LONG_ARG, "--api-key=[redacted]"]]  # the long item whole, the secret not
    assert ARG_SECRET not in bundle


def test_a_long_log_line_keeps_the_log_stream_fast_and_the_shim_serving(
    probed: tuple[Daemon, str],
) -> None:
    """A pod prints one line of about 1 MiB (word characters), then a token and a marker: the
    stream carries the long line whole and the token redacted, and the shim answers meanwhile."""
    from tests.process.helpers import pod, pod_spec, shell, wait_pod

    daemon, _ = probed
    ns = daemon.namespace
    script = (
        "head -c 1000000 /dev/zero | tr '\\0' a; echo; "
        f'echo "HF_TOKEN={LINE_SECRET}"; echo long-line-done; sleep 120'
    )
    body = pod(
        "long-line", pod_spec([shell("engine", script)]), labels={"sparkrun.dev/workload": "long-line"}
    )
    body["metadata"]["namespace"] = ns
    daemon.kube.create(body)
    try:
        wait_pod(daemon.kube, ns, "long-line", lambda p: (p.get("status") or {}).get("phase") == "Running")
        with _Prober(daemon.http, "/v1/health") as prober:
            text, took = "", 0.0
            deadline = time.monotonic() + 60
            while "long-line-done" not in text and time.monotonic() < deadline:
                started = time.monotonic()
                with daemon.http("reader") as client:
                    try:
                        text = client.get(
                            "/v1/streams/logs", params={"source_id": f"{ns}/long-line/engine", "tail": "5"}
                        ).text
                    except httpx.HTTPError as error:
                        text = repr(error)
                took = time.monotonic() - started
                time.sleep(0.5)
        seen = f"the stream answered after {took:.2f} s; the shim within {prober.slowest:.2f} s"
        print(seen)
        assert "long-line-done" in text, f"{seen}: {text[-300:]}"
        assert took < 15, seen
        assert prober.answers > 0
        assert prober.slowest < PROBE_BOUND, seen
        assert LINE_SECRET not in text
        assert "HF_TOKEN=[redacted]" in text
        assert "a" * 1_000_000 in text  # the long line whole
    finally:
        daemon.kube.delete("v1", "Pod", "long-line", namespace=ns)
