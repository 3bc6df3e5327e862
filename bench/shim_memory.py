"""Daemon API shim: resident memory with many DaemonJobs and large results.

The measurement that used to run as a test (``tests/shim/test_memory.py`` now checks the
bounded-cache behaviour at a small scale). On a fresh testbed, ``sparkrun-k8s shim serve``
(plaintext, without the operator: only the shim's cache is measured) watches one namespace in
which this script creates, directly on the apiserver:

1. ``--jobs`` DaemonJobs (default 10,000) without results, then
2. ``--big`` finished jobs (default 100) whose results are ``--result-mib`` MiB of JSON each
   (stored gzip-compressed, as the executor stores them),

and reads the shim's resident set size (``VmRSS``) after each step, once its cache holds the
last job, and again after reading one large result and a 1000-job listing. Side by side in the
same run: the bytes the same objects take as the apiserver serves them (one paged list of the
namespace, JSON), i.e. the least an unbounded cache would hold. The shim's limit is 512 MiB
(``manifests/shim/deployment.yaml``); the run fails (exit 1) when the last RSS reaches it.

Run: ``python -m bench.shim_memory [--jobs 10000 --big 100 --result-mib 1.5]``; JSON to
``bench/results/``. The load generator (8 threads of plain HTTP) shares the CPUs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench import _common
from bench._operator import start_testbed
from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.harness import DaemonEnv, ShimRunner, seeded_job, seeded_job_name

LIMIT = 512 * 1024 * 1024
API = "/apis/sparkrun.dev/v1alpha1/namespaces/{ns}/daemonjobs"
MiB = 2**20


def _result(i: int, size: int) -> list[dict[str, str]]:
    """About ``size`` bytes of JSON that compresses like real output (hex digests, repeated keys)."""
    row = len(json.dumps({"name": "x" * 8, "digest": "0" * 64})) + 1
    return [{"name": f"item-{i}-{n}", "digest": secrets.token_hex(32)} for n in range(size // row)]


def _create(kube: KubeApi, namespace: str, indexes: range, result_bytes: int) -> None:
    for i in indexes:
        created = kube.request("POST", API.format(ns=namespace), json=seeded_job(namespace, i)).json()
        if not result_bytes:
            continue
        _, packed, _ = jobs.encode_result(_result(i, result_bytes))
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        created["status"] = {"state": "succeeded", "resultGzip": packed, "startedAt": now, "finishedAt": now}
        name = created["metadata"]["name"]
        kube.request("PUT", f"{API.format(ns=namespace)}/{name}/status", json=created)


def _fill(testbed: Testbed, namespace: str, start: int, count: int, result_bytes: int, threads: int) -> None:
    step = (count + threads - 1) // threads

    def chunk(t: int) -> None:
        with testbed.api() as kube:
            _create(
                kube,
                namespace,
                range(start + t * step, min(start + count, start + (t + 1) * step)),
                result_bytes,
            )

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(chunk, t) for t in range(threads)]:
            future.result()


def _rss(runner: ShimRunner) -> float:
    proc = runner.shim.proc
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MiB
    raise RuntimeError("no VmRSS")


def _settle(client: httpx.Client, name: str, seconds: float = 120) -> None:
    """Until the shim's cache has job ``name``, then a moment for the rest of the watch."""
    deadline = time.monotonic() + seconds
    while client.get(f"/v1/jobs/{name}").status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the shim never saw {name}")
        time.sleep(0.5)
    time.sleep(3)


def _apiserver_mib(kube: KubeApi, namespace: str) -> float:
    """Bytes of every DaemonJob of ``namespace`` as the apiserver lists them (JSON, paged)."""
    total, token = 0, ""
    while True:
        params = {"limit": "500", **({"continue": token} if token else {})}
        page = kube.request("GET", API.format(ns=namespace), params=params)
        total += len(page.content)
        token = page.json()["metadata"].get("continue") or ""
        if not token:
            return total / MiB


def _measure(
    testbed: Testbed, kube: KubeApi, env: DaemonEnv, runner: ShimRunner, args: argparse.Namespace
) -> dict[str, Any]:
    ns = env.namespace
    result_bytes = int(args.result_mib * MiB)
    out: dict[str, Any] = {"rss_start_mib": _rss(runner)}
    with httpx.Client(
        base_url=runner.url, headers={"Authorization": "Bearer " + env.tokens["admin"]}, timeout=60
    ) as client:
        started = time.monotonic()
        _fill(testbed, ns, 0, args.jobs, 0, threads=8)
        out["create_seconds"] = time.monotonic() - started
        _settle(client, seeded_job_name(args.jobs - 1))
        out["rss_jobs_mib"] = _rss(runner)
        out["apiserver_jobs_mib"] = _apiserver_mib(kube, ns)
        _fill(testbed, ns, args.jobs, args.big, result_bytes, threads=4)
        last = seeded_job_name(args.jobs + args.big - 1)
        _settle(client, last)
        out["rss_results_mib"] = _rss(runner)
        out["apiserver_all_mib"] = _apiserver_mib(kube, ns)
        job = client.get(f"/v1/jobs/{last}").json()
        if (
            job["state"] != "succeeded"
            or len(json.dumps(job["result"], separators=(",", ":"))) < result_bytes * 0.95
        ):
            raise RuntimeError(f"the large result of {last} was not served whole")
        if client.get("/v1/jobs", params={"limit": 1000}).status_code != 200:
            raise RuntimeError("the 1000-job listing failed")
        out["rss_after_reads_mib"] = _rss(runner)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-shim-memory-") as tmp:
        workdir = Path(tmp)
        testbed = start_testbed(workdir, nodes=1)
        try:
            with KubeApi.from_kubeconfig(testbed.kubeconfig) as kube:
                env = DaemonEnv(kube, "bench-shim-memory").setup()
                runner = ShimRunner(testbed, env.namespace, workdir, executor=False, plaintext=True).start()
                try:
                    return _measure(testbed, kube, env, runner, args)
                finally:
                    runner.stop()
        finally:
            testbed.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=100)
    parser.add_argument("--result-mib", type=float, default=1.5)
    args = parser.parse_args()
    results = run(args)
    rows = [
        ("start", results["rss_start_mib"], None),
        (f"{args.jobs} jobs", results["rss_jobs_mib"], results["apiserver_jobs_mib"]),
        (
            f"+ {args.big} results of {args.result_mib} MiB",
            results["rss_results_mib"],
            results["apiserver_all_mib"],
        ),
        ("after reads", results["rss_after_reads_mib"], None),
    ]
    print(f"{'after':<34} {'shim RSS MiB':>13} {'apiserver JSON MiB':>19}")
    for label, rss, listed in rows:
        print(f"{label:<34} {rss:>13.1f} {'' if listed is None else f'{listed:.1f}':>19}")
    print(f"created {args.jobs} jobs in {results['create_seconds']:.1f} s; limit {LIMIT // MiB} MiB")
    payload = {
        "benchmark": "shim_memory",
        "inputs": vars(args),
        "environment": _common.environment(("starlette", "kubernetes_asyncio")),
        "results": results,
    }
    print("wrote", _common.write_json("shim_memory", payload))
    if results["rss_after_reads_mib"] * MiB >= LIMIT:
        sys.exit(f"the shim's RSS reached its limit of {LIMIT // MiB} MiB")


if __name__ == "__main__":
    main()
