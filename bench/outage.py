"""Outage: the apiserver unreachable for the operator for T seconds with N workloads converged.

On a fresh testbed (M KWOK nodes of 8 GPUs), the operator reaches the apiserver only through a
loopback proxy of this process (``bench/_proxy.py``: plain HTTP from the operator, TLS to the
apiserver, every request line recorded). N one-GPU workloads converge; then the proxy drops
every open connection and resets every new one for ``--outage`` seconds; meanwhile this
process (talking to the apiserver directly) scales a fraction of the workloads to 2 replicas,
so that there is work waiting when the apiserver comes back. Measured:

- connection attempts and request heads per 100 ms bucket during the outage and in the 60 s
  after it (peak bucket vs mean: a synchronized retry herd is a spike);
- per loop (a watch of one resource, one workload's status writes, ...): the first retry after
  the outage began and the first request after it ended, as p5/p50/p95 across loops (the
  spread: a herd has them all in one bucket);
- the time from restore until every workload is consistent again (``Ready=True``,
  ``readyReplicas == replicas``, ``observedGeneration == generation``);
- errors: the operator's ``sparkrun_operator_reconcile_errors_total`` and its ERROR lines.

Run: ``python -m bench.outage [--workloads 1000 --nodes 250 --outage 120]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from bench import _common
from bench._operator import WORKLOADS, Operator, call, client, start_testbed, watching, workload
from bench._proxy import Proxy, Request

NAMESPACE = "outage"


class Workloads:
    """The latest state of every workload (from a watch) and whether each is consistent."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Event()

    def __call__(self, kind: str, obj: dict[str, Any], when: float) -> None:
        if obj.get("kind") != "InferenceWorkload":
            return
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        self.changed.set()

    def pending(self) -> list[str]:
        return [name for name, obj in self.objects.items() if not consistent(obj)]

    async def wait(self, count: int, patience: float) -> bool:
        deadline = time.monotonic() + patience
        while len(self.objects) < count or self.pending():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))
        return True


