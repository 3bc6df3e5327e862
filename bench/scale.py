"""Scale: N InferenceWorkloads applied at once on M simulated GPU nodes.

Measured on a fresh testbed (M KWOK nodes with 8 GPUs each; pods are scheduled by the real
scheduler and marked Running/Ready by KWOK):

- time to converge: from the first create until every workload reports ``Ready=True`` with one
  ready replica (seen through a watch), compared with N x the single-object cost (one workload
  created alone on the same testbed beforehand, create -> Ready);
- operator RSS (peak, sampled every second) and CPU seconds;
- API writes per object while converging, from the apiserver's ``apiserver_request_total``
  by resource (the operator is the only writer of InferenceWorkloads after their creation, of
  their status, of Services and of JobSet specs; JobSet status is the JobSet controller's);
- writes while idle: the same counters over ``--idle-seconds`` after convergence;
- with ``--probe``, the floor of the readiness lag: on each leader pod Ready this process
  creates a ConfigMap and times seeing it through its watch (one write and one watch event,
  under the same load: what the operator's own readiness write cannot beat).

- with ``--autoscaling``, every workload has ``spec.autoscaling`` (Operator mode, 1-2 replicas,
  4 waiting requests per replica, a scrape every 15 s), and the operator's scrapes of every
  leader's ``/metrics`` are answered on this machine (``bench/_scrapes.py``: the testbed's pods
  get addresses of a CIDR routed to loopback, one process answers them in vLLM's layout and
  counts the scrapes per second); ``--compare`` runs without, then with it, each on a fresh
  testbed, and prints the two side by side.
- with ``--inference-pools`` (issue 30), the chart's vendored InferencePool CRD is installed
  before the operator starts and the operator runs with ``--inference-pools auto``: every
  workload gets a pool and a managed endpoint picker (``bench/_pools.py``); the run also counts
  the objects made, the pickers Ready, the workloads' ``PoolAccepted`` reasons, the apiserver's
  watch events by resource and the bytes the operator read. ``--compare-pools`` runs without
  (``--inference-pools off``, no CRD), then with, each on a fresh testbed, side by side.

Run: ``python -m bench.scale [--workloads 1000 --nodes 250] [--autoscaling | --compare]
[--inference-pools | --compare-pools]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import _common, _pools
from bench._operator import (
    JOBSETS,
    WORKLOADS,
    Operator,
    call,
    client,
    diff_counts,
    direct_calls,
    operator_lanes,
    operator_passes,
    start_testbed,
    throttled,
    watching,
    workload,
    write_counts,
)
from bench._scrapes import AUTOSCALING, POD_CIDR, ScrapeTargets, local_route, summary

OPERATOR_RESOURCES = (
    "inferenceworkloads",
    "services",
    "jobsets",
    "controllerrevisions",
    *_pools.POOL_RESOURCES,
)
#: ``--probe``: the workload a probe object stands for.
PROBE_LABEL = "bench.sparkrun.dev/probe-for"
#: ``--probe``'s custom resource: written and watched through the apiserver's custom-resource
#: path, as an InferenceWorkload's status is (a ConfigMap takes the built-in one).
PROBE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "scaleprobes.bench.sparkrun.dev"},
    "spec": {
        "group": "bench.sparkrun.dev",
        "scope": "Namespaced",
        "names": {"plural": "scaleprobes", "singular": "scaleprobe", "kind": "ScaleProbe"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
PROBES = "/apis/bench.sparkrun.dev/v1/namespaces/{ns}/scaleprobes"


class Readiness:
    """Which workloads are Ready (from a watch), and when the last one became so; when each
    workload's JobSet first appeared (the operator's own part of the work)."""

    def __init__(self, on_pod_ready: Callable[[str], None] | None = None) -> None:
        self.ready: dict[str, float] = {}
        self.jobsets: dict[str, float] = {}
        self.pods_ready: dict[str, float] = {}
        self.probes: dict[str, float] = {}
        self.cr_probes: dict[str, float] = {}
        #: the newest InferenceWorkload seen, by name (a CR probe carries a copy: same size)
        self.workloads: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Event()
        self.on_pod_ready = on_pod_ready

    def __call__(self, kind: str, obj: dict[str, Any], when: float) -> None:
        if obj.get("kind") in ("ConfigMap", "ScaleProbe"):
            owner = obj["metadata"].get("labels", {}).get(PROBE_LABEL)
            seen = self.probes if obj["kind"] == "ConfigMap" else self.cr_probes
            if owner and owner not in seen:
                seen[owner] = when
            return
        if obj.get("kind") == "Pod":
            owner = obj["metadata"].get("labels", {}).get("sparkrun.dev/workload")
            conditions = (obj.get("status") or {}).get("conditions") or []
            if (
                owner
                and owner not in self.pods_ready
                and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            ):
                self.pods_ready[owner] = when
                self.changed.set()
                if self.on_pod_ready is not None:
                    self.on_pod_ready(owner)
            return
        if obj.get("kind") == "JobSet":
            owner = obj["metadata"].get("labels", {}).get("sparkrun.dev/workload")
            if owner and owner not in self.jobsets:
                self.jobsets[owner] = when
            return
        status = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        name = obj["metadata"]["name"]
        self.workloads[name] = obj
        if ready and status.get("readyReplicas", 0) >= 1 and name not in self.ready:
            self.ready[name] = when
            self.changed.set()

    async def wait_pods(self, count: int, patience: float) -> bool:
        return await self.wait(count, patience, of=self.pods_ready)

    async def wait(self, count: int, patience: float, *, of: dict[str, float] | None = None) -> bool:
        seen = self.ready if of is None else of
        deadline = time.perf_counter() + patience
        while len(seen) < count:
            self.changed.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                return False
        return True

    def after_pod_ready(self, seen: dict[str, float]) -> list[float]:
        """Seconds from each workload's leader pod Ready to its moment in ``seen`` (the burst's
        workloads only, not the single one measured before)."""
        return [
            when - self.pods_ready[name]
            for name, when in seen.items()
            if name in self.pods_ready and name != "single"
        ]


def _lags(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": _common.median(values) if values else float("nan"),
        "p99": _common.pct(values, 0.99) if values else float("nan"),
        "max": max(values) if values else float("nan"),
    }


async def sample_rss(operator: Operator, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], operator.rss_bytes())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def sample_lag(lags: list[float], stop: asyncio.Event, period: float = 0.1) -> None:
    """This process's own event loop lag (it stamps the watch events the lag is measured
    from: a late loop here is measurement error, reported beside the result)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(period)
        lags.append(max(0.0, loop.time() - start - period))


