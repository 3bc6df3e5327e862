"""Process runtime benchmark: start-to-Ready of serving groups, and what an idle engine costs.

``python -m bench.process_runtime [--rounds N] [--idle-seconds S]``

Starts its own testbed with four process nodes and measures, interleaved round by round:

- ``testbed 1-node`` / ``testbed 4-node``: a JobSet (leader only, or leader + 3 headless
  workers whose init container waits for the leader's port), from the create call until the
  leader pod's ``Ready`` condition is True (polled every 50 ms through the API). Covers the
  JobSet and Job controllers, the scheduler, the runtime's sandbox and processes, the engine
  stand-in's start and rendezvous, and the readiness probe (period 1 s).
- ``bare 1-node`` / ``bare 4-node``: the physical limit: the same engine stand-in processes
  started directly on loopback, until the leader's ``/health`` answers 200 (polled every 50 ms).

Then, with one 4-node group up and idle for ``--idle-seconds``: each engine process's resident
memory (RSS and PSS) and CPU, next to a bare idle engine (no probes), and the runtime daemon's
own CPU and RSS. JSON goes to ``bench/results/process_runtime-<time>.json``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from sparkrun_testbed import binaries, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import PROCESS_TAINT, NodePool, Topology

from ._common import environment, free_port, median, pct, write_json

JOBSET = "jobset.x-k8s.io/v1alpha2"
IMAGE = "vllm/vllm-openai:v0.11.0"
POLL = 0.05
# NB: a model name of its own, so that idle measurements find this run's engines and no others.
MODEL = f"org/process-bench-{secrets.token_hex(4)}"
TOLERATION = {**PROCESS_TAINT, "operator": "Equal"}


def group(name: str, nodes: int) -> dict[str, Any]:
    leader_host = f"{name}-leader-0-0.{name}"
    rank = "$((JOB_COMPLETION_INDEX+1))"
    flags = ["--nnodes", str(nodes), "--master-addr", leader_host, "--master-port", "29501"]
    placement = {"nodeSelector": {"sparkrun.dev/testbed-runtime": "process"}, "tolerations": [TOLERATION]}
    leader = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        **placement,
        "containers": [
            {
                "name": "vllm",
                "image": IMAGE,
                "command": ["vllm", "serve"],
                "args": [MODEL, "--port", "8000", *flags, "--node-rank", "0"],
                "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
            }
        ],
    }
    worker = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        **placement,
        "initContainers": [
            {
                "name": "wait-leader",
                "image": "busybox",
                "command": ["sh", "-c", f"until nc -z {leader_host} 29501; do sleep 0.2; done"],
            }
        ],
        "containers": [
            {
                "name": "vllm",
                "image": IMAGE,
                "command": ["sh", "-c"],
                "args": [f"exec vllm serve {MODEL} {' '.join(flags)} --node-rank {rank} --headless"],
            }
        ],
    }

    def job(role: str, count: int, spec: dict[str, Any]) -> dict[str, Any]:
        template = {"metadata": {"labels": {"bench": name, "role": role}}, "spec": spec}
        return {
            "name": role,
            "replicas": 1,
            "template": {
                "spec": {"completions": count, "parallelism": count, "backoffLimit": 0, "template": template}
            },
        }

    jobs = [job("leader", 1, leader)]
    if nodes > 1:
        jobs.append(job("worker", nodes - 1, worker))
    return {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "network": {"enableDNSHostnames": nodes > 1},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": jobs,
        },
    }


def leader_ready(api: KubeApi, namespace: str, name: str) -> bool:
    pods = api.list_items("v1", "Pod", namespace=namespace, label_selector=f"bench={name},role=leader")
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for p in pods
        for c in (p.get("status") or {}).get("conditions") or ()
    )


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL)


def testbed_round(api: KubeApi, namespace: str, name: str, nodes: int) -> float:
    start = time.perf_counter()
    api.create(group(name, nodes), namespace=namespace)
    wait(lambda: leader_ready(api, namespace, name), 120, f"{name} Ready")
    took = time.perf_counter() - start
    api.delete(JOBSET, "JobSet", name, namespace=namespace, propagation="Foreground")
    wait(
        lambda: not api.list_items("v1", "Pod", namespace=namespace, label_selector=f"bench={name}"),
        120,
        "pods gone",
    )
    return took


def bare_round(workdir: Path, nodes: int) -> float:
    http, master = free_port(), free_port()
    flags = ["--nnodes", str(nodes), "--master-addr", "127.0.0.1", "--master-port", str(master)]
    env = {**os.environ, "SPARKRUN_ENGINE_MASTER_BIND": "127.0.0.1"}
    engine = [sys.executable, "-m", "sparkrun_testbed.engine", "serve", f"{MODEL}-bare"]
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*engine, "--host", "127.0.0.1", "--port", str(http), *flags, "--node-rank", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
    ]
    for rank in range(1, nodes):
        procs.append(
            subprocess.Popen(
                [*engine, *flags, "--node-rank", str(rank), "--headless"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )
    try:
        with httpx.Client(trust_env=False, timeout=1) as client:

            def healthy() -> bool:
                try:
                    return client.get(f"http://127.0.0.1:{http}/health").status_code == 200
                except httpx.HTTPError:
                    return False

            wait(healthy, 60, "bare engine healthy")
        return time.perf_counter() - start
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


def proc_usage(pid: int) -> tuple[float, int, int]:
    """CPU seconds, RSS bytes and PSS bytes of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = pss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:
        pss = 0
    return cpu, rss, pss


