"""Autoscaler reaction benchmark (issue 27): how long a load step takes to bring a ScaleUp, the new
replica Ready, and, once the load stops, the ScaleDown, at two settings side by side.

``python -m bench.autoscale [--rounds N] [--settings S:W[:D],...] [--streams N] [--max-num-seqs M]``

Starts its own testbed (two process nodes, the project's CRDs) and the operator (``operator run
--standalone``). One InferenceWorkload per setting runs the engine stand-in on the process nodes
with ``--max-num-seqs M`` and a per-token delay (``SPARKRUN_ENGINE_TOKEN_SECONDS``), so that
``N`` concurrent requests leave ``N - M`` waiting, and ``spec.autoscaling`` (mode Operator,
``minReplicas 1``, ``maxReplicas 3``, ``target.waitingPerReplica 2``, ``scrapeIntervalSeconds
S``, ``scaleUpWindowSeconds W``, ``scaleDownWindowSeconds D``, a short cooldown). Per round,
interleaved setting by setting, from one replica Ready and quiet:

- after a random pause within one scrape interval (so that the step falls at any point of the
  autoscaler's scrape cycle), a load step: ``N`` clients (the ``openai`` client, asyncio) each
  sending streamed chat completions back to back, straight to the leader of the workload's first
  replica (its ``status.endpoints`` URL);
- step -> queue: the step's first request until the engine's own ``vllm:num_requests_waiting``
  shows the queue (read from its ``/metrics``: the load generator's share of the reaction);
- step -> decision: until a watch event of the workload shows ``spec.replicas`` raised (the
  ScaleUp written by ``sparkrun-autoscaler``); goal ``S + W`` (the first scrape that sees the
  queue falls within one interval, the window then has to pass);
- step -> Ready: until a watch event shows ``status.readyReplicas`` reach the new count; split
  (a watch of the pods) into decision -> new pod, new pod -> pod Ready, pod Ready ->
  ``readyReplicas``; beside it, the engine's own start: the stand-in started by hand on loopback
  with the same knobs, spawn -> ``/health`` 200 (after the round, not under load);
- the load held for a random part of one more interval (so that the stop, too, falls anywhere in
  the cycle), then stopped (every stream closed): stop -> ScaleDown (``spec.replicas`` back to 1,
  from the watch); goal ``S + D``. Then the removed replica's pod gone before the next round.

The load generator's CPU seconds are printed beside the load's duration (it shares the CPUs).

Prints p50/min/max per setting against its goals; JSON goes to ``bench/results/autoscale-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from openai import APIError, AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from ._common import environment, free_port, median, write_json
from ._operator import Operator, call, client, watching
from .wake import PLACE, process_testbed

NS = "autoscale-bench"
MODEL = "Qwen/Qwen3-0.6B"
WORKLOADS = f"/apis/sparkrun.dev/v1alpha1/namespaces/{NS}/inferenceworkloads"
PODS = f"/api/v1/namespaces/{NS}/pods"
AUTOSCALER = "sparkrun-autoscaler"
MAX_REPLICAS = 3
WAITING_PER_REPLICA = 2


@dataclass(frozen=True)
class Setting:
    """One autoscaling setting: scrape interval, up and down windows (seconds)."""

    scrape: int
    window: int
    down: int

    @property
    def name(self) -> str:
        return f"as-s{self.scrape}-w{self.window}"

    @property
    def goal_up(self) -> int:
        return self.scrape + self.window

    @property
    def goal_down(self) -> int:
        return self.scrape + self.down

    @property
    def label(self) -> str:
        return f"S={self.scrape} W={self.window} D={self.down}"


def parse_settings(text: str) -> list[Setting]:
    """``S:W[:D],...`` (``D`` defaults to ``W``)."""
    settings = []
    for item in text.split(","):
        parts = [int(p) for p in item.split(":")]
        if len(parts) not in (2, 3) or parts[0] < 1 or min(parts) < 0:
            raise argparse.ArgumentTypeError(f"{item!r}: want S:W or S:W:D, S >= 1")
        settings.append(Setting(parts[0], parts[1], parts[2] if len(parts) == 3 else parts[1]))
    return settings


def engine_env(args: argparse.Namespace) -> dict[str, str]:
    """The engine stand-in's knobs: how fast a slot frees."""
    return {
        "SPARKRUN_ENGINE_TOKEN_SECONDS": f"{args.token_seconds:g}",
        "SPARKRUN_ENGINE_OUTPUT_TOKENS": str(args.output_tokens),
    }