def per_object(counts: dict[tuple[str, str, str], float], n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for (resource, sub, verb), value in sorted(counts.items()):
        out[f"{resource}{'/' + sub if sub else ''} {verb}"] = value / n
    return out


async def run(
    args: argparse.Namespace,
    workdir: Path,
    *,
    autoscaling: bool = False,
    pools: bool = False,
    targets: ScrapeTargets | None = None,
) -> dict[str, Any]:
    """One run; with ``autoscaling``, every workload has :data:`AUTOSCALING`; with ``pools``, the
    InferencePool CRD is served and the operator keeps a pool and picker per workload; with
    ``targets``, the testbed's pods get addresses of :data:`POD_CIDR`, where ``targets`` answers
    the scrapes."""
    t0 = time.perf_counter()
    tb = start_testbed(workdir, nodes=args.nodes, pod_cidr=POD_CIDR if targets else None)
    if pools:
        await asyncio.to_thread(tb.apply_crds, [_pools.crd()])
    spec = {"autoscaling": AUTOSCALING} if autoscaling else {}
    testbed_up = time.perf_counter() - t0
    print(f"testbed with {args.nodes} nodes up in {testbed_up:.1f} s", flush=True)
    operator: Operator | None = None
    result: dict[str, Any] = {"testbed_up_s": testbed_up}
    try:
        async with client(tb.kubeconfig, limits=64) as http:
            await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": "scale"}})
            metrics_port = _common.free_port()
            operator = Operator(
                tb.kubeconfig,
                workdir / "operator.log",
                "--metrics-port",
                str(metrics_port),
                "--metrics-host",
                "127.0.0.1",
                *_pools.operator_flags(pools),
                *args.operator_args,
            )
            path = WORKLOADS.format(ns="scale")
            pods = "/api/v1/namespaces/scale/pods"
            configmaps = "/api/v1/namespaces/scale/configmaps"
            scaleprobes = PROBES.format(ns="scale")
            probes: set[asyncio.Task[Any]] = set()
            if args.probe:
                await asyncio.to_thread(tb.apply_crds, [PROBE_CRD])

            def probe(owner: str) -> None:
                # NB: the floor of the operator's part: one write of our own, seen through a
                # watch; a ConfigMap (built-in) and a custom resource the size of the workload
                meta = {"name": f"probe-{owner}", "labels": {PROBE_LABEL: owner}}
                seen = readiness.workloads.get(owner) or {}
                cr = {
                    "apiVersion": "bench.sparkrun.dev/v1",
                    "kind": "ScaleProbe",
                    "metadata": meta,
                    "copy": {"spec": seen.get("spec"), "status": seen.get("status")},
                }
                for target, body in ((configmaps, {"metadata": meta}), (scaleprobes, cr)):
                    task = asyncio.create_task(call(http, "POST", target, json=body))
                    probes.add(task)
                    task.add_done_callback(probes.discard)

            readiness = Readiness(probe if args.probe else None)
            watched = [path, JOBSETS.format(ns="scale"), pods] + (
                [configmaps, scaleprobes] if args.probe else []
            )
            async with watching(http, watched, readiness):
                # the single-object cost, on the same testbed, operator warm
                start = time.perf_counter()
                await call(http, "POST", path, json=workload("single", "scale", **spec))
                assert await readiness.wait(1, 120), "the single workload never became Ready"
                single = readiness.ready["single"] - start
                print(f"single workload create -> Ready: {single:.2f} s", flush=True)
                await asyncio.sleep(5)

                before = await write_counts(http)
                watch_before = _pools.watch_events((await http.get("/metrics")).text)
                read_before = _pools.read_bytes(operator.proc.pid)
                throttled_before = await throttled(http)
                cpu_before = operator.cpu_seconds()
                peak = [operator.rss_bytes()]
                stop = asyncio.Event()
                sampler = asyncio.create_task(sample_rss(operator, peak, stop))
                own_lags: list[float] = []
                lag_sampler = asyncio.create_task(sample_lag(own_lags, stop))
                gate = asyncio.Semaphore(32)

                async def create(i: int) -> None:
                    async with gate:
                        await call(http, "POST", path, json=workload(f"w{i:04d}", "scale", **spec))

                start, wall_start = time.perf_counter(), time.time()
                await asyncio.gather(*(create(i) for i in range(args.workloads)))
                created = time.perf_counter() - start
                print(f"{args.workloads} workloads created in {created:.1f} s", flush=True)
                converged = await readiness.wait(args.workloads + 1, args.patience)
                wall_converged = time.time()
                took = (max(readiness.ready.values()) - start) if converged else float("nan")
                done = len(readiness.ready) - 1
                print(f"converged: {converged} ({done}/{args.workloads} Ready) in {took:.1f} s", flush=True)
                all_jobsets = (max(readiness.jobsets.values()) - start) if readiness.jobsets else float("nan")
                print(f"every JobSet created after {all_jobsets:.1f} s", flush=True)
                after = await write_counts(http)
                watch_converging = _pools.watch_events((await http.get("/metrics")).text)
                read_converging = _pools.read_bytes(operator.proc.pid) - read_before
                throttled_converging = await throttled(http) - throttled_before
                converge_cpu = operator.cpu_seconds() - cpu_before
                await asyncio.sleep(5)  # late follow-up events of the last objects
                idle_before = await write_counts(http)
                watch_idle_before = _pools.watch_events((await http.get("/metrics")).text)
                read_idle_before = _pools.read_bytes(operator.proc.pid)
                idle_cpu_before = operator.cpu_seconds()
                wall_idle = time.time()
                await asyncio.sleep(args.idle_seconds)
                idle_after = await write_counts(http)
                watch_idle = _pools.watch_events((await http.get("/metrics")).text)
                read_idle = _pools.read_bytes(operator.proc.pid) - read_idle_before
                idle_cpu = operator.cpu_seconds() - idle_cpu_before
                objects = await _pools.count_objects(http, "scale")
                pickers = await _pools.pickers_ready(http, "scale")
                if args.foreign_deployments:
                    result["foreign"] = await foreign(http, operator, args.foreign_deployments)
                stop.set()
                await sampler
                await lag_sampler
            # the operator's own lag: leader pod Ready -> workload Ready (seen by the same watcher)
            lags = readiness.after_pod_ready(readiness.ready)
            floor = readiness.after_pod_ready(readiness.probes)
            cr_floor = readiness.after_pod_ready(readiness.cr_probes)
            passes = await operator_passes(metrics_port)
            lanes = await operator_lanes(metrics_port)
            writes = diff_counts(before, after)
            idle = diff_counts(idle_before, idle_after)
            ours = {
                k: v
                for k, v in writes.items()
                if (k[0] in OPERATOR_RESOURCES and k[1] != "status")
                or (k[0] == "inferenceworkloads" and k[1] == "status")
            }
            # the benchmark's own creates are not the operator's
            ours[("inferenceworkloads", "", "POST")] = (
                ours.get(("inferenceworkloads", "", "POST"), 0) - args.workloads
            )
            ours = {k: v for k, v in ours.items() if v > 0}
            idle_ours = {
                k: v
                for k, v in idle.items()
                if (k[0] in OPERATOR_RESOURCES and k[1] != "status")
                or k[:2] == ("inferenceworkloads", "status")
            }
            if targets is not None:
                result["scrapes"] = summary(
                    await asyncio.to_thread(targets.stats),
                    start=wall_start,
                    converged=wall_converged,
                    idle=(wall_idle, wall_idle + args.idle_seconds),
                    ready=len(readiness.ready),
                    cpu_s=targets.cpu_seconds(),
                )
            result.update(
                {
                    "autoscaling": autoscaling,
                    "inference_pools": pools,
                    "objects": objects,
                    "pickers": pickers,
                    "pool_accepted": _pools.pool_reasons(readiness.workloads.values()),
                    "watch_events_converging": _pools.diff_watch(watch_before, watch_converging),
                    "watch_events_idle": _pools.diff_watch(watch_idle_before, watch_idle),
                    "operator_read_mib_converging": read_converging / 2**20,
                    "operator_read_mib_idle": read_idle / 2**20,
                    "operator_writes_per_object_idle": per_object(idle_ours, args.workloads),
                    "single_s": single,
                    "created_s": created,
                    "converged": converged,
                    "converge_s": took,
                    "ready_lag_s": _lags(lags),
                    # per workload, seconds since the creates began: for where a tail comes from
                    "timeline": {
                        name: {
                            "pod_ready": round(readiness.pods_ready[name] - start, 3),
                            "ready": round(readiness.ready[name] - start, 3),
                            "probe": round(readiness.probes[name] - start, 3)
                            if name in readiness.probes
                            else None,
                            "cr_probe": round(readiness.cr_probes[name] - start, 3)
                            if name in readiness.cr_probes
                            else None,
                        }
                        for name in readiness.ready
                        if name in readiness.pods_ready and name != "single"
                    },
                    "cr_probe_lag_s": _lags(cr_floor),
                    "probe_lag_s": _lags(floor),
                    "benchmark_loop_lag_s": {
                        "p50": _common.median(own_lags),
                        "p99": _common.pct(own_lags, 0.99),
                        "max": max(own_lags) if own_lags else float("nan"),
                    },
                    "operator_passes": passes,
                    "operator_lanes": lanes,
                    "apiserver_429_converging": throttled_converging,
                    "all_jobsets_s": all_jobsets,
                    "n_times_single_s": args.workloads * single,
                    "operator_peak_rss_mib": peak[0] / 2**20,
                    "operator_cpu_s_converging": converge_cpu,
                    "operator_cpu_s_idle": idle_cpu,
                    "operator_writes_per_object": per_object(ours, args.workloads),
                    "operator_writes_total_per_object": sum(ours.values()) / args.workloads,
                    "all_writes_converging": {f"{k[0]}/{k[1]} {k[2]}": v for k, v in writes.items()},
                    "idle_writes_operator_resources": {
                        f"{k[0]}/{k[1]} {k[2]}": v for k, v in idle_ours.items()
                    },
                    "idle_writes_all": {f"{k[0]}/{k[1]} {k[2]}": v for k, v in idle.items()},
                }
            )
    finally:
        if operator is not None:
            operator.stop()
        tb.stop()
    return result


async def foreign(http: httpx.AsyncClient, operator: Operator, count: int) -> dict[str, float]:
    """``--foreign-deployments``: the operator's cost of ``count`` Deployments that are none of
    its own, created in another namespace after converging (the picker watch filters labels in
    the operator, so with pools it receives and decodes every one); 10 s to settle after."""
    await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": "foreign"}})
    path = "/apis/apps/v1/namespaces/foreign/deployments"
    watch_before = _pools.watch_events((await http.get("/metrics")).text)
    read_before, cpu_before = _pools.read_bytes(operator.proc.pid), operator.cpu_seconds()
    gate = asyncio.Semaphore(32)

    async def create(i: int) -> None:
        async with gate:
            await call(http, "POST", path, json=_pools.foreign_deployment(f"app-{i:05d}", "foreign"))

    await asyncio.gather(*(create(i) for i in range(count)))
    await asyncio.sleep(10)
    events = _pools.diff_watch(watch_before, _pools.watch_events((await http.get("/metrics")).text))
    out = {
        "deployments": count,
        "deployment_events_all_watchers": events.get("deployments", {}).get("events", 0.0),
        "operator_cpu_s": operator.cpu_seconds() - cpu_before,
        "operator_read_mib": (_pools.read_bytes(operator.proc.pid) - read_before) / 2**20,
    }
    print(f"{count} foreign Deployments: {out}", flush=True)
    return out


async def run_direct(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The physical limit: this process makes the operator's API calls for every workload itself
    (same manifests, same concurrency), and convergence is every leader pod Ready."""
    t0 = time.perf_counter()
    tb = start_testbed(workdir, nodes=args.nodes)
    testbed_up = time.perf_counter() - t0
    print(f"testbed with {args.nodes} nodes up in {testbed_up:.1f} s", flush=True)
    try:
        async with client(tb.kubeconfig, limits=64) as http:
            await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": "scale"}})
            readiness = Readiness()
            pods = "/api/v1/namespaces/scale/pods"
            async with watching(http, [JOBSETS.format(ns="scale"), pods], readiness):
                start = time.perf_counter()
                await direct_calls(http, "single", "scale")
                await readiness.wait_pods(1, args.patience)
                single = readiness.pods_ready["single"] - start
                print(f"single workload, direct calls -> leader pod Ready: {single:.2f} s", flush=True)
                await asyncio.sleep(5)
                gate = asyncio.Semaphore(32)

                async def one(i: int) -> None:
                    async with gate:
                        await direct_calls(http, f"w{i:04d}", "scale")

                start = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(args.workloads)))
                calls = time.perf_counter() - start
                print(f"direct calls for {args.workloads} workloads done in {calls:.1f} s", flush=True)
                await readiness.wait_pods(args.workloads + 1, args.patience)
                done = len(readiness.pods_ready) - 1
                took = max(readiness.pods_ready.values()) - start
                print(f"{done}/{args.workloads} leader pods Ready after {took:.1f} s", flush=True)
                all_jobsets = max(readiness.jobsets.values()) - start
    finally:
        tb.stop()
    return {
        "mode": "direct",
        "testbed_up_s": testbed_up,
        "single_s": single,
        "calls_s": calls,
        "converged": done == args.workloads,
        "converge_s": took,
        "all_jobsets_s": all_jobsets,
        "n_times_single_s": args.workloads * single,
    }


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The human table of one run."""
    print()
    mode = "with" if result["autoscaling"] else "without"
    pools = "with" if result.get("inference_pools") else "without"
    print(f"workloads {args.workloads} on {args.nodes} nodes x 8 GPUs, {mode} autoscaling, {pools} pools")
    print(f"converge: {result['converge_s']:.1f} s (N x single: {result['n_times_single_s']:.1f} s)")
    print(f"every JobSet created after {result['all_jobsets_s']:.1f} s")
    lag = result["ready_lag_s"]
    print(f"leader pod Ready -> workload Ready: p50 {lag['p50']:.2f} s, p99 {lag['p99']:.2f} s", end="")
    print(f", max {lag['max']:.2f} s")
    floor = result["cr_probe_lag_s"]
    if floor["n"]:
        print("  the floor (--probe: a custom resource the size of the workload created on each", end="")
        print(" leader pod Ready, seen):", end="")
        print(
            f" p50 {floor['p50']:.2f} s, p99 {floor['p99']:.2f} s, max {floor['max']:.2f} s (n={floor['n']})"
        )
    floor = result["probe_lag_s"]
    if floor["n"]:
        print("  the same with a ConfigMap:", end="")
        print(
            f" p50 {floor['p50']:.2f} s, p99 {floor['p99']:.2f} s, max {floor['max']:.2f} s (n={floor['n']})"
        )
    own = result["benchmark_loop_lag_s"]
    print(f"(this benchmark's own loop lag: p50 {own['p50']:.3f} s, p99 {own['p99']:.3f} s", end="")
    print(f", max {own['max']:.2f} s)")
    passes = result["operator_passes"]
    print(f"operator passes: {passes['passes']:.0f}, mean {passes['mean_s'] * 1000:.0f} ms")
    for key, value in result["operator_lanes"].items():
        print(f"  {key}: {value}")
    print(f"apiserver 429 answers while converging: {result['apiserver_429_converging']:.0f}")
    rss, cpu = result["operator_peak_rss_mib"], result["operator_cpu_s_converging"]
    print(f"operator peak RSS {rss:.0f} MiB, CPU {cpu:.1f} s")
    print(f"operator writes per object: {result['operator_writes_total_per_object']:.2f}")
    for key, value in result["operator_writes_per_object"].items():
        print(f"  {key}: {value:.2f}")
    idle = result["idle_writes_operator_resources"]
    print(f"idle {args.idle_seconds:.0f} s: writes to operator resources {idle}")
    print(f"objects in the namespace: {result['objects']}")
    if result.get("inference_pools"):
        print(f"pickers: {result['pickers']}; PoolAccepted: {result['pool_accepted']}")
    for phase in ("converging", "idle"):
        events = {
            k: f"{v['events']:.0f} ({v['bytes'] / 2**20:.1f} MiB)"
            for k, v in result[f"watch_events_{phase}"].items()
        }
        print(f"watch events sent, all watchers, {phase}: {events}")
        print(f"  bytes the operator read, {phase}: {result[f'operator_read_mib_{phase}']:.1f} MiB")
    if scrapes := result.get("scrapes"):
        print(
            f"scrapes: {scrapes['scrapes']} of {scrapes['pods_scraped']} pods; per second "
            f"{scrapes['per_s_converging']:.1f} converging, {scrapes['per_s_idle']:.1f} idle "
            f"(every Ready engine each interval: {scrapes['expected_per_s_idle']:.1f}); "
            f"the scrape targets' CPU so far {scrapes['targets_cpu_s']:.1f} s"
        )


def modes_of(args: argparse.Namespace) -> list[tuple[bool, bool]]:
    """The runs the flags ask for, each ``(autoscaling, pools)``, in order."""
    if args.compare and args.compare_pools:
        raise SystemExit("--compare and --compare-pools: one comparison per run")
    if args.compare:
        return [(False, args.inference_pools), (True, args.inference_pools)]
    if args.compare_pools:
        return [(args.autoscaling, False), (args.autoscaling, True)]
    return [(args.autoscaling, args.inference_pools)]


def run_modes(
    args: argparse.Namespace, workdir: Path, modes: list[tuple[bool, bool]]
) -> list[dict[str, Any]]:
    """A run per mode (``(autoscaling, pools)``), each on a fresh testbed; when any scrapes,
    every run's pods get addresses of :data:`POD_CIDR`, routed to one set of scrape targets."""
    with contextlib.ExitStack() as stack:
        targets = None
        if any(autoscaling for autoscaling, _ in modes):
            stack.enter_context(local_route(POD_CIDR))
            targets = ScrapeTargets(workdir / "scrapes.log")
            stack.callback(targets.stop)
        results = []
        for i, (autoscaling, pools) in enumerate(modes):
            (workdir / f"run-{i}").mkdir()
            results.append(
                asyncio.run(
                    run(args, workdir / f"run-{i}", autoscaling=autoscaling, pools=pools, targets=targets)
                )
            )
        return results


def _watched(result: dict[str, Any], phase: str) -> float:
    return float(sum(v["events"] for k, v in result[f"watch_events_{phase}"].items() if k != "pods"))


def side_by_side(without: dict[str, Any], with_: dict[str, Any], *, what: str = "autoscaling") -> None:
    """``--compare`` / ``--compare-pools``: the figures autoscaling or pools could move, without
    and with them."""
    per_workload = max(1, len(with_["timeline"]))
    rows: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("converge (s)", lambda r: r["converge_s"]),
        ("pod Ready -> Ready p50 (s)", lambda r: r["ready_lag_s"]["p50"]),
        ("pod Ready -> Ready p99 (s)", lambda r: r["ready_lag_s"]["p99"]),
        ("operator CPU converging (s)", lambda r: r["operator_cpu_s_converging"]),
        ("operator CPU idle (s)", lambda r: r["operator_cpu_s_idle"]),
        ("operator peak RSS (MiB)", lambda r: r["operator_peak_rss_mib"]),
        ("operator writes per object", lambda r: r["operator_writes_total_per_object"]),
        ("scrapes per second, idle", lambda r: (r.get("scrapes") or {}).get("per_s_idle", 0.0)),
        ("operator read converging (MiB)", lambda r: r["operator_read_mib_converging"]),
        ("operator read idle (MiB)", lambda r: r["operator_read_mib_idle"]),
        ("watch events (no pods) converging", lambda r: _watched(r, "converging")),
        ("objects in the namespace", lambda r: sum(r["objects"].values())),
        ("objects per workload", lambda r: sum(r["objects"].values()) / per_workload),
        (
            "foreign Deployments: operator CPU (s)",
            lambda r: (r.get("foreign") or {}).get("operator_cpu_s", 0.0),
        ),
        ("foreign Deployments: read (MiB)", lambda r: (r.get("foreign") or {}).get("operator_read_mib", 0.0)),
    ]
    print()
    print(f"{'':40} {'without':>10} {'with':>10}  {what}")
    for label, value in rows:
        print(f"{label:40} {value(without):10.2f} {value(with_):10.2f}")
    if what == "pools":
        print("API writes per workload by resource (converging | idle), without -> with:")
        keys = sorted(set(without["operator_writes_per_object"]) | set(with_["operator_writes_per_object"]))
        for key in keys:
            a, b = (
                without["operator_writes_per_object"].get(key, 0.0),
                with_["operator_writes_per_object"].get(key, 0.0),
            )
            c = without["operator_writes_per_object_idle"].get(key, 0.0)
            d = with_["operator_writes_per_object_idle"].get(key, 0.0)
            print(f"  {key:40} {a:6.2f} -> {b:6.2f} | {c:6.3f} -> {d:6.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--patience", type=float, default=600.0, help="give up converging after this")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument(
        "--probe",
        action="store_true",
        help="on each leader pod Ready, also create a ConfigMap and time seeing it: the floor "
        "of pod Ready -> workload Ready (one write and one watch event) under the same load",
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="no operator: this process makes the operator's calls itself (the physical limit)",
    )
    parser.add_argument(
        "--autoscaling",
        action="store_true",
        help="every workload with spec.autoscaling (Operator mode, 1-2 replicas, 4 waiting per replica, "
        "a scrape every 15 s); the scrapes are answered on this machine (bench/_scrapes.py: needs root "
        "and port 8000)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run without, then with --autoscaling, each on a fresh testbed, and print them side by side",
    )
    parser.add_argument(
        "--inference-pools",
        action="store_true",
        help="install the chart's InferencePool CRD before the operator starts and run it with "
        "--inference-pools auto: a pool and a managed endpoint picker per workload",
    )
    parser.add_argument(
        "--compare-pools",
        action="store_true",
        help="run without (--inference-pools off, no CRD), then with --inference-pools, each on a "
        "fresh testbed, and print them side by side",
    )
    parser.add_argument(
        "--foreign-deployments",
        type=int,
        default=0,
        metavar="N",
        help="after the idle period, create N Deployments that are not the operator's (0 replicas) in "
        "another namespace and measure the operator's CPU and bytes read for them (the picker "
        "watch's client-side label filter)",
    )
    parser.add_argument(
        "operator_args",
        nargs="*",
        help="extra 'operator run' flags (after --), e.g. --max-concurrent-passes 32",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        if args.direct:
            result = asyncio.run(run_direct(args, workdir))
            path = _common.write_json(
                "scale-direct",
                {"inputs": vars(args), "environment": _common.environment(), "result": result},
            )
            print(json.dumps(result))
            print(f"wrote {path}")
            return 0
        results = run_modes(args, workdir, modes_of(args))
    except (httpx.HTTPError, RuntimeError) as error:
        print(f"failed: {error}")
        return 1
    for result in results:
        report(args, result)
    if args.compare or args.compare_pools:
        side_by_side(*results, what="pools" if args.compare_pools else "autoscaling")
    result = results[0] if len(results) == 1 else {"without": results[0], "with": results[1]}
    path = _common.write_json(
        "scale",
        {
            "inputs": vars(args),
            "environment": _common.environment(["kopf", "kubernetes_asyncio"]),
            "result": result,
        },
    )
    print(f"wrote {path}")
    keys = ("converge_s", "operator_peak_rss_mib", "operator_writes_total_per_object")
    print(json.dumps([{k: r[k] for k in keys} for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
