"""Wake-on-request benchmark (issue 27): what a request to a resting model waits, against the
engine's own wake and start, and how honest the ``Retry-After`` of a held request is.

``python -m bench.wake [--rounds N] [--load-seconds L] [--wake-seconds W] [--deadline D]``

Starts its own testbed (two process nodes, the project's CRDs), the operator (``operator run
--standalone``) and two gateways (``--kubernetes``, routing from the watches, waking through
the apiserver as ``sparkrun-gateway``) on loopback: one with the default deadline, one with a
deliberately short ``--wake-timeout D``. Two workloads run the engine stand-in on the process
nodes with its knobs ``SPARKRUN_ENGINE_LOAD_SECONDS=L`` (start-up) and
``SPARKRUN_ENGINE_WAKE_SECONDS=W`` (``/wake_up``). Per round, interleaved:

- ``sleeping``: the workload put to ``state: Sleeping`` (engine asleep, level 1); then a
  streamed chat completion through the gateway, request sent -> first content token. Beside it,
  the engine's own wake: ``/sleep`` then a timed ``/wake_up`` on the same engine pod, directly.
- ``zero``: the idle-zero workload (``spec.idle.zeroAfterSeconds``) at ``replicas: 0``; then
  the same request -> first token (the gateway writes the replicas back, the operator creates
  the pods, the engine starts). Beside it, the engine's own cold start: the stand-in started by
  hand on loopback with the same knobs, process spawn -> ``/health`` 200.
- ``retry-after``: the idle-zero workload at zero again; a request to the short-deadline gateway
  gets 503 at ``D`` with ``Retry-After`` (from the workload's own measured wakes in
  ``status.scaling.wakeSeconds``, written by the planner); at once a request to the other
  gateway measures the actual wait from that 503 until the model answers.

Goals: request -> first token at most 1.2x the engine's own + 1 s; ``Retry-After`` within 20%
of the actual wait. JSON goes to ``bench/results/wake-<time>.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from sparkrun_testbed import binaries, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import PROCESS_TAINT, NodePool, Topology

from ._common import Proc, environment, free_port, median, write_json
from ._operator import Operator

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
IW = "sparkrun.dev/v1alpha1"
NS = "wake-bench"
MODEL = "Qwen/Qwen3-0.6B"
SLEEPER, SLEEPY = "sleeper-wl", "bench-sleepy"
IDLER, COLD = "idler-wl", "bench-cold"
PLACE = {
    "nodeSelector": {PROCESS_TAINT["key"]: "process"},
    "tolerations": [
        {"key": PROCESS_TAINT["key"], "operator": "Equal", "value": "process", "effect": "NoSchedule"}
    ],
}


def process_testbed(workdir: Path) -> plane.Testbed:
    """A fresh testbed under ``workdir`` with two process nodes (tainted: only pods placed with
    :data:`PLACE` run there) and the project's CRDs (shared with ``bench.autoscale``)."""
    bins = binaries.locate(REPO).check()
    topology = Topology(pools=(NodePool(prefix="proc", count=2, process=True, taints=(PROCESS_TAINT,)),))
    return plane.Testbed.start(
        workdir / "testbed", bins, plane.Options(topology=topology, crd_dirs=(REPO / "crds",))
    )


