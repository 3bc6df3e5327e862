"""The shim's memory stays under its limit (512 MiB, manifests/shim/deployment.yaml) with many jobs.

Against the real shim on the testbed: ``JOBS`` DaemonJobs (default 10,000; set
``SPARKRUN_MEMORY_JOBS`` to change it) created directly on the apiserver, then ``BIG`` finished
jobs whose results are 1.5 MiB each (stored gzip-compressed, as the executor stores them). The
shim's resident set size is read from ``/proc`` after its cache has caught up; the figures are
printed. A large result is not kept in the shim's cache (k8s/daemonjobs.py) but is still served
whole by ``GET /v1/jobs/{id}``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

JOBS = int(os.environ.get("SPARKRUN_MEMORY_JOBS", "10000"))
BIG = 100
RESULT_BYTES = 3 * 1024 * 1024 // 2
LIMIT = 512 * 1024 * 1024
API = "/apis/sparkrun.dev/v1alpha1/namespaces/{ns}/daemonjobs"


@pytest.fixture(scope="module")
def shim(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    running = start_daemon(testbed, kube, tmp_path_factory.mktemp("memory"), executor=False, plaintext=True)
    yield running
    stop_daemon(running)


def _rss(daemon: Daemon) -> int:
    proc = daemon.runner.shim.proc
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _job(namespace: str, i: int) -> dict[str, Any]:
    return jobs.new_job(
        name=jobs.job_name("memory", f"job-{i}"),
        namespace=namespace,
        operation="workloads.run",
        version=1,
        arguments={"recipe": "example", "dry_run": True},
        username=f"system:serviceaccount:{namespace}:operator",
        uid=None,
        groups=[],
        manager="daemon",
        client=None,
        key=f"job-{i}",
        digest="0" * 64,
    )


def _result(i: int) -> list[dict[str, str]]:
    """About RESULT_BYTES of JSON that compresses like real output (hex digests, repeated keys)."""
    row = len(json.dumps({"name": "x" * 8, "digest": "0" * 64})) + 1
    return [{"name": f"item-{i}-{n}", "digest": secrets.token_hex(32)} for n in range(RESULT_BYTES // row)]


def _create(kube: KubeApi, namespace: str, indexes: range, *, big: bool) -> None:
    for i in indexes:
        created = kube.request("POST", API.format(ns=namespace), json=_job(namespace, i)).json()
        if not big:
            continue
        _, packed, size = jobs.encode_result(_result(i))
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        created["status"] = {"state": "succeeded", "resultGzip": packed, "startedAt": now, "finishedAt": now}
        assert size >= RESULT_BYTES * 0.95
        name = created["metadata"]["name"]
        kube.request("PUT", f"{API.format(ns=namespace)}/{name}/status", json=created)


def _fill(testbed: Testbed, namespace: str, start: int, count: int, *, big: bool, threads: int = 8) -> None:
    step = (count + threads - 1) // threads
    with ThreadPoolExecutor(threads) as pool:
        futures = []
        for t in range(threads):
            chunk = range(start + t * step, min(start + count, start + (t + 1) * step))
            futures.append(pool.submit(_with_kube, testbed, namespace, chunk, big))
        for future in futures:
            future.result()


def _with_kube(testbed: Testbed, namespace: str, chunk: range, big: bool) -> None:
    with testbed.api() as kube:
        _create(kube, namespace, chunk, big=big)


def _settle(daemon: Daemon, name: str, *, seconds: float = 60) -> None:
    """Wait until the shim's cache has the job ``name``, then a moment for the rest of the watch."""
    deadline = time.monotonic() + seconds
    with daemon.http("admin") as client:
        while client.get(f"/v1/jobs/{name}").status_code != 200:
            assert time.monotonic() < deadline, f"the shim never saw {name}"
            time.sleep(0.5)
    time.sleep(3)


@pytest.mark.timeout(1200)
def test_memory_with_ten_thousand_jobs_and_large_results(shim: Daemon, testbed: Testbed) -> None:
    figures: dict[str, Any] = {"jobs": JOBS, "big_results": BIG, "result_bytes": RESULT_BYTES}
    figures["rss_start_mib"] = round(_rss(shim) / 2**20, 1)
    started = time.monotonic()
    _fill(testbed, shim.namespace, 0, JOBS, big=False)
    figures["create_seconds"] = round(time.monotonic() - started, 1)
    _settle(shim, jobs.job_name("memory", f"job-{JOBS - 1}"))
    figures["rss_jobs_mib"] = round(_rss(shim) / 2**20, 1)
    print("memory figures (jobs):", json.dumps(figures), flush=True)
    _fill(testbed, shim.namespace, JOBS, BIG, big=True, threads=4)
    last = jobs.job_name("memory", f"job-{JOBS + BIG - 1}")
    _settle(shim, last)
    figures["rss_results_mib"] = round(_rss(shim) / 2**20, 1)
    with shim.http("admin") as client:
        job = client.get(f"/v1/jobs/{last}").json()
        assert job["state"] == "succeeded"
        assert len(json.dumps(job["result"], separators=(",", ":"))) >= RESULT_BYTES * 0.95
        listing = client.get("/v1/jobs", params={"limit": 1000})
        assert listing.status_code == 200
    figures["rss_after_reads_mib"] = round(_rss(shim) / 2**20, 1)
    print("memory figures:", json.dumps(figures))
    assert _rss(shim) < LIMIT, figures
