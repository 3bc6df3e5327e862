"""``sparkrun-k8s logs`` as a person uses it, on the testbed with the real operator and a two-node
replica whose pods run as processes (the vLLM stand-in: the leader and one worker rank).

- ``logs -f`` started in a terminal before any pod exists says it waits, then follows both ranks
  as they start, each line prefixed ``[r0/leader]`` or ``[r0/worker-1]``, and prints a line the
  engine writes later (put to sleep through its own endpoint); Ctrl-C ends it with 130;
- ``logs`` (no -f) prints every rank's lines prefixed; ``--role worker`` only the worker's;
  ``--tail 1`` one line per pod; ``-o json`` a JSON object per line;
- a workload that does not exist is exit 4; one with no pods yet is said so (exit 0); a TAB after
  ``logs -n NS cli-i`` offers the namespace's workload of that prefix.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.cli.conftest import SPARKRUN_K8S
from tests.cli.test_run import ON_PROCESS_NODES
from tests.cli.tmux import Terminal
from tests.operator.conftest import API, OperatorProcess, netns_network, wait_condition
from tests.unit.test_cli_logs import complete

pytestmark = pytest.mark.testbed

__all__ = ["netns_network"]

Factory = Callable[..., OperatorProcess]
Run = Callable[..., subprocess.CompletedProcess[str]]


def test_logs_of_every_rank_followed_and_printed(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    netns_network: None,
    terminal: Terminal,
    testbed: plane.Testbed,
    sparkrun_k8s: Run,
) -> None:
    created = sparkrun_k8s(
        "run",
        "Qwen/Qwen3-0.6B",
        "--name",
        "cli-logs-w",
        "--served-name",
        "cli-logs-chat",
        "-n",
        namespace,
        "--detach",
        "--set",
        "topology={nodes: 2, gpusPerNode: 1, tensorParallel: 2}",
        "--set",
        "engine.enableSleepMode=true",
        *ON_PROCESS_NODES,
    )
    assert created.returncode == 0, created.stderr
    follow = [SPARKRUN_K8S, "logs", "cli-logs-w", "-n", namespace, "-f"]
    terminal.start(shlex.join(follow), env={"KUBECONFIG": str(testbed.kubeconfig), "NO_COLOR": "1"})
    terminal.wait_for("no pods of cli-logs-w yet; waiting for them", timeout=30)
    operator_factory(namespace)
    terminal.wait_for("[r0/leader] ", timeout=150, whole=True)
    terminal.wait_for("[r0/worker-1] ", timeout=60, whole=True)
    obj = wait_condition(kube, namespace, "cli-logs-w", "Ready", timeout=150)
    seen = terminal.wait_for("engine ready", timeout=30, whole=True)
    assert "\x1b[" not in seen
    url = obj["status"]["endpoints"][0]["url"]
    assert httpx.post(f"{url}/sleep", timeout=10).status_code == 200
    seen = terminal.wait_for("engine is sleeping (level 1)", timeout=30, whole=True)
    sleeping = [line for line in seen.splitlines() if "engine is sleeping" in line]
    assert sleeping[0].startswith("[r0/leader] "), sleeping
    terminal.keys("C-c")
    assert terminal.exit_code(timeout=30) == 130

    done = sparkrun_k8s("logs", "cli-logs-w", "-n", namespace)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines
    assert all(line.startswith(("[r0/leader] ", "[r0/worker-1] ")) for line in lines), lines
    assert any(line.startswith("[r0/leader] ") and "engine is sleeping" in line for line in lines)
    assert any(line.startswith("[r0/worker-1] ") for line in lines)
    workers = sparkrun_k8s("logs", "cli-logs-w", "-n", namespace, "--role", "worker")
    assert workers.stdout.splitlines()
    assert all(line.startswith("[r0/worker-1] ") for line in workers.stdout.splitlines())
    last = sparkrun_k8s("logs", "cli-logs-w", "-n", namespace, "--tail", "1")
    assert len(last.stdout.splitlines()) == 2, last.stdout
    records = [
        json.loads(line)
        for line in sparkrun_k8s("logs", "cli-logs-w", "-n", namespace, "-o", "json").stdout.splitlines()
    ]
    assert {(r["replica"], r["role"], r["rank"]) for r in records} == {(0, "leader", 0), (0, "worker", 1)}


def test_logs_of_a_missing_workload_and_of_one_without_pods(
    kube: KubeApi, namespace: str, crds: list[str], sparkrun_k8s: Run, kubeconfig: Path, tmp_path: Path
) -> None:
    missing = sparkrun_k8s("logs", "cli-nope-w", "-n", namespace)
    assert missing.returncode == 4
    assert f"no InferenceWorkload cli-nope-w in {namespace}" in missing.stderr
    kube.apply(
        {
            "apiVersion": API,
            "kind": "InferenceWorkload",
            "metadata": {"name": "cli-idle-w", "namespace": namespace},
            "spec": {"model": {"name": "Qwen/Qwen3-0.6B", "servedName": "cli-idle-chat"}},
        }
    )
    idle = sparkrun_k8s("logs", "cli-idle-w", "-n", namespace)
    assert idle.returncode == 0, idle.stderr
    assert idle.stdout == ""
    assert f"no pods of cli-idle-w in {namespace} yet" in idle.stderr
    offered = complete(f"sparkrun-k8s logs -n {namespace} cli-i", tmp_path, KUBECONFIG=str(kubeconfig))
    assert offered == ["cli-idle-w"]