def wait(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = probe()
        except (httpx.HTTPError, KeyError, IndexError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def knobs(load: float, wake: float) -> list[dict[str, str]]:
    return [
        {"name": "SPARKRUN_ENGINE_LOAD_SECONDS", "value": f"{load:g}"},
        {"name": "SPARKRUN_ENGINE_WAKE_SECONDS", "value": f"{wake:g}"},
    ]


def manifests(load: float, wake: float) -> list[dict[str, Any]]:
    engine = {"env": knobs(load, wake)}
    sleeper = {"model": {"name": MODEL, "servedName": SLEEPY}, "engine": {**engine, "enableSleepMode": True},
               "scheduling": PLACE}  # fmt: skip
    idler = {"model": {"name": MODEL, "servedName": COLD}, "engine": engine, "scheduling": PLACE,
             "replicas": 0, "idle": {"zeroAfterSeconds": 3600}}  # fmt: skip
    return [
        {"apiVersion": IW, "kind": "InferenceWorkload", "metadata": {"name": n, "namespace": NS}, "spec": s}
        for n, s in ((SLEEPER, sleeper), (IDLER, idler))
    ]


class Gateway(Proc):
    """``python -m sparkrun_operator.gateway --kubernetes`` on a loopback port."""

    def __init__(self, kubeconfig: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "sparkrun_operator.gateway", "--kubernetes",
                "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(self.port),
                "--log-level", "warning", *extra]  # fmt: skip
        super().__init__(argv, log)

    def model(self, served: str) -> dict[str, Any] | None:
        data = httpx.get(f"{self.url}/v1/models", timeout=5).json()["data"]
        return next((m for m in data if m["id"] == served), None)


def first_token(url: str, served: str) -> float:
    """Seconds from sending a streamed chat completion to its first content token (raises on non-200)."""
    body = {
        "model": served,
        "messages": [{"role": "user", "content": "wake"}],
        "max_tokens": 4,
        "stream": True,
    }
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as answer:
        if answer.status_code != 200:
            answer.read()
            raise RuntimeError(f"{served}: {answer.status_code} {answer.text[:200]}")
        for line in answer.iter_lines():
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                return time.perf_counter() - started
    raise RuntimeError(f"{served}: the stream ended without a token")


class Bench:
    def __init__(self, api: KubeApi, gateway: Gateway, short: Gateway, args: argparse.Namespace) -> None:
        self.api, self.gateway, self.short, self.args = api, gateway, short, args

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get(IW, "InferenceWorkload", name, namespace=NS) or {}

    def condition(self, name: str, type_: str) -> bool:
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return any(c["type"] == type_ and c["status"] == "True" for c in conditions)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        path = self.api.resource_path(IW, "InferenceWorkload", namespace=NS, name=name)
        headers = {"Content-Type": "application/merge-patch+json"}
        self.api.request(
            "PATCH", path, json={"spec": spec}, headers=headers, params={"fieldManager": "bench"}
        )

    def resting(self, name: str, served: str) -> None:
        """Until both gateways know ``served`` and see it not ready."""
        for gw in (self.gateway, self.short):

            def known_unready(g: Gateway = gw) -> bool:
                m = g.model(served)
                return m is not None and not m["ready"]

            wait(known_unready, 60, f"{served} not ready")

    def sleeping(self) -> dict[str, float]:
        wait(lambda: self.condition(SLEEPER, "Ready") and (m := self.gateway.model(SLEEPY)) and m["ready"],
             180, "the sleeper Ready")  # fmt: skip
        engine = self.get(SLEEPER)["status"]["endpoints"][0]["url"]
        httpx.post(f"{engine}/sleep", params={"level": "1"}, timeout=30).raise_for_status()
        started = time.perf_counter()
        httpx.post(f"{engine}/wake_up", timeout=60).raise_for_status()
        direct = time.perf_counter() - started
        self.patch(SLEEPER, {"state": "Sleeping"})
        wait(lambda: self.condition(SLEEPER, "Sleeping"), 60, "the sleeper asleep")
        self.resting(SLEEPER, SLEEPY)
        return {"gateway": first_token(self.gateway.url, SLEEPY), "engine": direct}

    def at_zero(self) -> None:
        self.patch(IDLER, {"replicas": 0})
        pods = f"sparkrun.dev/workload={IDLER}"
        wait(lambda: not self.api.list_items("v1", "Pod", namespace=NS, label_selector=pods), 120, "no pods")
        self.resting(IDLER, COLD)

    def zero(self) -> dict[str, float]:
        self.at_zero()
        through = first_token(self.gateway.url, COLD)
        return {"gateway": through, "engine": self.cold_start()}

    def cold_start(self) -> float:
        """The stand-in started by hand with the same knobs: spawn -> ``/health`` 200."""
        port = free_port()
        env = {**os.environ, **{k["name"]: k["value"] for k in knobs(self.args.load_seconds, 0)}}
        argv = [sys.executable, "-m", "sparkrun_testbed.engine", "serve", MODEL, "--served-model-name", COLD,
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/health"
            wait(lambda: httpx.get(url, timeout=1).status_code == 200, 120, "the bare engine healthy")
            return time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(10)

    def retry_after(self) -> dict[str, Any]:
        self.at_zero()
        history = ((self.get(IDLER).get("status") or {}).get("scaling") or {}).get("wakeSeconds") or {}
        body = {"model": COLD, "messages": [{"role": "user", "content": "wake"}], "max_tokens": 4}
        held = httpx.post(f"{self.short.url}/v1/chat/completions", json=body, timeout=120)
        answered_503 = time.perf_counter()
        if held.status_code != 503:
            raise RuntimeError(f"expected 503 at the short deadline, got {held.status_code}")
        after = float(held.headers["retry-after"])
        first_token(self.gateway.url, COLD)
        actual = time.perf_counter() - answered_503
        return {"retry_after": after, "actual": actual, "history": history.get("zero", []),
                "message": held.json()["error"]["message"]}  # fmt: skip


def _ratio_row(name: str, rows: list[dict[str, float]]) -> str:
    through = [r["gateway"] for r in rows]
    own = [r["engine"] for r in rows]
    ratios = [r["gateway"] / r["engine"] for r in rows]
    goal = all(r["gateway"] <= 1.2 * r["engine"] + 1.0 for r in rows)
    return (f"{name:<10} {median(through):8.2f} {min(through):7.2f} {max(through):7.2f}   {median(own):8.2f}"
            f"   {median(ratios):5.2f}x  {'met' if goal else 'MISSED'}")  # fmt: skip


def report(samples: dict[str, list[Any]]) -> None:
    head = f"{'wake from':<10} {'gw p50':>8} {'min':>7} {'max':>7}   {'engine':>8}"
    print(f"\n{head}   ratio   goal <= 1.2x + 1 s")
    print(_ratio_row("sleeping", samples["sleeping"]) + "   (engine: its /wake_up, on the pod)")
    print(_ratio_row("zero", samples["zero"]) + "   (engine: spawn -> /health 200, by hand)")
    print(f"\n{'Retry-After':>11} {'actual wait':>12} {'error':>7}   history (zero)")
    for r in samples["retry_after"]:
        error = (r["retry_after"] - r["actual"]) / r["actual"]
        print(f"{r['retry_after']:11.0f} {r['actual']:12.2f} {error:+7.0%}   {r['history']}")
    errors = [abs(r["retry_after"] - r["actual"]) / r["actual"] for r in samples["retry_after"]]
    if errors:
        print(f"median |error| {median(errors):.0%}, max {max(errors):.0%}; goal within 20%: "
              f"{'met' if max(errors) <= 0.2 else 'MISSED'}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wake")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-seconds", type=float, default=8.0, help="the engine's start-up knob")
    parser.add_argument("--wake-seconds", type=float, default=4.0, help="the engine's /wake_up knob")
    parser.add_argument("--deadline", type=float, default=3.0, help="the short gateway's --wake-timeout")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-wake-"))
    tb = process_testbed(workdir)
    samples: dict[str, list[Any]] = {"sleeping": [], "zero": [], "retry_after": []}
    started: list[Operator | Gateway] = []
    try:
        operator = Operator(tb.kubeconfig, workdir / "operator.log")
        started.append(operator)
        gateway = Gateway(tb.kubeconfig, workdir / "gateway.log")
        started.append(gateway)
        short = Gateway(tb.kubeconfig, workdir / "gateway-short.log", "--wake-timeout", f"{args.deadline:g}")
        started.append(short)
        with tb.api() as api:
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            for doc in manifests(args.load_seconds, args.wake_seconds):
                api.apply(doc, namespace=NS)
            bench = Bench(api, gateway, short, args)
            bench.sleeping()  # NB: a warm-up, not counted: the first pod of a node pays for cold imports
            bench.zero()
            for i in range(args.rounds):
                for kind, run in (
                    ("sleeping", bench.sleeping),
                    ("zero", bench.zero),
                    ("retry_after", bench.retry_after),
                ):
                    result = run()
                    samples[kind].append(result)
                    print(f"round {i}: {kind} {result}", flush=True)
        report(samples)
    finally:
        for proc in reversed(started):
            proc.stop()
        tb.stop()
    path = write_json("wake", {"args": vars(args), "environment": environment(), "samples": samples})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