def engine_pids(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "sparkrun_testbed.engine" in cmd and marker in cmd:
                found.append(int(entry.name))
    return found


def idle_usage(pids: list[int], seconds: float) -> list[dict[str, float]]:
    before = {pid: proc_usage(pid) for pid in pids}
    time.sleep(seconds)
    result = []
    for pid in pids:
        cpu, rss, pss = proc_usage(pid)
        result.append(
            {
                "pid": pid,
                "cpu_percent": 100 * (cpu - before[pid][0]) / seconds,
                "rss_mib": rss / 2**20,
                "pss_mib": pss / 2**20,
            }
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.process_runtime")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    bins = binaries.locate().check()
    workdir = Path(tempfile.mkdtemp(prefix="bench-process-"))
    topology = Topology(
        pools=(NodePool(count=1), NodePool(prefix="proc", count=4, process=True, taints=(PROCESS_TAINT,)))
    )
    t0 = time.perf_counter()
    tb = plane.Testbed.start(workdir / "testbed", bins, plane.Options(topology=topology))
    testbed_up = time.perf_counter() - t0
    samples: dict[str, list[float]] = {
        "testbed 1-node": [],
        "testbed 4-node": [],
        "bare 1-node": [],
        "bare 4-node": [],
    }
    usage: dict[str, Any] = {}
    try:
        with tb.api() as api:
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
            wait(lambda: api.get("v1", "ServiceAccount", "default", namespace="bench") is not None, 60, "SA")
            # One warm-up of each, not counted: the first pod of a node pays for cold imports.
            testbed_round(api, "bench", "warm", 4)
            bare_round(workdir, 4)
            for i in range(args.rounds):
                order = [("testbed", 1), ("bare", 1), ("testbed", 4), ("bare", 4)]
                if i % 2:
                    order.reverse()
                for kind, nodes in order:
                    if kind == "testbed":
                        took = testbed_round(api, "bench", f"g{i}n{nodes}", nodes)
                    else:
                        took = bare_round(workdir, nodes)
                    samples[f"{kind} {nodes}-node"].append(took)
                    print(f"round {i}: {kind} {nodes}-node {took:.2f} s", flush=True)
            # Idle cost: a 4-node group in the testbed (probes on) vs one bare engine.
            api.create(group("idle", 4), namespace="bench")
            wait(lambda: leader_ready(api, "bench", "idle"), 120, "idle group Ready")
            time.sleep(3)
            bare_port = free_port()
            bare = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sparkrun_testbed.engine",
                    "serve",
                    f"{MODEL}-bare-idle",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(bare_port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(3)
            runtime = tb.state.daemon(plane.PROCESS_RUNTIME)
            assert runtime is not None
            tracked = [*engine_pids(f"{MODEL} "), bare.pid, runtime.pid]
            measured = idle_usage(tracked, args.idle_seconds)
            bare.terminate()
            bare.wait(10)
            leaders = engine_pids("--node-rank 0")
            leader = [m for m in measured if m["pid"] in leaders]
            usage = {
                "testbed_engines": [m for m in measured if m["pid"] not in (bare.pid, runtime.pid)],
                "testbed_leader": leader,
                "bare_engine": [m for m in measured if m["pid"] == bare.pid],
                "runtime_daemon": [m for m in measured if m["pid"] == runtime.pid],
                "runtime_pods": 4,
                "idle_seconds": args.idle_seconds,
            }
    finally:
        tb.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\ntestbed up in {testbed_up:.1f} s; {args.rounds} rounds, interleaved; start -> leader Ready")
    print(f"{'target':<16} {'n':>3} {'min':>7} {'median':>7} {'p99':>7} {'max':>7}")
    for name, values in samples.items():
        stats = (min(values), median(values), pct(values, 0.99), max(values))
        print(f"{name:<16} {len(values):>3} " + " ".join(f"{v:7.2f}" for v in stats))
    for nodes in (1, 4):
        ratio = [
            t / b
            for t, b in zip(samples[f"testbed {nodes}-node"], samples[f"bare {nodes}-node"], strict=True)
        ]
        low, mid, high = min(ratio), median(ratio), max(ratio)
        print(f"testbed/bare {nodes}-node: min {low:.1f}x median {mid:.1f}x max {high:.1f}x")
    print(f"\nidle for {args.idle_seconds:.0f} s (CPU %, RSS MiB, PSS MiB):")
    for label in ("testbed_engines", "bare_engine", "runtime_daemon"):
        for m in usage[label]:
            cpu, rss, pss = m["cpu_percent"], m["rss_mib"], m["pss_mib"]
            print(f"  {label:<16} pid {m['pid']:>7}  cpu {cpu:5.2f}%  rss {rss:6.1f}  pss {pss:6.1f}")
    path = write_json(
        "process_runtime",
        {
            "environment": environment(("kubernetes_asyncio", "aiohttp")),
            "testbed_up_seconds": testbed_up,
            "rounds": args.rounds,
            "poll_seconds": POLL,
            "start_to_ready_seconds": samples,
            "idle": usage,
        },
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
