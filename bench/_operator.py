"""Helpers of the operator benchmarks: a testbed, the operator process, an async API client,
watches that timestamp events, the apiserver's request counters and the operator's metrics."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import Observation, plan
from sparkrun_operator.render import keys
from sparkrun_testbed import binaries, plane
from sparkrun_testbed.topology import NodePool, Topology

REPO = Path(__file__).resolve().parent.parent
API = "sparkrun.dev/v1alpha1"
WORKLOADS = "/apis/sparkrun.dev/v1alpha1/namespaces/{ns}/inferenceworkloads"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
SERVICES = "/api/v1/namespaces/{ns}/services"


def start_testbed(workdir: Path, *, nodes: int, gpus: int = 8, pod_cidr: str | None = None) -> plane.Testbed:
    """A fresh testbed with ``nodes`` KWOK GPU nodes and the project's CRDs; KWOK gives pods
    addresses of ``pod_cidr`` (the testbed's default when ``None``)."""
    bins = binaries.locate(REPO).check()
    options = plane.Options(
        topology=Topology(pools=(NodePool(count=nodes, gpus=gpus),)),
        crd_dirs=(REPO / "crds",),
        timeout=600.0,
    )
    if pod_cidr:
        options = dataclasses.replace(options, pod_cidr=pod_cidr)
    return plane.Testbed.start(workdir / "testbed", bins, options)


class Operator:
    """``sparkrun-k8s operator run`` as a child process (standalone, all namespaces)."""

    def __init__(self, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.log = log
        self._out = log.open("wb")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkrun_operator.cli.main", "operator", "run", "--standalone", *extra],
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


def client(kubeconfig: Path, *, limits: int = 64) -> httpx.AsyncClient:
    """An async client for the testbed's token kubeconfig."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return httpx.AsyncClient(
        base_url=cluster["server"],
        verify=tls,
        headers={"Authorization": f"Bearer {user['token']}", "Accept": "application/json"},
        timeout=60,
        limits=httpx.Limits(max_connections=limits, max_keepalive_connections=limits),
    )


async def call(http: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    response = await http.request(method, path, **kwargs)
    if response.status_code >= 300:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
    body: dict[str, Any] = response.json() if response.content else {}
    return body


async def apply(http: httpx.AsyncClient, path: str, doc: dict[str, Any], manager: str) -> dict[str, Any]:
    return await call(
        http,
        "PATCH",
        path,
        params={"fieldManager": manager, "force": "true"},
        content=json.dumps(doc),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )


async def watch(
    http: httpx.AsyncClient, path: str, on_event: Callable[[str, dict[str, Any], float], None]
) -> None:
    """Stream watch events of ``path`` to ``on_event(type, object, perf_counter_time)`` forever."""
    version = (await call(http, "GET", path, params={"limit": 1}))["metadata"]["resourceVersion"]
    while True:
        params = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        async with http.stream("GET", path, params=params, timeout=None) as response:
            async for line in response.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event["type"], obj, time.perf_counter())


@contextlib.asynccontextmanager
async def watching(
    http: httpx.AsyncClient, paths: list[str], on_event: Callable[[str, dict[str, Any], float], None]
) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(watch(http, path, on_event)) for path in paths]
    await asyncio.sleep(0.5)  # the watches are established
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task


_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.M)


async def write_counts(http: httpx.AsyncClient) -> dict[tuple[str, str, str], float]:
    """apiserver_request_total of write verbs, by (resource, subresource, verb)."""
    text = (await http.get("/metrics")).text
    counts: dict[tuple[str, str, str], float] = {}
    for labels, value in _SAMPLE.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("verb") not in ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE"):
            continue
        key = (fields.get("resource", ""), fields.get("subresource", ""), fields["verb"])
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def diff_counts(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]
) -> dict[tuple[str, str, str], float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def workload(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}
    body.update(spec)
    return {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


async def direct_calls(http: httpx.AsyncClient, name: str, namespace: str) -> None:
    """What the operator does for a new workload, done by this process: create the workload, add
    kopf's finalizer, apply the Service and JobSet the planner renders, write the status."""
    created = await call(http, "POST", WORKLOADS.format(ns=namespace), json=workload(name, namespace))
    path = f"{WORKLOADS.format(ns=namespace)}/{name}"
    await call(
        http,
        "PATCH",
        path,
        json={"metadata": {"finalizers": [f"{keys.KOPF_PREFIX}/finalizer"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    meta = created["metadata"]
    decided = plan(
        Observation(
            name=name,
            namespace=namespace,
            uid=meta["uid"],
            generation=meta["generation"],
            spec=InferenceWorkloadSpec.model_validate(created["spec"]),
            status=InferenceWorkloadStatus(),
            now=dt.datetime.now(dt.UTC).replace(microsecond=0),
        )
    )

    def child_path(doc: dict[str, Any]) -> str:
        collection = JOBSETS if doc["kind"] == "JobSet" else SERVICES
        return f"{collection.format(ns=namespace)}/{doc['metadata']['name']}"

    await asyncio.gather(*(apply(http, child_path(doc), doc, "bench-direct") for doc in decided.apply))
    await call(
        http,
        "PATCH",
        f"{path}/status",
        json={"status": decided.status.model_dump(by_alias=True, exclude_none=True, mode="json")},
        headers={"Content-Type": "application/merge-patch+json"},
    )


async def operator_passes(port: int) -> dict[str, float]:
    """Count and mean duration of the operator's InferenceWorkload passes, from its /metrics."""
    async with httpx.AsyncClient() as local:
        text = (await local.get(f"http://127.0.0.1:{port}/metrics", timeout=10)).text
    values = {}
    for name in ("count", "sum"):
        pattern = rf'^sparkrun_operator_reconcile_seconds_{name}{{kind="InferenceWorkload"}} (\S+)$'
        match = re.search(pattern, text, re.M)
        values[name] = float(match.group(1)) if match else float("nan")
    return {"passes": values["count"], "mean_s": values["sum"] / values["count"] if values["count"] else 0.0}


def _histogram(text: str, name: str, **labels: str) -> dict[str, float]:
    """Count, mean and an upper bound of the p50/p99 (bucket edges) of one histogram series."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or not all(part in line for part in want):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith(f"{name}_bucket"):
            edge = re.search(r'le="([^"]+)"', line)
            if edge:
                buckets.append((float(edge.group(1)), value))
        elif line.startswith(f"{name}_sum"):
            total = value
        elif line.startswith(f"{name}_count"):
            count = value
    buckets.sort()

    def quantile(q: float) -> float:
        return next((edge for edge, seen in buckets if seen >= q * count), float("nan"))

    return {
        "n": count,
        "mean": total / count if count else float("nan"),
        "p50_le": quantile(0.5),
        "p99_le": quantile(0.99),
    }


async def operator_lanes(port: int) -> dict[str, Any]:
    """Where a status write's time went inside the operator: the status lane's queueing and
    writes (by urgency), its pass counts, and the event loop's lag (CPU saturation)."""
    async with httpx.AsyncClient() as local:
        text = (await local.get(f"http://127.0.0.1:{port}/metrics", timeout=10)).text
    out: dict[str, Any] = {"loop_lag_s": _histogram(text, "sparkrun_operator_loop_lag_seconds")}
    for generation in ("0", "1", "2"):
        out[f"gc_pause_gen{generation}_s"] = _histogram(
            text, "sparkrun_operator_gc_pause_seconds", generation=generation
        )
    for stage in ("queued", "write", "poked"):
        for urgent in ("true", "false"):
            out[f"status_{stage}_urgent_{urgent}_s"] = _histogram(
                text, "sparkrun_operator_status_lane_seconds", stage=stage, urgent=urgent
            )
    for wrote in ("true", "false"):
        match = re.search(
            rf'^sparkrun_operator_status_passes_total{{kind="InferenceWorkload",wrote="{wrote}"}} (\S+)$',
            text,
            re.M,
        )
        out[f"status_passes_wrote_{wrote}"] = float(match.group(1)) if match else 0.0
    return out


async def throttled(http: httpx.AsyncClient) -> float:
    """Requests the apiserver answered 429 (Too Many Requests) so far, all clients."""
    text = (await http.get("/metrics")).text
    return sum(
        float(value)
        for labels, value in re.findall(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.M)
        if 'code="429"' in labels
    )
