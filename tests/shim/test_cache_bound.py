"""The shim's job cache is bounded: a large result is not kept in memory, yet served whole.

Against the real shim on the testbed (``sparkrun-k8s shim serve``, no operator): ``SMALL`` jobs
without results, one job with a small result and ``BIG`` finished jobs whose results are
1.5 MiB each (stored gzip-compressed, as the executor stores them), all created directly on
the apiserver. The job listing is served from the cache (k8s/daemonjobs.py): it carries the small
result and leaves the large ones out; ``GET /v1/jobs/{id}`` reads a large result from the
apiserver and serves it whole. The shim's resident set size stays under its limit (512 MiB,
manifests/shim/deployment.yaml).

How much memory 10,000 jobs and 100 large results take is a measurement, not a test:
``python -m bench.shim_memory`` (docs/performance.md).
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import Daemon, start_daemon, stop_daemon
from tests.shim.harness import seeded_job, seeded_job_name

SMALL = 200
BIG = 3
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


def _result(i: int) -> list[dict[str, str]]:
    """About RESULT_BYTES of JSON that compresses like real output (hex digests, repeated keys)."""
    row = len(json.dumps({"name": "x" * 8, "digest": "0" * 64})) + 1
    return [{"name": f"item-{i}-{n}", "digest": secrets.token_hex(32)} for n in range(RESULT_BYTES // row)]


def _finish(kube: KubeApi, namespace: str, created: dict[str, Any], result: Any) -> None:
    inline, packed, _ = jobs.encode_result(result)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    created["status"] = {"state": "succeeded", "startedAt": now, "finishedAt": now}
    created["status"].update({"resultGzip": packed} if packed else {"result": inline})
    name = created["metadata"]["name"]
    kube.request("PUT", f"{API.format(ns=namespace)}/{name}/status", json=created)


def _settle(daemon: Daemon, name: str, *, seconds: float = 60) -> None:
    """Wait until the shim's listing (its cache) has the finished job ``name``."""
    deadline = time.monotonic() + seconds
    with daemon.http("admin") as client:
        while not any(
            row["id"] == name and row["state"] == "succeeded"
            for row in client.get("/v1/jobs", params={"limit": 1000}).json()
        ):
            assert time.monotonic() < deadline, f"the shim never saw {name} finished"
            time.sleep(0.2)


def test_large_results_stay_out_of_the_cache_and_are_served_whole(shim: Daemon, testbed: Testbed) -> None:
    namespace = shim.namespace
    api = API.format(ns=namespace)
    with testbed.api() as kube:
        for i in range(SMALL):
            kube.request("POST", api, json=seeded_job(namespace, i))
        _finish(
            kube, namespace, kube.request("POST", api, json=seeded_job(namespace, SMALL)).json(), {"ok": True}
        )
        results = {}
        for i in range(SMALL + 1, SMALL + 1 + BIG):
            results[seeded_job_name(i)] = _result(i)
            _finish(
                kube,
                namespace,
                kube.request("POST", api, json=seeded_job(namespace, i)).json(),
                results[seeded_job_name(i)],
            )
    _settle(shim, seeded_job_name(SMALL + BIG))
    with shim.http("admin") as client:
        listing = {row["id"]: row for row in client.get("/v1/jobs", params={"limit": 1000}).json()}
        assert len(listing) == SMALL + 1 + BIG
        assert listing[seeded_job_name(SMALL)]["result"] == {"ok": True}  # a small result is cached
        for name, result in results.items():
            assert listing[name]["state"] == "succeeded"
            assert listing[name]["result"] is None, "a large result was kept in the shim's cache"
            job = client.get(f"/v1/jobs/{name}").json()
            assert job["result"] == result
    assert _rss(shim) < LIMIT
