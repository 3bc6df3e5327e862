"""``sparkrun-k8s run`` as a person uses it, on the testbed with the real operator and pods that
run as processes on process nodes (the vLLM stand-in).

- a model by Hub id: the command (a pipe: one line per change) logs the stages up to ``ready``,
  prints where the model answers and a curl line, and that line, run by a shell, gets a chat
  completion naming the served name; a second ``run`` with the same name is refused (exit 5) and
  leaves the first workload alone;
- in a terminal (tmux): the live display advances through the stages; Ctrl-C in the middle exits
  130, the screen says the workload was deleted and the apiserver has none left; with
  ``--keep-on-interrupt`` the workload stays and the screen says how to follow and delete it;
- with a Service labelled as the chart's gateway, the printed ``kubectl create --raw`` line
  reaches the model through the apiserver's Service proxy;
- a start whose engine fails ends with exit 1 and the failure (reason, pod, exit code, the
  engine's last lines); one slower than ``--timeout`` ends with exit 1, the workload kept;
- a Recipe's name becomes ``spec.recipe`` (``--detach -o json``), an unknown ``@registry/name``
  is exit 4.

The workloads select and tolerate the process nodes through ``--set`` (what a user writes for any
spec field); the engine's simulated load time keeps a start in progress long enough to interrupt.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed import plane, topology
from sparkrun_testbed.kubeapi import KubeApi
from tests.cli.conftest import SPARKRUN_K8S
from tests.cli.tmux import Terminal
from tests.operator.conftest import API, OperatorProcess, netns_network

pytestmark = pytest.mark.testbed

__all__ = ["netns_network"]

Factory = Callable[..., OperatorProcess]
Run = Callable[..., subprocess.CompletedProcess[str]]

ON_PROCESS_NODES = [
    "--set",
    "scheduling.nodeSelector=" + json.dumps({topology.PROCESS_RUNTIME_LABEL: "process"}),
    "--set",
    "scheduling.tolerations="
    + json.dumps(
        [
            {
                "key": topology.PROCESS_TAINT["key"],
                "operator": "Equal",
                "value": topology.PROCESS_TAINT["value"],
                "effect": topology.PROCESS_TAINT["effect"],
            }
        ]
    ),
]


def _slow_start(seconds: int) -> list[str]:
    env = [{"name": "SPARKRUN_ENGINE_LOAD_SECONDS", "value": str(seconds)}]
    return ["--set", "engine.env=" + json.dumps(env)]


def _workload(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API, "InferenceWorkload", name, namespace=namespace)


def test_run_a_model_until_ready_then_the_curl_line_works(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None, sparkrun_k8s: Run
) -> None:
    operator_factory(namespace)
    done = sparkrun_k8s(
        "run",
        "Qwen/Qwen3-0.6B",
        "--name",
        "cli-run-w",
        "--served-name",
        "cli-run-chat",
        "-n",
        namespace,
        "--timeout",
        "240",
        *ON_PROCESS_NODES,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"created inferenceworkload cli-run-w in {namespace} (model Qwen/Qwen3-0.6B)" in out
    for stage in ("accepted", "scheduled", "running", "ready"):
        assert f"✓ {stage}" in out, out
    assert "inferenceworkload cli-run-w is Ready after" in out
    assert "  model  cli-run-chat" in out
    curl = next(line.strip() for line in out.splitlines() if line.strip().startswith("curl "))
    answer = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60, check=False)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["model"] == "cli-run-chat"
    obj = _workload(kube, namespace, "cli-run-w")
    assert obj is not None
    assert any(f.get("manager") == "sparkrun-k8s" for f in obj["metadata"]["managedFields"])

    again = sparkrun_k8s("run", "Qwen/Qwen3-0.6B", "--name", "cli-run-w", "-n", namespace, "--detach")
    assert again.returncode == 5
    assert "inferenceworkload cli-run-w already exists" in again.stderr
    after = _workload(kube, namespace, "cli-run-w")
    assert after is not None
    assert after["metadata"]["uid"] == obj["metadata"]["uid"]


def _start_run(terminal: Terminal, testbed: plane.Testbed, namespace: str, name: str, *extra: str) -> None:
    argv = [SPARKRUN_K8S, "run", "Qwen/Qwen3-0.6B", "--name", name, "-n", namespace, *ON_PROCESS_NODES]
    terminal.start(
        shlex.join([*argv, *_slow_start(120), *extra]), env={"KUBECONFIG": str(testbed.kubeconfig)}
    )


def test_ctrl_c_in_the_middle_of_run_deletes_what_it_created(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    netns_network: None,
    terminal: Terminal,
    testbed: plane.Testbed,
) -> None:
    operator_factory(namespace)
    _start_run(terminal, testbed, namespace, "cli-int-w")
    first = terminal.wait_for("▸ ", timeout=60)
    current = [line.split("▸ ", 1)[1].split()[0] for line in first.splitlines() if "▸ " in line]
    later = terminal.wait_for("✓ running", timeout=120)
    assert "▸ ready" in later, later
    assert current != ["ready"], first  # the display advanced through stages before this one
    assert "elapsed" in later
    assert _workload(kube, namespace, "cli-int-w") is not None
    terminal.keys("C-c")
    screen = terminal.wait_for(
        "deleted workload cli-int-w (interrupted before Ready)", timeout=60, whole=True
    )
    assert terminal.exit_code() == 130, screen
    deadline = time.monotonic() + 30
    while _workload(kube, namespace, "cli-int-w") is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _workload(kube, namespace, "cli-int-w") is None


def test_ctrl_c_with_keep_on_interrupt_keeps_the_workload(
    kube: KubeApi, namespace: str, operator_factory: Factory, terminal: Terminal, testbed: plane.Testbed
) -> None:
    operator_factory(namespace)
    _start_run(terminal, testbed, namespace, "cli-keep-w", "--keep-on-interrupt")
    terminal.wait_for("✓ accepted", timeout=60)
    terminal.keys("C-c")
    screen = terminal.wait_for("--keep-on-interrupt", timeout=30, whole=True)
    assert f"kept inferenceworkload cli-keep-w in {namespace}" in screen
    assert f"kubectl delete inferenceworkload cli-keep-w -n {namespace}" in screen
    assert terminal.exit_code() == 130
    assert _workload(kube, namespace, "cli-keep-w") is not None


def test_a_recipe_name_becomes_spec_recipe(
    kube: KubeApi, namespace: str, crds: list[str], sparkrun_k8s: Run
) -> None:
    kube.apply(
        {
            "apiVersion": API,
            "kind": "Recipe",
            "metadata": {"name": "cli-recipe-r", "namespace": namespace},
            "spec": {"recipeVersion": "2", "model": "Qwen/Qwen3-0.6B", "runtime": "vllm"},
        }
    )
    done = sparkrun_k8s(
        "run", "cli-recipe-r", "--name", "cli-recipe-w", "-n", namespace, "--detach", "-o", "json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["spec"]["recipe"] == {"name": "cli-recipe-r"}
    assert "model" not in result["spec"]
    assert "created inferenceworkload cli-recipe-w" in done.stderr
    missing = sparkrun_k8s("run", "@nowhere/qwen", "-n", namespace, "--detach")
    assert missing.returncode == 4, missing.stderr
    assert "Unknown recipe" in missing.stderr


def test_through_a_gateway_service_the_printed_kubectl_line_works(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    netns_network: None,
    sparkrun_k8s: Run,
    testbed: plane.Testbed,
) -> None:
    """A Service labelled as the chart's gateway (here: in front of the workload's own leader, which
    answers the same OpenAI routes) is found, and the request printed goes through the apiserver's
    Service proxy with the kubeconfig's credentials."""
    operator_factory(namespace)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "cli-gw-gateway",
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/part-of": "sparkrun-operator",
                    "app.kubernetes.io/component": "gateway",
                },
            },
            "spec": {
                "selector": {"sparkrun.dev/workload": "cli-gw-w", "sparkrun.dev/role": "leader"},
                "ports": [{"name": "http", "port": 8080, "targetPort": 8000}],
            },
        }
    )
    done = sparkrun_k8s(
        "run",
        "Qwen/Qwen3-0.6B",
        "--name",
        "cli-gw-w",
        "--served-name",
        "cli-gw-chat",
        "-n",
        namespace,
        *ON_PROCESS_NODES,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    proxy = f"/api/v1/namespaces/{namespace}/services/cli-gw-gateway:http/proxy"
    assert "  url    https://" in done.stdout
    assert f"{proxy}\n" in done.stdout
    assert "  via    the gateway, through the apiserver's Service proxy" in done.stdout
    line = next(x.strip() for x in done.stdout.splitlines() if "kubectl create --raw" in x)
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    answer = subprocess.run(
        ["bash", "-c", line],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "PATH": path},
    )
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["model"] == "cli-gw-chat"