def manifest(setting: Setting, args: argparse.Namespace) -> dict[str, Any]:
    engine = {
        "args": ["--max-num-seqs", str(args.max_num_seqs)],
        "env": [{"name": k, "value": v} for k, v in engine_env(args).items()],
    }
    autoscaling = {
        "mode": "Operator",
        "minReplicas": 1,
        "maxReplicas": MAX_REPLICAS,
        "target": {"waitingPerReplica": WAITING_PER_REPLICA},
        "scrapeIntervalSeconds": setting.scrape,
        "scaleUpWindowSeconds": setting.window,
        "scaleDownWindowSeconds": setting.down,
        "cooldownSeconds": args.cooldown,
    }
    spec = {"model": {"name": MODEL, "servedName": setting.name}, "engine": engine,
            "autoscaling": autoscaling, "scheduling": PLACE}  # fmt: skip
    return {"apiVersion": "sparkrun.dev/v1alpha1", "kind": "InferenceWorkload",
            "metadata": {"name": setting.name, "namespace": NS}, "spec": spec}  # fmt: skip


def replicas(obj: dict[str, Any]) -> int:
    return int((obj.get("spec") or {}).get("replicas", 1))


def ready_replicas(obj: dict[str, Any]) -> int:
    return int((obj.get("status") or {}).get("readyReplicas") or 0)


def pod_ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def replicas_owners(obj: dict[str, Any]) -> list[str]:
    """The field managers owning ``spec.replicas``."""
    return sorted(
        entry["manager"]
        for entry in obj["metadata"].get("managedFields") or []
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    )


class Tracker:
    """Every watch event of the benchmark's workloads, stamped with ``perf_counter`` on arrival."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._news = asyncio.Event()

    def on_event(self, kind: str, obj: dict[str, Any], at: float) -> None:
        if kind != "DELETED":
            self.events.append((at, obj))
            self._news.set()

    def mark(self) -> int:
        return len(self.events)

    def latest(self, name: str) -> dict[str, Any]:
        return next((o for _, o in reversed(self.events) if o["metadata"]["name"] == name), {})

    def last_index(self, name: str) -> int:
        """The index of the newest event of ``name`` (0 when none yet)."""
        return next((i for i in range(len(self.events) - 1, -1, -1)
                     if self.events[i][1]["metadata"]["name"] == name), 0)  # fmt: skip

    async def first(
        self, since: int, name: str | None, want: Callable[[dict[str, Any]], bool], limit: float, what: str
    ) -> tuple[float, dict[str, Any]]:
        """The first event of ``name`` (any object: ``None``) from index ``since`` on that satisfies
        ``want``: its arrival time and object (waits for it, at most ``limit`` seconds)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        index = since
        while True:
            while index < len(self.events):
                at, obj = self.events[index]
                index += 1
                if name in (None, obj["metadata"]["name"]) and want(obj):
                    return at, obj
            self._news.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {limit:.0f} s waiting for {name}: {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), remaining)


class Load:
    """``streams`` clients sending streamed chat completions back to back to one engine until
    :meth:`stop`; the answers they completed and the errors they got."""

    def __init__(self, url: str, served: str, streams: int) -> None:
        self.served = served
        self.done = self.errors = 0
        self.ai = AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=120)
        self.tasks = [asyncio.create_task(self._client()) for _ in range(streams)]

    async def _client(self) -> None:
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count to ten."}]
        while True:
            try:
                stream = await self.ai.chat.completions.create(
                    model=self.served, messages=messages, stream=True
                )
                async for _ in stream:
                    pass
                self.done += 1
            except (APIError, httpx.HTTPError):
                self.errors += 1
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.ai.close()


