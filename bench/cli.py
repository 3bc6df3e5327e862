"""The CLI (issue 33): what a ``sparkrun-k8s`` command costs, beside ``kubectl`` doing the same.

On a fresh testbed (no operator: the commands only read), N InferenceWorkloads are created in 10
namespaces (specs like the examples: model, served name, aliases, engine settings, topology,
replicas), and about half get a status through the status subresource the way the operator
writes one (the planner's status, then for most of them Ready with ready replicas, endpoints and
a startup timeline; some Starting, some Degraded with a last failure). Then, per round, each
command runs once as a child process, interleaved (the order rotates by one each round), and its
wall time and peak RSS (GNU ``time``'s ``%M``) are recorded:

- ``sparkrun-k8s --help`` (the command's cold start) vs ``kubectl --help``
- ``sparkrun-k8s status -A`` (the default page, 200 per section) vs ``kubectl get iw -A``
- ``sparkrun-k8s status -A --limit 5000 -o json`` vs ``kubectl get iw -A -o json``
- ``sparkrun-k8s describe NAME -n NS`` vs ``kubectl describe iw NAME -n NS``
- ``sparkrun-k8s validate FILE`` (offline) vs ``kubectl apply --dry-run=server -f FILE``, FILE
  holding 100 InferenceWorkloads, 10 of them with errors (a bad name, a topology that breaks a
  CEL rule): both report every error
- the floors of a Python command: ``python -c pass`` and ``python -c 'import <the status verb's
  module>'`` (interpreter start, then the imports before the first API call)

One untimed round first (the files a user's second command finds in the page cache). Medians,
and p90 with --rounds >= 5, are printed as a table and written to ``bench/results/cli-*.json``.

Run: ``python -m bench.cli [--workloads 1000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import _common
from bench._operator import API, REPO, WORKLOADS, call, client, start_testbed
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import Observation, plan

NAMESPACES = 10
PREFIX = "clibench"
VALIDATE_OBJECTS = 100
VALIDATE_INVALID = 10
MODELS = (
    ("Qwen/Qwen3-0.6B", "qwen3-small"),
    ("Qwen/Qwen3-8B", "qwen3-mid"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-mid"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-mid"),
)
SPARKRUN = REPO / ".venv" / "bin" / "sparkrun-k8s"
#: the module the status verb imports (what runs before its first API call)
STATUS_MODULE = "sparkrun_operator.cli.status"
#: GNU time (Debian's ``time`` package) measures each command's peak RSS
TIME = "/usr/bin/time"


def namespace(i: int) -> str:
    return f"{PREFIX}-{i % NAMESPACES}"


def spec(i: int) -> dict[str, Any]:
    model, served = MODELS[i % len(MODELS)]
    body: dict[str, Any] = {
        "model": {
            "name": model,
            "revision": "main",
            "servedName": f"{served}-{i:04d}",
            "aliases": [f"alias-{i:04d}"],
        },
        "engine": {"maxModelLen": 8192, "gpuMemoryUtilization": 0.85, "enableSleepMode": i % 3 == 0},
        "topology": {"nodes": 1, "gpusPerNode": 1 + i % 2, "tensorParallel": 1 + i % 2},
        "replicas": 1 + i % 2,
    }
    return body


def workload(name: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def _condition(
    kind: str, status: str, reason: str, message: str, when: str, generation: int
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
        "observedGeneration": generation,
    }


def status_of(created: dict[str, Any], i: int, now: dt.datetime) -> dict[str, Any]:
    """The status the operator would write (the planner's, for the spec as created), then made
    Ready (most), Starting (every 10th) or Degraded with a failure (every 25th)."""
    meta = created["metadata"]
    decided = plan(
        Observation(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            generation=meta["generation"],
            spec=InferenceWorkloadSpec.model_validate(created["spec"]),
            status=InferenceWorkloadStatus(),
            now=now,
        )
    )
    status: dict[str, Any] = decided.status.model_dump(by_alias=True, exclude_none=True, mode="json")
    generation = meta["generation"]
    replicas = created["spec"]["replicas"]

    def stamp(seconds: int) -> str:
        return (now + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    startup: list[dict[str, Any]] = [{"stage": "accepted", "time": stamp(0)}]
    others = [
        c for c in status.get("conditions", []) if c["type"] not in ("Ready", "Progressing", "Degraded")
    ]
    if i % 10 == 4:  # still starting: scheduled, waiting for the engine
        startup += [
            {"stage": "cacheReady", "time": stamp(1)},
            {"stage": "scheduled", "time": stamp(2), "replica": 0},
        ]
        status.update(phase="Starting", replicas=replicas, readyReplicas=0)
        conditions = [
            _condition(
                "Ready", "False", "EngineStarting", "the engine is loading the model", stamp(0), generation
            ),
            _condition("Progressing", "True", "Creating", "replica 0 is starting", stamp(2), generation),
        ]
    else:
        for replica in range(replicas):
            startup += [
                {"stage": "cacheReady", "time": stamp(1), "replica": replica},
                {"stage": "scheduled", "time": stamp(2), "replica": replica},
                {"stage": "running", "time": stamp(5), "replica": replica},
                {"stage": "ready", "time": stamp(48), "replica": replica},
            ]
        url = f"http://{meta['name']}-{{r}}.{meta['namespace']}.svc:8000/v1"
        status.update(
            phase="Running",
            replicas=replicas,
            readyReplicas=replicas,
            endpoints=[{"replica": r, "url": url.format(r=r), "ready": True} for r in range(replicas)],
        )
        conditions = [
            _condition("Ready", "True", "Serving", "every replica serves", stamp(48), generation),
            _condition(
                "Progressing",
                "False",
                "Complete",
                "the current revision is rolled out",
                stamp(48),
                generation,
            ),
        ]
        if i % 25 == 0:  # a replica failed once and came back short
            status.update(phase="Degraded", readyReplicas=replicas - 1)
            status["lastFailure"] = {
                "reason": "OOMKilled",
                "message": "the engine ran out of memory",
                "time": stamp(60),
                "replica": replicas - 1,
                "rank": 0,
                "role": "leader",
                "exitCode": 137,
            }
            conditions.append(
                _condition(
                    "Degraded",
                    "True",
                    "ReplicaFailed",
                    "replica restarted after OOMKilled",
                    stamp(60),
                    generation,
                )
            )
    status["conditions"] = conditions + others
    status["startup"] = startup
    status["observedGeneration"] = generation
    return status


async def populate(kubeconfig: Path, count: int) -> None:
    """Namespaces, ``count`` workloads, and a status for every other one."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    async with client(kubeconfig, limits=16) as http:
        for n in range(NAMESPACES):
            await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": f"{PREFIX}-{n}"}})
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            ns, name = namespace(i), f"chat-{i:04d}"
            async with gate:
                created = await call(http, "POST", WORKLOADS.format(ns=ns), json=workload(name, ns, spec(i)))
                if i % 2 == 0:
                    await call(
                        http,
                        "PATCH",
                        f"{WORKLOADS.format(ns=ns)}/{name}/status",
                        json={"status": status_of(created, i, now)},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )

        await asyncio.gather(*(one(i) for i in range(count)))


def validate_file(path: Path) -> None:
    """:data:`VALIDATE_OBJECTS` workloads for namespace 0 (new names: a server dry run creates),
    the last :data:`VALIDATE_INVALID` each with two errors (a bad name, a topology that breaks a
    CEL rule)."""
    docs = []
    for i in range(VALIDATE_OBJECTS):
        body = spec(i)
        name = f"dry-{i:03d}"
        if i >= VALIDATE_OBJECTS - VALIDATE_INVALID:
            name = f"Dry_{i:03d}"
            body["topology"] = {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 1, "pipelineParallel": 1}
        docs.append(workload(name, namespace(0), body))
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


@dataclass
class Command:
    label: str
    argv: list[str]
    pair: str  # the row both sides of a comparison share


@dataclass
class Run:
    wall_s: float
    maxrss_mib: float
    rc: int
    out_bytes: int


def run_one(command: Command, env: dict[str, str], out: Path) -> Run:
    """Run ``command`` under GNU time (its peak RSS: ``wait4`` on a child of this process would
    report this process's own, which a fork-and-exec child inherits as its high-water mark)."""
    rss = out.with_suffix(".rss")
    with out.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.run(
            [TIME, "-f", "%M", "-o", str(rss), *command.argv], stdout=sink, stderr=subprocess.STDOUT, env=env
        )
        wall = time.perf_counter() - start
    # NB: a failed command's first line is "Command exited with non-zero status N"
    kib = int(rss.read_text().split()[-1])
    return Run(wall, kib / 1024, proc.returncode, out.stat().st_size)


def commands(kubectl: str, target: tuple[str, str], file: Path) -> list[Command]:
    ns, name = target
    me = [str(SPARKRUN)]
    return [
        Command("sparkrun-k8s --help", [*me, "--help"], "--help"),
        Command("kubectl --help", [kubectl, "--help"], "--help"),
        Command("sparkrun-k8s status -A", [*me, "status", "-A"], "list, text"),
        Command("kubectl get iw -A", [kubectl, "get", "iw", "-A"], "list, text"),
        Command(
            "sparkrun-k8s status -A --limit 5000 -o json",
            [*me, "status", "-A", "--limit", "5000", "-o", "json"],
            "list, json",
        ),
        Command("kubectl get iw -A -o json", [kubectl, "get", "iw", "-A", "-o", "json"], "list, json"),
        Command("sparkrun-k8s describe NAME -n NS", [*me, "describe", name, "-n", ns], "describe"),
        Command("kubectl describe iw NAME -n NS", [kubectl, "describe", "iw", name, "-n", ns], "describe"),
        Command(
            f"sparkrun-k8s validate ({VALIDATE_OBJECTS} objects)", [*me, "validate", str(file)], "validate"
        ),
        Command(
            f"kubectl apply --dry-run=server ({VALIDATE_OBJECTS} objects)",
            [kubectl, "apply", "--dry-run=server", "-f", str(file)],
            "validate",
        ),
        Command("python -c pass", [sys.executable, "-c", "pass"], "floor"),
        Command(
            f"python -c 'import {STATUS_MODULE}'", [sys.executable, "-c", f"import {STATUS_MODULE}"], "floor"
        ),
    ]


def measure(cmds: list[Command], env: dict[str, str], rounds: int, workdir: Path) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {c.label: [] for c in cmds}
    for r in range(rounds + 1):  # round 0: warm-up, not kept
        order = cmds[r % len(cmds) :] + cmds[: r % len(cmds)]
        for command in order:
            result = run_one(command, env, workdir / "out.txt")
            if r:
                runs[command.label].append(result)
            elif command.label.startswith("sparkrun-k8s status -A --limit"):
                check_json(workdir / "out.txt")
        print(f"round {r}{' (warm-up)' if not r else ''} done", flush=True)
    return runs


def check_json(path: Path) -> None:
    """The JSON status lists every workload (the run measures what it claims)."""
    body = json.loads(path.read_text())
    print(f"status -o json lists {len(body['workloads'])} workloads", flush=True)


def summarize(cmds: list[Command], runs: dict[str, list[Run]], rounds: int) -> list[dict[str, Any]]:
    rows = []
    for command in cmds:
        samples = runs[command.label]
        walls = [s.wall_s for s in samples]
        rss = [s.maxrss_mib for s in samples]
        row: dict[str, Any] = {
            "command": command.label,
            "pair": command.pair,
            "n": len(samples),
            "wall_s_p50": _common.median(walls),
            "rss_mib_p50": _common.median(rss),
            "exit_codes": sorted({s.rc for s in samples}),
            "out_bytes": samples[-1].out_bytes if samples else 0,
        }
        if rounds >= 5:
            row["wall_s_p90"] = _common.pct(walls, 0.9)
            row["rss_mib_p90"] = _common.pct(rss, 0.9)
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], rounds: int) -> str:
    p90 = rounds >= 5
    head = "| command | wall p50 (s) |" + (" wall p90 (s) |" if p90 else "") + " peak RSS p50 (MiB) |"
    head += (" RSS p90 (MiB) |" if p90 else "") + " exit | output |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = [f"`{row['command']}`", f"{row['wall_s_p50']:.2f}"]
        if p90:
            cells.append(f"{row['wall_s_p90']:.2f}")
        cells.append(f"{row['rss_mib_p50']:.0f}")
        if p90:
            cells.append(f"{row['rss_mib_p90']:.0f}")
        cells += [",".join(map(str, row["exit_codes"])), _size(row["out_bytes"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2, help="KWOK nodes (nothing is scheduled)")
    args = parser.parse_args()
    kubectl = shutil.which("kubectl")
    if kubectl is None or not SPARKRUN.exists() or not Path(TIME).exists():
        print(f"needs kubectl on PATH, {SPARKRUN} (make venv) and {TIME} (apt-get install time)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    t0 = time.perf_counter()
    tb = start_testbed(workdir, nodes=args.nodes)
    try:
        print(f"testbed up in {time.perf_counter() - t0:.1f} s", flush=True)
        t1 = time.perf_counter()
        asyncio.run(populate(tb.kubeconfig, args.workloads))
        populated = time.perf_counter() - t1
        print(f"{args.workloads} workloads in {NAMESPACES} namespaces in {populated:.1f} s", flush=True)
        file = workdir / "validate.yaml"
        validate_file(file)
        env = {**os.environ, "KUBECONFIG": str(tb.kubeconfig)}
        cmds = commands(kubectl, (namespace(0), "chat-0000"), file)
        runs = measure(cmds, env, args.rounds, workdir)
    finally:
        tb.stop()
    rows = summarize(cmds, runs, args.rounds)
    print(table(rows, args.rounds))
    version = subprocess.run([kubectl, "version", "--client", "-o", "yaml"], capture_output=True, text=True)
    path = _common.write_json(
        "cli",
        {
            "inputs": vars(args),
            "environment": {
                **_common.environment(["rich", "argcomplete"]),
                "kubectl": yaml.safe_load(version.stdout or "{}"),
            },
            "result": {"populate_s": populated, "rows": rows},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
