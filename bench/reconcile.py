"""Reconcile latency: InferenceWorkload created -> its JobSet exists and its status is written.

Compared, interleaved round by round (A B, B A, ...), with the physical limit: the same API
calls made directly by this script (create the workload, add the finalizer, apply the Service
and the JobSet rendered by the same code, write the status), with no watch, queue or planner in
between. Both are timed the same way: from the create call until a watch on the apiserver has
delivered both the JobSet's ADDED event and the workload's status (``status.revision`` set).

Run: ``python -m bench.reconcile [--rounds 30]``. A fresh testbed (10 KWOK nodes with 8 GPUs)
is started and stopped; the JSON result goes to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _common
from bench._operator import (
    JOBSETS,
    WORKLOADS,
    Operator,
    call,
    client,
    direct_calls,
    start_testbed,
    watching,
    workload,
)
from sparkrun_operator.render import keys


class Seen:
    """When the watch delivered each workload's JobSet and written status."""

    def __init__(self) -> None:
        self.jobset: dict[str, float] = {}
        self.status: dict[str, float] = {}
        self.changed = asyncio.Event()

    def __call__(self, kind: str, obj: dict[str, Any], when: float) -> None:
        meta = obj.get("metadata", {})
        if obj.get("kind") == "JobSet":
            name = meta.get("labels", {}).get(keys.LABEL_WORKLOAD)
            if name and name not in self.jobset:
                self.jobset[name] = when
        elif (
            obj.get("kind") == "InferenceWorkload"
            and (obj.get("status") or {}).get("revision")
            and meta["name"] not in self.status
        ):
            self.status[meta["name"]] = when
        self.changed.set()

    async def done(self, name: str, patience: float = 60.0) -> float:
        deadline = time.perf_counter() + patience
        while not (name in self.jobset and name in self.status):
            self.changed.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"{name}: no JobSet/status after {patience} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                continue
        return max(self.jobset[name], self.status[name])


async def through_operator(http: httpx.AsyncClient, seen: Seen, name: str) -> float:
    start = time.perf_counter()
    await call(http, "POST", WORKLOADS.format(ns="op"), json=workload(name, "op"))
    return await seen.done(name) - start


async def direct(http: httpx.AsyncClient, seen: Seen, name: str) -> float:
    """The operator's API calls for a new workload, made directly (same manifests, same order)."""
    start = time.perf_counter()
    await direct_calls(http, name, "direct")
    return await seen.done(name) - start


async def run(rounds: int, workdir: Path) -> dict[str, Any]:
    tb = start_testbed(workdir, nodes=10)
    operator: Operator | None = None
    try:
        async with client(tb.kubeconfig) as http:
            for ns in ("op", "direct"):
                await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": ns}})
            operator = Operator(tb.kubeconfig, workdir / "operator.log", "-n", "op")
            seen = Seen()
            paths = [p.format(ns=ns) for p in (WORKLOADS, JOBSETS) for ns in ("op", "direct")]
            async with watching(http, paths, seen):
                # warm-up (not counted): the operator's first pass pays for imports and watches
                await through_operator(http, seen, "warm-0")
                await direct(http, seen, "warm-1")
                samples: dict[str, list[float]] = {"operator": [], "direct": []}
                ratios: list[float] = []
                for i in range(rounds):
                    order = ["operator", "direct"] if i % 2 == 0 else ["direct", "operator"]
                    took: dict[str, float] = {}
                    for kind in order:
                        name = f"r{i}-{kind[:2]}"
                        await asyncio.sleep(0.3)  # let the previous round's follow-up events settle
                        took[kind] = await (through_operator if kind == "operator" else direct)(
                            http, seen, name
                        )
                        samples[kind].append(took[kind])
                    ratios.append(took["operator"] / took["direct"])
                    print(
                        f"round {i:2d}: operator {took['operator'] * 1000:7.1f} ms   direct "
                        f"{took['direct'] * 1000:7.1f} ms   x{ratios[-1]:.2f}",
                        flush=True,
                    )
                rss = operator.rss_bytes()
    finally:
        if operator is not None:
            operator.stop()
        tb.stop()
    return {"samples": samples, "ratios": ratios, "operator_rss_bytes": rss}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    result = asyncio.run(run(args.rounds, workdir))
    rows = []
    for kind in ("operator", "direct"):
        values = result["samples"][kind]
        rows.append(
            {
                "path": kind,
                "n": len(values),
                "p50_ms": _common.median(values) * 1000,
                "p99_ms": _common.pct(values, 0.99) * 1000,
                "min_ms": min(values) * 1000,
                "max_ms": max(values) * 1000,
            }
        )
    ratios = result["ratios"]
    summary = {
        "ratio_p50": rows[0]["p50_ms"] / rows[1]["p50_ms"],
        "ratio_per_round": {
            "min": min(ratios),
            "median": _common.median(ratios),
            "max": max(ratios),
        },
        "operator_rss_mib": result["operator_rss_bytes"] / 2**20,
    }
    print(f"\n{'path':10s} {'n':>4s} {'p50 ms':>9s} {'p99 ms':>9s} {'min ms':>9s} {'max ms':>9s}")
    for row in rows:
        print(
            f"{row['path']:10s} {row['n']:4d} {row['p50_ms']:9.1f} {row['p99_ms']:9.1f} "
            f"{row['min_ms']:9.1f} {row['max_ms']:9.1f}"
        )
    per_round = summary["ratio_per_round"]
    print(
        f"operator / direct: p50 x{summary['ratio_p50']:.2f}; per round min x{per_round['min']:.2f} "
        f"median x{per_round['median']:.2f} max x{per_round['max']:.2f}"
    )
    path = _common.write_json(
        "reconcile",
        {
            "inputs": {"rounds": args.rounds, "nodes": 10},
            "environment": _common.environment(["kopf", "kubernetes_asyncio"]),
            "rows": rows,
            "summary": summary,
            "raw": result,
        },
    )
    print(f"wrote {path}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
