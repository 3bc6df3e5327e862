"""A newcomer's day with the CLI alone, as docs/cli.md "A day with the CLI" tells it, on the
testbed with the real operator and the workload on PROCESS nodes (the vLLM stand-in really
serves, sleeps and wakes).

In a namespace ``team-tour`` made fresh for it (and deleted at the end): ``run`` a model until
Ready (then the ``curl`` line it printed, run by a shell, answers with the served name),
``status`` lists it Ready, ``describe`` shows its startup timeline, ``logs`` its engine's lines
prefixed by replica and role, ``sleep`` puts it to sleep (``status`` says Sleeping), ``wake``
brings it back (Ready, and it answers again), ``stop`` deletes it (``status`` no longer lists it).
The workload is named ``chat``, unlike its model (``Qwen/Qwen3-0.6B``) and served name
(``assistant``). Each command is the real console script with the testbed's kubeconfig.

To refresh the docs' output: ``SPARKRUN_TOUR_CAPTURE=DIR`` makes the test write each step's
command and what it printed (standard error, then standard output) to ``DIR/NN-verb.txt``::

    SPARKRUN_TOUR_CAPTURE=/tmp/tour CI=true SPARKRUN_TESTBED_BIN="$(hack/testbed-bin.sh --print)" \\
        .venv/bin/pytest -q -p no:cacheprovider tests/cli/test_tour.py

The ``--set scheduling...`` options that select and tolerate the testbed's process nodes are
left out of the captured command lines (docs/cli.md says so).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.cli.test_run import ON_PROCESS_NODES
from tests.operator.conftest import API, condition, netns_network

pytestmark = pytest.mark.testbed
__all__ = ["netns_network"]  # the fixture, for this module's test

Run = Callable[..., subprocess.CompletedProcess[str]]
NAMESPACE = "team-tour"
WORKLOAD = "chat"  # NB: unlike its model and its served name
MODEL = "Qwen/Qwen3-0.6B"
SERVED = "assistant"


@pytest.fixture
def tour_namespace(kube: KubeApi) -> Iterator[str]:
    """``team-tour``, fresh (the name the docs show), deleted at the end."""
    assert kube.get("v1", "Namespace", NAMESPACE) is None, f"namespace {NAMESPACE} exists already"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    try:
        kube.wait(
            lambda: kube.get("v1", "ServiceAccount", "default", namespace=NAMESPACE),
            timeout=30,
            what=f"ServiceAccount {NAMESPACE}/default",
        )
        yield NAMESPACE
    finally:
        kube.delete("v1", "Namespace", NAMESPACE)


class Tour:
    """Runs each step and, with ``SPARKRUN_TOUR_CAPTURE``, keeps what it printed."""

    def __init__(self, sparkrun_k8s: Run) -> None:
        self.run_cli = sparkrun_k8s
        self.step = 0
        where = os.environ.get("SPARKRUN_TOUR_CAPTURE")
        self.capture = Path(where) if where else None
        if self.capture is not None:
            self.capture.mkdir(parents=True, exist_ok=True)

    def keep(self, name: str, shown: str, done: subprocess.CompletedProcess[str]) -> None:
        self.step += 1
        if self.capture is not None:
            text = f"$ {shown}\n{done.stderr}{done.stdout}"
            (self.capture / f"{self.step:02d}-{name}.txt").write_text(text)

    def cli(
        self, *args: str, hidden: tuple[str, ...] = (), timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        done = self.run_cli(*args, *hidden, timeout=timeout)
        self.keep(args[0], shlex.join(["sparkrun-k8s", *args]), done)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def shell(self, name: str, line: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60, check=False)
        self.keep(name, line, done)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        return done


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def _answer(tour: Tour, curl: str) -> None:
    answer = tour.shell("curl", curl)
    assert json.loads(answer.stdout)["model"] == SERVED


def _workload(kube: KubeApi) -> dict[str, Any] | None:
    return kube.get(API, "InferenceWorkload", WORKLOAD, namespace=NAMESPACE)


def test_a_day_with_the_cli(
    kube: KubeApi,
    tour_namespace: str,
    operator_factory: Callable[..., Any],
    netns_network: None,
    sparkrun_k8s: Run,
) -> None:
    operator_factory(tour_namespace)
    tour = Tour(sparkrun_k8s)
    ns = ("-n", tour_namespace)

    # 1. run: the startup timeline until Ready, then where it answers and a curl line that does
    sleepy = ("--set", "engine.enableSleepMode=true")
    started = tour.cli(
        "run", MODEL, "--name", WORKLOAD, *ns, "--served-name", SERVED, *sleepy,
        hidden=("--timeout", "240", *ON_PROCESS_NODES),
        timeout=300,
    )  # fmt: skip
    out = started.stdout
    assert f"created inferenceworkload {WORKLOAD} in {tour_namespace} (model {MODEL})" in out
    for stage in ("accepted", "scheduled", "running", "ready"):
        assert f"✓ {stage}" in out, out
    assert f"inferenceworkload {WORKLOAD} is Ready after" in out
    assert f"  model  {SERVED}" in out
    curl = next(line.strip() for line in out.splitlines() if line.strip().startswith("curl "))
    _answer(tour, curl)

    # 2. status: chat is Ready; describe: its startup timeline
    listed = tour.cli("status", *ns)
    row = next(r for r in _rows(listed.stdout) if r[0] == WORKLOAD)
    assert row[1:4] == ["Running", "1/1", SERVED], listed.stdout
    assert row[-1] == "Ready", listed.stdout
    described = tour.cli("describe", WORKLOAD, *ns)
    shown = described.stdout
    assert shown.startswith(f"InferenceWorkload {tour_namespace}/{WORKLOAD}\n"), shown
    assert f"Model:       {MODEL} (gateway names: {SERVED})" in shown
    timeline = shown.split("\nStartup:\n", 1)[1].split("\n\n", 1)[0]
    stages = [r[0] for r in _rows(timeline)[1:]]
    assert stages[0] == "accepted", timeline
    assert stages[-1] == "ready", timeline

    # 3. logs: every rank's engine lines, prefixed by replica and role
    logs = tour.cli("logs", WORKLOAD, *ns)
    lines = logs.stdout.splitlines()
    assert lines, logs.stdout
    assert all(line.startswith("[r0/leader] ") for line in lines), logs.stdout
    assert any(f"serving {MODEL} as {SERVED}" in line for line in lines), logs.stdout
    assert any("engine ready" in line for line in lines), logs.stdout

    # 4. sleep (status says Sleeping), wake (Ready, and it answers again)
    asleep = tour.cli("sleep", WORKLOAD, *ns, timeout=240)
    assert asleep.stdout.startswith(f"{WORKLOAD}: sleeping (level 1) in "), asleep.stdout
    found = _workload(kube)
    assert condition(found, "Sleeping")["status"] == "True"  # type: ignore[index]
    listed = tour.cli("status", *ns)
    row = next(r for r in _rows(listed.stdout) if r[0] == WORKLOAD)
    assert row[1] == "Sleeping", listed.stdout
    awake = tour.cli("wake", WORKLOAD, *ns, timeout=240)
    assert awake.stdout.startswith(f"{WORKLOAD}: awake, Ready in "), awake.stdout
    found = _workload(kube)
    assert condition(found, "Ready")["status"] == "True"  # type: ignore[index]
    _answer(tour, curl)

    # 5. stop: gone, and status no longer lists it
    stopped = tour.cli("stop", WORKLOAD, *ns, timeout=240)
    assert stopped.stdout.startswith(f"{WORKLOAD}: stopped in "), stopped.stdout
    assert _workload(kube) is None
    listed = tour.cli("status", *ns)
    assert all(r[0] != WORKLOAD for r in _rows(listed.stdout)), listed.stdout