def consistent(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    replicas = (obj.get("spec") or {}).get("replicas", 1)
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return (
        ready
        and status.get("readyReplicas") == replicas
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    )


def proxy_for(kubeconfig: Path) -> tuple[Proxy, dict[str, Any]]:
    """A proxy to the kubeconfig's apiserver, and the kubeconfig document to reach it through."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    server = urlsplit(cluster["server"])
    tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    proxy = Proxy(upstream_host=server.hostname or "127.0.0.1", upstream_port=server.port or 443, tls=tls)
    return proxy, config


def loop_key(request: Request) -> str:
    """Which loop sent ``request``: the method and path, watches and lists apart."""
    path, _, query = request.path.partition("?")
    if "watch=" in query and "watch=false" not in query:
        return f"WATCH {path}"
    return f"{request.method} {path}"


def buckets(times: Sequence[float], start: float, end: float, width: float = 0.1) -> dict[str, float]:
    """Events per ``width`` s bucket over [start, end): peak, mean, and their ratio."""
    count = max(1, int((end - start) / width))
    counts = Counter(int((t - start) / width) for t in times if start <= t < end)
    total = sum(counts.values())
    peak = max(counts.values(), default=0)
    mean = total / count
    return {
        "events": total,
        "buckets": count,
        "mean": mean,
        "peak": peak,
        "peak_over_mean": peak / mean if mean else 0.0,
        "busy_buckets": len(counts),
    }


def lockstep(requests: Sequence[Request], start: float, end: float, width: float = 0.1) -> dict[str, float]:
    """Refused retries from ``start`` (past the instant the connections dropped, when every
    stream asks once more at once) to ``end``: the most in one bucket, and the most distinct
    loops in one bucket (a herd: many loops in the same bucket, again and again)."""
    loops: dict[int, set[str]] = {}
    counts: Counter[int] = Counter()
    for request in requests:
        if request.refused and start <= request.at < end:
            slot = int((request.at - start) / width)
            counts[slot] += 1
            loops.setdefault(slot, set()).add(loop_key(request))
    return {
        "retries": sum(counts.values()),
        "busy_buckets": len(counts),
        "peak": max(counts.values(), default=0),
        "most_loops_in_a_bucket": max((len(v) for v in loops.values()), default=0),
        "buckets_with_4_or_more_loops": sum(1 for v in loops.values() if len(v) >= 4),
    }


def spread(firsts: Sequence[float]) -> dict[str, float]:
    return {
        "loops": len(firsts),
        "p5": _common.pct(firsts, 0.05),
        "p50": _common.pct(firsts, 0.5),
        "p95": _common.pct(firsts, 0.95),
        "max": max(firsts, default=float("nan")),
    }


def first_after(requests: Sequence[Request], at: float, *, refused: bool | None) -> dict[str, float]:
    """Per loop, seconds from ``at`` to its first request after ``at``."""
    firsts: dict[str, float] = {}
    for request in requests:
        if request.at < at or (refused is not None and request.refused != refused):
            continue
        firsts.setdefault(loop_key(request), request.at - at)
    return firsts


async def reconcile_errors(port: int) -> dict[str, float]:
    async with httpx.AsyncClient() as local:
        text = (await local.get(f"http://127.0.0.1:{port}/metrics", timeout=10)).text
    pattern = r"^sparkrun_operator_reconcile_errors_total\{([^}]*)\} (\S+)$"
    return {labels: float(value) for labels, value in re.findall(pattern, text, re.M)}


async def converge(http: httpx.AsyncClient, seen: Workloads, args: argparse.Namespace) -> float:
    gate = asyncio.Semaphore(32)
    path = WORKLOADS.format(ns=NAMESPACE)

    async def create(i: int) -> None:
        async with gate:
            await call(http, "POST", path, json=workload(f"w{i:04d}", NAMESPACE))

    start = time.monotonic()
    await asyncio.gather(*(create(i) for i in range(args.workloads)))
    if not await seen.wait(args.workloads, args.patience):
        raise RuntimeError(f"not converged before the outage: {len(seen.pending())} pending")
    return time.monotonic() - start


async def scale_some(http: httpx.AsyncClient, count: int) -> None:
    """Scale ``count`` workloads to 2 replicas behind the operator's back (during the outage)."""
    path = WORKLOADS.format(ns=NAMESPACE)
    for i in range(count):
        await call(
            http,
            "PATCH",
            f"{path}/w{i:04d}",
            json={"spec": {"replicas": 2}},
            headers={"Content-Type": "application/merge-patch+json"},
        )


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tb = start_testbed(workdir, nodes=args.nodes)
    proxy, config = proxy_for(tb.kubeconfig)
    await proxy.start()
    config["clusters"][0]["cluster"] = {"server": f"http://127.0.0.1:{proxy.port}"}
    through_proxy = workdir / "kubeconfig-proxy"
    through_proxy.write_text(yaml.safe_dump(config))
    operator: Operator | None = None
    result: dict[str, Any] = {}
    try:
        async with client(tb.kubeconfig, limits=64) as http:
            await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})
            metrics_port = _common.free_port()
            operator = Operator(
                through_proxy,
                workdir / "operator.log",
                "--metrics-port",
                str(metrics_port),
                "--metrics-host",
                "127.0.0.1",
                *args.operator_args,
            )
            seen = Workloads()
            async with watching(http, [WORKLOADS.format(ns=NAMESPACE)], seen):
                result["converge_s"] = await converge(http, seen, args)
                print(f"{args.workloads} workloads converged in {result['converge_s']:.1f} s", flush=True)
                await asyncio.sleep(args.settle)
                errors_before = await reconcile_errors(metrics_port)
                down = time.monotonic()
                proxy.outage()
                print(f"outage for {args.outage:.0f} s", flush=True)
                await asyncio.sleep(min(5.0, args.outage / 2))
                changed = int(args.workloads * args.changed)
                await scale_some(http, changed)
                await asyncio.sleep(max(0.0, down + args.outage - time.monotonic()))
                proxy.restore()
                back = time.monotonic()
                print(f"restored; {changed} workloads scaled to 2 meanwhile", flush=True)
                recovered = await seen.wait(args.workloads, args.patience)
                result["consistent_after_s"] = time.monotonic() - back if recovered else float("nan")
                result["pending"] = len(seen.pending())
                print(f"every workload consistent {result['consistent_after_s']:.1f} s after", flush=True)
                await asyncio.sleep(max(0.0, back + args.after - time.monotonic()))
            result.update(measure(proxy, down=down, back=back, after=args.after))
            errors_after = await reconcile_errors(metrics_port)
            result["reconcile_errors"] = {
                k: v - errors_before.get(k, 0.0)
                for k, v in errors_after.items()
                if v > errors_before.get(k, 0.0)
            }
            log = (workdir / "operator.log").read_text(errors="replace")
            result["operator_error_lines"] = sum(1 for line in log.splitlines() if " ERROR " in line)
            result["operator_alive"] = operator.proc.poll() is None
            result["changed"] = changed
    finally:
        if operator is not None:
            operator.stop()
        await proxy.close()
        tb.stop()
    return result


