"""``sparkrun-k8s bench`` as a user runs it, against the testbed with the real operator: a
workload served by the engine stand-in on process nodes, benchmarks whose pods run the real
llama-benchy (``runtime.bench``) with the tokenizer and text from the local Hub.

``bench run --wait`` in a real terminal (tmux), interrupted with Ctrl-C, exits 130 and says the
benchmark runs on and how to cancel it. ``bench run --wait`` creates the InferenceBenchmark (the
spec benchmarks.run's code makes), follows it scenario by scenario on stderr and prints the
results (exit 0); after the engine gets five times slower to its first token, a second run's
``show`` carries the operator's comparison and ``bench compare`` (text and JSON) calls the second
run's TTFT worse, marking the first best; an unknown benchmark is exit 4.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_testbed import topology
from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import CORPUS_FILE, TOKENIZER
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.cli.conftest import SPARKRUN_K8S
from tests.cli.tmux import Terminal
from tests.operator.conftest import API, OperatorProcess, netns_network, wait_condition, workload  # noqa: F401
from tests.operator.test_modelcache import ON_PROCESS_NODES, _node_ip

pytestmark = pytest.mark.testbed

Run = Callable[..., subprocess.CompletedProcess[str]]
TARGET = "cli-bench-target"
SERVED = "cli-bench-served"
TTFT, TOKEN = 0.05, 0.01


@pytest.fixture
def bench_hub(kube: KubeApi, netns_network: None) -> Iterator[Hub]:  # noqa: F811
    with Hub(default_repos(lfs_mib=0.01), host=_node_ip(kube)) as hub:
        yield hub


def _engine(ttft: float) -> dict[str, Any]:
    return {
        "maxModelLen": 8192,
        "env": [
            {"name": "SPARKRUN_ENGINE_TTFT_SECONDS", "value": str(ttft)},
            {"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": str(TOKEN)},
        ],
    }


def _slower(kube: KubeApi, namespace: str, served: dict[str, Any]) -> None:
    """Five times the TTFT; wait until the new revision's replica alone serves."""
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=TARGET),
        json={"spec": {"engine": _engine(5 * TTFT)}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    revision, old_url = served["status"]["revision"], served["status"]["endpoints"][0]["url"]

    def rolled() -> bool | None:
        w = kube.get(API, "InferenceWorkload", TARGET, namespace=namespace) or {}
        endpoints = (w.get("status") or {}).get("endpoints") or []
        moved = w.get("status", {}).get("revision") != revision
        return (
            moved and [e["ready"] for e in endpoints] == [True] and endpoints[0]["url"] != old_url
        ) or None

    kube.wait(rolled, timeout=120, what="the new revision serving alone")


def _run_args(namespace: str, hub: Hub) -> list[str]:
    taint = topology.PROCESS_TAINT
    return [
        "-n", namespace, "--via", "Endpoint", "--tokenizer", TOKENIZER, "--hf-endpoint", hub.url,
        "--arg", f"book_url={hub.url}/{TOKENIZER}/resolve/main/{CORPUS_FILE}",
        "--arg", "skip_coherence=true",  # the stand-in knows no capital of France
        "--arg", "pp=[64]", "--arg", "tg=[16]", "--arg", "runs=2", "--concurrency", "1",
        "--runner-node-selector", f"{topology.PROCESS_RUNTIME_LABEL}=process",
        "--runner-toleration", f"{taint['key']}={taint['value']}:{taint['effect']}",
    ]  # fmt: skip


def test_run_show_and_compare(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    bench_hub: Hub,
    sparkrun_k8s: Run,
    terminal: Terminal,
    testbed: Testbed,
) -> None:
    operator_factory(namespace)
    args = _run_args(namespace, bench_hub)
    kube.apply(
        workload(
            TARGET,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": SERVED},
            engine=_engine(TTFT),
            scheduling=ON_PROCESS_NODES,
        )
    )
    # Ctrl-C while waiting: the benchmark runs on, and the user is told how to read or cancel it
    env = {"KUBECONFIG": str(testbed.kubeconfig), "COLUMNS": str(terminal.width)}
    terminal.start(
        shlex.join([SPARKRUN_K8S, "bench", "run", TARGET, "--name", "cli-interrupted", "--wait", *args]),
        env=env,
    )
    terminal.wait_for("created; waiting for it", timeout=60)
    terminal.keys("C-c")
    assert terminal.exit_code(timeout=30) == 130
    told = terminal.history()
    assert f"InferenceBenchmark {namespace}/cli-interrupted keeps running" in told
    assert f"  cancel it: kubectl -n {namespace} delete inferencebenchmark cli-interrupted\n" in told
    assert kube.get(API, "InferenceBenchmark", "cli-interrupted", namespace=namespace) is not None
    kube.delete(API, "InferenceBenchmark", "cli-interrupted", namespace=namespace)

    served = wait_condition(kube, namespace, TARGET, "Ready", timeout=120)

    first = sparkrun_k8s("bench", "run", TARGET, "--name", "cli-first", "--wait", *args, timeout=300)
    print(first.stderr, first.stdout)
    assert first.returncode == 0, (first.stdout, first.stderr)
    assert f"InferenceBenchmark {namespace}/cli-first created; waiting" in first.stderr
    assert "Running: scenario d0-c1 (0/1 done)" in first.stderr
    assert first.stdout.startswith(f"InferenceBenchmark {namespace}/cli-first: Succeeded\n")
    assert f"InferenceWorkload {TARGET} (via Endpoint)" in first.stdout
    assert re.search(r"^  d0-c1\s+2\s+0\s+[\d.]+/[\d.]+/[\d.]+", first.stdout, re.MULTILINE), first.stdout

    _slower(kube, namespace, served)
    second = sparkrun_k8s(
        "bench", "run", TARGET, "--name", "cli-second", "--wait", "-o", "json", *args, timeout=300
    )
    assert second.returncode == 0, (second.stdout, second.stderr)
    data = json.loads(second.stdout)
    assert data["phase"] == "Succeeded"
    assert data["comparison"]["baseline"] == "cli-first"

    shown = sparkrun_k8s("bench", "show", "cli-second", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)
    assert "Against cli-first (this / baseline):" in shown.stdout

    compared = sparkrun_k8s("bench", "compare", "cli-first", "cli-second", "-n", namespace)
    assert compared.returncode == 0, compared.stderr
    print(compared.stdout)
    ttft_line = next(line for line in compared.stdout.splitlines() if "TTFT p50 (ms)" in line)
    assert re.search(r"\(\+\d+\.\d% worse\)$", ttft_line), ttft_line
    assert re.search(r"TTFT p50 \(ms\)\s+[\d.]+ \*", ttft_line), ttft_line  # the first is the best
    as_json = json.loads(
        sparkrun_k8s("bench", "compare", "cli-first", "cli-second", "-n", namespace, "-o", "json").stdout
    )
    ttft = next(r for r in as_json["scenarios"][0]["metrics"] if r["metric"] == "ttft_p50_ms")
    assert ttft["verdict"][1] == "worse"
    assert ttft["best"] == ["cli-first"]
    assert ttft["delta_percent"][1] > 50

    missing = sparkrun_k8s("bench", "show", "cli-nothing", "-n", namespace)
    assert missing.returncode == 4
    assert "cli-nothing not found" in missing.stderr
