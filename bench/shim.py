"""Daemon API shim: query latency, job submission latency, sustained requests per second.

Side by side in one run, interleaved round by round (A B, B A, ...):

- **query**: ``POST /v1/ops/proxy.list_gateways`` (no Kubernetes call: the shim's own cost:
  TLS, authentication and authorization from the review caches, validation, routing) and
  ``POST /v1/ops/workloads.list`` with a different ``limit`` each time (defeats the daemon's
  2 s query cache: one apiserver list per request);
- **submit**: ``POST /v1/workloads/run`` (dry run, a fresh Idempotency-Key each time: one
  DaemonJob create) against the physical limit, the same DaemonJob created directly on the
  apiserver by this script (``POST .../daemonjobs``) over the same kind of keep-alive client;
- **sustained**: ``W`` concurrent clients polling ``GET /v1/jobs/{id}`` (what clients do most)
  for ``S`` seconds; every non-200 answer counts as an error.

The shim runs as ``sparkrun-k8s shim serve`` (TLS) on a fresh testbed, without the operator
(jobs stay queued: only the API is measured). The load generator shares the CPUs with the
shim, the apiserver and etcd.

Run: ``python -m bench.shim [--rounds 200] [--workers 16] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import _common
from bench._operator import client as apiserver_client
from bench._operator import start_testbed
from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import KubeApi
from tests.shim.harness import DaemonEnv, ShimRunner


def _stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": _common.median(ms), "p99_ms": _common.pct(ms, 0.99), "min_ms": min(ms)}


async def _timed(send: Any) -> float:
    start = time.perf_counter()
    await send()
    return time.perf_counter() - start


async def run(rounds: int, workers: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-shim-") as tmp:
        workdir = Path(tmp)
        testbed = start_testbed(workdir, nodes=2)
        try:
            with KubeApi.from_kubeconfig(testbed.kubeconfig) as kube:
                env = DaemonEnv(kube, "bench-shim").setup()
                # NB: without the executor every submitted job stays queued: lift the job quota.
                runner = ShimRunner(
                    testbed,
                    env.namespace,
                    workdir,
                    executor=False,
                    extra_shim_args=("--max-active-jobs", "1000000"),
                ).start()
                try:
                    return await _measure(runner, env, testbed.kubeconfig, rounds, workers, seconds)
                finally:
                    runner.stop()
        finally:
            testbed.stop()


async def _measure(
    runner: ShimRunner, env: DaemonEnv, kubeconfig: Path, rounds: int, workers: int, seconds: float
) -> dict[str, Any]:
    tls = ssl.create_default_context(cafile=runner.ca_file)
    auth = {"Authorization": "Bearer " + env.tokens["admin"]}
    limits = httpx.Limits(max_connections=workers + 4, max_keepalive_connections=workers + 4)
    shim = httpx.AsyncClient(base_url=runner.url, verify=tls, headers=auth, timeout=30, limits=limits)
    api = apiserver_client(kubeconfig)
    namespace = env.namespace
    results: dict[str, Any] = {}
    try:

        async def ok(response: httpx.Response, status: int) -> None:
            if response.status_code != status:
                raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:300]}")

        async def gateways() -> None:
            await ok(await shim.post("/v1/ops/proxy.list_gateways", json={}), 200)

        counter = iter(range(1, 10**9))

        async def workloads_list() -> None:
            await ok(await shim.post("/v1/ops/workloads.list", json={"limit": next(counter)}), 200)

        async def submit() -> None:
            headers = {"Idempotency-Key": uuid.uuid4().hex}
            body = {"recipe": "bench", "dry_run": True}
            await ok(await shim.post("/v1/workloads/run", json=body, headers=headers), 202)

        async def create_directly() -> None:
            key = uuid.uuid4().hex
            obj = jobs.new_job(
                name=jobs.job_name("bench", key),
                namespace=namespace,
                operation="workloads.run",
                version=1,
                arguments={"recipe": "bench", "dry_run": True},
                username="bench",
                uid=None,
                groups=[],
                manager="daemon",
                client=None,
                key=key,
                digest=jobs.request_digest(
                    "workloads.run", 1, {"recipe": "bench", "dry_run": True}, "daemon"
                ),
            )
            path = f"/apis/sparkrun.dev/v1alpha1/namespaces/{namespace}/daemonjobs"
            await ok(
                await api.post(path, content=json.dumps(obj), headers={"Content-Type": "application/json"}),
                201,
            )

        for warm in (gateways, workloads_list, submit, create_directly):
            for _ in range(5):
                await warm()
        samples: dict[str, list[float]] = {
            "gateways": [],
            "workloads_list": [],
            "submit": [],
            "apiserver_create": [],
        }
        pairs = [
            (("gateways", gateways), ("workloads_list", workloads_list)),
            (("submit", submit), ("apiserver_create", create_directly)),
        ]
        for index in range(rounds):
            for first, second in pairs:
                order = (first, second) if index % 2 == 0 else (second, first)
                for name, send in order:
                    samples[name].append(await _timed(send))
        for name, values in samples.items():
            results[name] = _stats(values)
        results["submit_vs_apiserver_create_p50"] = (
            results["submit"]["p50_ms"] / results["apiserver_create"]["p50_ms"]
        )

        submitted = (await shim.post("/v1/workloads/run", json={"recipe": "bench", "dry_run": True})).json()[
            "job_id"
        ]
        request = (
            f"GET /v1/jobs/{submitted} HTTP/1.1\r\nhost: 127.0.0.1:{runner.port}\r\n"
            f"authorization: {auth['Authorization']}\r\n\r\n"
        ).encode()
        errors = 0
        latencies: list[float] = []
        cpu_before = _proc_cpu(runner)
        deadline = time.perf_counter() + seconds

        async def poll() -> None:
            # A raw keep-alive HTTP/1.1 client over TLS: far cheaper than httpx, so the load
            # generator (on the same cores) takes less CPU from the shim.
            nonlocal errors
            reader, writer = await asyncio.open_connection("127.0.0.1", runner.port, ssl=tls)
            try:
                while time.perf_counter() < deadline:
                    start = time.perf_counter()
                    writer.write(request)
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                    await reader.readexactly(length)
                    if head[9:12] != b"200":
                        errors += 1
                    latencies.append(time.perf_counter() - start)
            finally:
                writer.close()

        started = time.perf_counter()
        await asyncio.gather(*(poll() for _ in range(workers)))
        elapsed = time.perf_counter() - started
        results["sustained"] = {
            "workers": workers,
            "seconds": elapsed,
            "requests": len(latencies),
            "errors": errors,
            "requests_per_second": len(latencies) / elapsed,
            "p50_ms": _common.median([v * 1000 for v in latencies]),
            "p99_ms": _common.pct([v * 1000 for v in latencies], 0.99),
            "shim_cpu_ms_per_request": (_proc_cpu(runner) - cpu_before) * 1000 / max(len(latencies), 1),
        }
        results["shim_cpu_seconds"] = _proc_cpu(runner)
    finally:
        await shim.aclose()
        await api.aclose()
    return results


def _proc_cpu(runner: ShimRunner) -> float:
    proc = runner.shim.proc
    if proc is None:
        return float("nan")
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    results = asyncio.run(run(args.rounds, args.workers, args.seconds))
    print(f"{'what':<34} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'min ms':>8}")
    labels = {
        "gateways": "query proxy.list_gateways",
        "workloads_list": "query workloads.list (uncached)",
        "submit": "submit workloads.run (202)",
        "apiserver_create": "apiserver DaemonJob create (limit)",
    }
    for key, label in labels.items():
        row = results[key]
        print(f"{label:<34} {row['n']:>6} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['min_ms']:>8.2f}")
    print(f"submission p50 / apiserver create p50 = {results['submit_vs_apiserver_create_p50']:.2f}x")
    sustained = results["sustained"]
    print(
        f"sustained GET /v1/jobs/{{id}}: {sustained['workers']} workers, {sustained['requests']} requests in "
        f"{sustained['seconds']:.1f} s = {sustained['requests_per_second']:.0f} req/s, "
        f"{sustained['errors']} errors, "
        f"p50 {sustained['p50_ms']:.1f} ms, p99 {sustained['p99_ms']:.1f} ms, "
        f"shim CPU {sustained['shim_cpu_ms_per_request']:.2f} ms/request"
    )
    payload = {
        "benchmark": "shim",
        "inputs": {"rounds": args.rounds, "workers": args.workers, "seconds": args.seconds},
        "environment": _common.environment(("starlette", "kubernetes_asyncio")),
        "results": results,
    }
    print("wrote", _common.write_json("shim", payload))


if __name__ == "__main__":
    main()