async def cold_start(args: argparse.Namespace) -> float:
    """The engine stand-in started by hand on loopback with the workload's knobs and arguments:
    process spawn -> ``/health`` 200 (what a new replica's engine costs without Kubernetes)."""
    port = free_port()
    argv = ["-m", "sparkrun_testbed.engine", "serve", MODEL, "--served-model-name", "cold", "--host",
            "127.0.0.1", "--port", str(port), "--max-num-seqs", str(args.max_num_seqs)]  # fmt: skip
    env = {**os.environ, **engine_env(args)}
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient() as http:
            while time.perf_counter() - started < 120:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"http://127.0.0.1:{port}/health", timeout=1)).status_code == 200:
                        return time.perf_counter() - started
                await asyncio.sleep(0.05)
        raise TimeoutError("the engine started by hand was not healthy in 120 s")
    finally:
        proc.terminate()
        await proc.wait()


async def waiting_of(http: httpx.AsyncClient, url: str) -> float:
    """The engine's ``vllm:num_requests_waiting``, summed over its series."""
    text = (await http.get(f"{url}/metrics", timeout=5)).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_waiting")
    )


class Bench:
    def __init__(self, kube: httpx.AsyncClient, args: argparse.Namespace) -> None:
        self.kube, self.args = kube, args
        self.tracker, self.pods_seen = Tracker(), Tracker()
        self.local = httpx.AsyncClient()

    async def pods(self, name: str) -> int:
        found = await call(self.kube, "GET", PODS, params={"labelSelector": f"sparkrun.dev/workload={name}"})
        return len(found.get("items") or [])

    async def settled(self, setting: Setting) -> dict[str, Any]:
        """Until the workload has one replica, Ready, and one pod; the workload then."""

        def one_ready(o: dict[str, Any]) -> bool:
            return (
                replicas(o) == 1 and ready_replicas(o) == 1 and bool((o.get("status") or {}).get("endpoints"))
            )

        name = setting.name
        _, obj = await self.tracker.first(self.tracker.last_index(name), name, one_ready, 240, "one Ready")
        deadline = time.monotonic() + 120
        while await self.pods(setting.name) != 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{setting.name}: still more than one pod")
            await asyncio.sleep(0.2)
        latest = self.tracker.latest(setting.name)
        return latest if replicas(latest) == 1 and ready_replicas(latest) == 1 else obj

    async def queue_seen(self, url: str, started: float) -> float | None:
        """Seconds from ``started`` until the engine shows the step's queue (None: not in 10 s)."""
        want = self.args.streams - self.args.max_num_seqs
        while time.perf_counter() - started < 10:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if await waiting_of(self.local, url) >= want:
                    return time.perf_counter() - started
            await asyncio.sleep(0.05)
        return None

    async def round(self, setting: Setting) -> dict[str, Any]:
        obj = await self.settled(setting)
        url = obj["status"]["endpoints"][0]["url"]
        pause = random.uniform(0, setting.scrape)
        await asyncio.sleep(pause)
        mark, pods_mark = self.tracker.mark(), self.pods_seen.mark()
        cpu = time.process_time()
        started = time.perf_counter()
        load = Load(url, setting.name, self.args.streams)
        try:
            queue = await self.queue_seen(url, started)
            decided_at, obj = await self.tracker.first(
                mark, setting.name, lambda o: replicas(o) > 1, 3 * setting.goal_up + 60, "ScaleUp"
            )
            to = replicas(obj)
            owners = replicas_owners(obj)
            ready_at, _ = await self.tracker.first(
                mark, setting.name, lambda o: ready_replicas(o) >= to, 240, f"{to} replicas Ready"
            )
            hold = random.uniform(0, setting.scrape)
            await asyncio.sleep(hold)
        finally:
            stopped, mark = time.perf_counter(), self.tracker.mark()
            await load.stop()
        cpu = time.process_time() - cpu
        down_at, _ = await self.tracker.first(
            mark, setting.name, lambda o: replicas(o) == 1, 3 * setting.goal_down + 60, "ScaleDown"
        )
        up_decision = await self.decision(setting, "ScaleUp")
        pod_created, pod_ready_at = await self.new_pod(setting, pods_mark)
        return {
            "setting": setting.label, "pause_s": pause, "hold_s": hold, "queue_s": queue,
            "decision_s": decided_at - started,
            "to_replicas": to, "replicas_owners": owners, "ready_s": ready_at - started,
            "down_s": down_at - stopped, "load_s": stopped - started, "answers": load.done,
            "errors": load.errors, "loadgen_cpu_s": cpu, "up_decision": up_decision,
            "pod_created_s": pod_created - started, "pod_ready_s": pod_ready_at - started,
            "cold_start_s": await cold_start(self.args),
        }  # fmt: skip

    async def new_pod(self, setting: Setting, since: int) -> tuple[float, float]:
        """When the watch saw the scale-up's new pod created, and Ready."""

        def mine(o: dict[str, Any]) -> bool:
            return (o["metadata"].get("labels") or {}).get("sparkrun.dev/workload") == setting.name

        created, pod = await self.pods_seen.first(since, None, mine, 5, "the new pod")
        ready, _ = await self.pods_seen.first(since, pod["metadata"]["name"], pod_ready, 5, "Ready")
        return created, ready

    def on_event(self, kind: str, obj: dict[str, Any], at: float) -> None:
        (self.pods_seen if obj.get("kind") == "Pod" else self.tracker).on_event(kind, obj, at)

    async def decision(self, setting: Setting, action: str) -> dict[str, Any] | None:
        """The ScaleUp's ``status.scaling.lastDecision`` as the planner wrote it, if the status
        still shows it (the ScaleDown replaces it)."""
        for _, obj in reversed(self.tracker.events):
            if obj["metadata"]["name"] != setting.name:
                continue
            last = ((obj.get("status") or {}).get("scaling") or {}).get("lastDecision") or {}
            if last.get("action") == action:
                return dict(last)
        return None