def test_a_failing_start_is_exit_1_with_the_failure_and_a_slow_one_times_out(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None, sparkrun_k8s: Run
) -> None:
    operator_factory(namespace)
    env = [
        {"name": "SPARKRUN_ENGINE_FAIL_RANK", "value": "0"},
        {"name": "SPARKRUN_ENGINE_FAIL_MESSAGE", "value": "cli-test: CUDA out of memory"},
    ]
    failed = sparkrun_k8s(
        "run",
        "Qwen/Qwen3-0.6B",
        "--name",
        "cli-fail-w",
        "-n",
        namespace,
        "--timeout",
        "150",
        "--set",
        "engine.env=" + json.dumps(env),
        *ON_PROCESS_NODES,
        timeout=200,
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert (
        "inferenceworkload cli-fail-w is Degraded after" in failed.stdout
        or "is Failed after" in failed.stdout
    )
    assert "cli-test: CUDA out of memory" in failed.stdout
    assert f"more: sparkrun-k8s logs cli-fail-w -n {namespace}" in failed.stdout

    slow = sparkrun_k8s(
        "run",
        "Qwen/Qwen3-0.6B",
        "--name",
        "cli-slow-w",
        "-n",
        namespace,
        "--timeout",
        "5",
        *_slow_start(120),
        *ON_PROCESS_NODES,
        timeout=60,
    )
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "inferenceworkload cli-slow-w is still starting after" in slow.stdout
    assert _workload(kube, namespace, "cli-slow-w") is not None