def measure(proxy: Proxy, *, down: float, back: float, after: float) -> dict[str, Any]:
    refused = [r.at for r in proxy.requests if r.refused]
    served_after = [r.at for r in proxy.requests if not r.refused and r.at >= back]
    retries = first_after(proxy.requests, down, refused=True)
    returns = first_after(proxy.requests, back, refused=False)
    per_loop = Counter(loop_key(r) for r in proxy.requests if r.refused)
    watches = sorted(v for k, v in returns.items() if k in per_loop)
    return {
        "outage_s": back - down,
        "connections_during": buckets(proxy.connections, down, back),
        "requests_refused_during": buckets(refused, down, back),
        "connections_after": buckets(proxy.connections, back, back + after),
        "requests_after": buckets(served_after, back, back + after),
        "first_retry_s": spread(sorted(retries.values())),
        "first_request_after_restore_s": spread(sorted(returns.values())),
        # the loops that retried during the outage (kopf's watch streams): a herd comes back together
        "first_request_after_restore_retrying_loops_s": spread(watches),
        "after_the_first_second": lockstep(proxy.requests, down + 1.0, back),
        "retries_per_busy_bucket": len(refused) / max(1, len({int((t - down) / 0.1) for t in refused})),
        "requests": [(round(r.at - down, 3), loop_key(r), r.refused) for r in proxy.requests if r.at >= down],
        "refused_per_loop_top": per_loop.most_common(10),
        "loops_refused": len(per_loop),
    }


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    print()
    print(f"{args.workloads} workloads on {args.nodes} nodes; outage {result['outage_s']:.1f} s")
    for key in ("connections_during", "requests_refused_during", "connections_after", "requests_after"):
        b = result[key]
        print(
            f"{key:26s} {b['events']:6.0f} in {b['buckets']} x 100 ms: mean {b['mean']:.2f}, "
            f"peak {b['peak']:.0f} (x{b['peak_over_mean']:.1f}), busy buckets {b['busy_buckets']}"
        )
    print(f"retries per busy 100 ms bucket during the outage: {result['retries_per_busy_bucket']:.2f}")
    print(f"from the outage's second second on: {result['after_the_first_second']}")
    for key in (
        "first_retry_s",
        "first_request_after_restore_s",
        "first_request_after_restore_retrying_loops_s",
    ):
        s = result[key]
        print(
            f"{key:46s} loops {s['loops']}: p5 {s['p5']:.2f} p50 {s['p50']:.2f} "
            f"p95 {s['p95']:.2f} max {s['max']:.2f} s"
        )
    print(f"consistent again after {result['consistent_after_s']:.1f} s (pending {result['pending']})")
    print(f"reconcile errors {result['reconcile_errors']}; ERROR lines {result['operator_error_lines']}")
    print(f"operator alive: {result['operator_alive']}")
    for key, count in result["refused_per_loop_top"]:
        print(f"  {count:5d} refused  {key}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--outage", type=float, default=120.0, help="seconds the apiserver is unreachable")
    parser.add_argument("--changed", type=float, default=0.1, help="fraction scaled to 2 during the outage")
    parser.add_argument("--settle", type=float, default=10.0, help="idle seconds before the outage")
    parser.add_argument("--after", type=float, default=60.0, help="seconds measured after the restore")
    parser.add_argument("--patience", type=float, default=900.0)
    parser.add_argument("operator_args", nargs="*", help="extra 'operator run' flags (after --)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    result = asyncio.run(run(args, workdir))
    report(args, result)
    path = _common.write_json(
        "outage",
        {"inputs": vars(args), "environment": _common.environment(["kopf"]), "result": result},
    )
    print(f"wrote {path} (operator log: {workdir / 'operator.log'})")
    print(json.dumps({k: result[k] for k in ("consistent_after_s", "first_request_after_restore_s")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