async def run(kubeconfig: Path, settings: list[Setting], args: argparse.Namespace) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = []
    async with client(kubeconfig) as kube:
        await call(kube, "POST", "/api/v1/namespaces", json={"metadata": {"name": NS}})
        bench = Bench(kube, args)
        async with watching(kube, [WORKLOADS, PODS], bench.on_event):
            for setting in settings:
                await call(kube, "POST", WORKLOADS, json=manifest(setting, args))
            try:
                for _ in range(args.warmup):  # NB: the operator's first scale-up and its pod, not counted
                    print(f"warm-up: {await bench.round(settings[0])}", flush=True)
                for i in range(args.rounds):
                    for setting in settings:
                        result = await bench.round(setting)
                        rounds.append(result)
                        shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()
                                 if k != "up_decision"}  # fmt: skip
                        print(f"round {i}: {shown}", flush=True)
            finally:
                await bench.local.aclose()
    return rounds


def _spread(values: list[float]) -> str:
    if not values:
        return f"{'-':>22}"
    return f"{median(values):7.2f} ({min(values):5.2f}-{max(values):5.2f})"


def _verdict(values: list[float], goal: float) -> str:
    return "met" if values and max(values) <= goal else "MISSED"


def report(settings: list[Setting], rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Print the tables; their rows, for the JSON."""
    by = {s.label: [r for r in rounds if r["setting"] == s.label] for s in settings}

    def of(label: str, key: str) -> list[float]:
        return [r[key] for r in by[label] if r[key] is not None]

    print(f"\n{'setting':<16} {'n':>2}  {'step->queue':>11}  {'step->decision p50 (min-max)':>28}  "
          f"{'goal S+W':>8}  {'stop->ScaleDown p50 (min-max)':>29}  {'goal S+D':>8}")  # fmt: skip
    for s in settings:
        up, down, queue = of(s.label, "decision_s"), of(s.label, "down_s"), of(s.label, "queue_s")
        print(f"{s.label:<16} {len(by[s.label]):>2}  {median(queue):11.2f}  {_spread(up):>22}"
              f" {_verdict(up, s.goal_up):>6}  {s.goal_up:>7}  {_spread(down):>22}"
              f" {_verdict(down, s.goal_down):>6}  {s.goal_down:>8}")  # fmt: skip
    print(f"\n{'setting':<16} {'step->Ready p50 (min-max)':>25}  {'decision->Ready p50 (min-max)':>29}  "
          f"{'engine by hand, spawn->/health':>30}")  # fmt: skip
    for s in settings:
        start = [r["ready_s"] - r["decision_s"] for r in by[s.label]]
        print(f"{s.label:<16} {_spread(of(s.label, 'ready_s')):>25}  {_spread(start):>29}  "
              f"{_spread(of(s.label, 'cold_start_s')):>30}")  # fmt: skip
    print(f"\nwhere decision->Ready goes (p50 s): {'decision->pod':>13} {'pod->pod Ready':>14} "
          f"{'pod Ready->readyReplicas':>24}")  # fmt: skip
    for s in settings:
        mine = by[s.label]
        steps = [
            median([r[b] - r[a] for r in mine])
            for a, b in (
                ("decision_s", "pod_created_s"),
                ("pod_created_s", "pod_ready_s"),
                ("pod_ready_s", "ready_s"),
            )
        ]
        print(f"{s.label:<35} {steps[0]:13.2f} {steps[1]:14.2f} {steps[2]:24.2f}")
    rows = []
    for s in settings:
        keys = ("queue_s", "decision_s", "pod_created_s", "pod_ready_s", "ready_s", "down_s", "cold_start_s")
        figures = {k: {"p50": median(v), "min": min(v), "max": max(v)} for k in keys if (v := of(s.label, k))}
        rows.append({"setting": s.label, "n": len(by[s.label]), **figures, "goal_up": s.goal_up,
                     "up": _verdict(of(s.label, "decision_s"), s.goal_up), "goal_down": s.goal_down,
                     "down": _verdict(of(s.label, "down_s"), s.goal_down)})  # fmt: skip
    cpu = sum(r["loadgen_cpu_s"] for r in rounds)
    held = sum(r["load_s"] for r in rounds) or 1.0
    errors = sum(r["errors"] for r in rounds)
    print(f"\nload generator: {cpu:.1f} CPU s over {held:.0f} s of load ({cpu / held:.0%} of a core), "
          f"{sum(r['answers'] for r in rounds)} answers, {errors} errors")  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscale")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per setting")
    parser.add_argument("--settings", type=parse_settings, default=parse_settings("2:4,5:10"),
                        help="S:W[:D],... scrape interval, up window, down window (default: W)")  # fmt: skip
    parser.add_argument("--streams", type=int, default=6, help="concurrent streams of the load step")
    parser.add_argument("--max-num-seqs", type=int, default=2, help="the engine's running slots")
    parser.add_argument("--token-seconds", type=float, default=0.05, help="the engine's per-token delay")
    parser.add_argument("--output-tokens", type=int, default=32, help="tokens of each answer")
    parser.add_argument("--cooldown", type=int, default=1, help="spec.autoscaling.cooldownSeconds")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rounds of the first setting")
    args = parser.parse_args()
    settings: list[Setting] = args.settings
    workdir = Path(tempfile.mkdtemp(prefix="bench-autoscale-"))
    tb = process_testbed(workdir)
    operator: Operator | None = None
    try:
        operator = Operator(tb.kubeconfig, workdir / "operator.log")
        rounds = asyncio.run(run(tb.kubeconfig, settings, args))
    finally:
        if operator is not None:
            operator.stop()
        tb.stop()
    rows = report(settings, rounds)
    inputs = {**vars(args), "settings": [s.label for s in settings]}
    payload = {"args": inputs, "environment": environment(["openai"]), "rows": rows, "rounds": rounds}
    print(f"\nwrote {write_json('autoscale', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
