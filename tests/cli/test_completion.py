"""Shell completion as a person uses it: a real bash in a terminal (tmux), completion enabled
the documented way (``eval "$(register-python-argcomplete sparkrun-k8s)"``), TAB typed, the
screen read. Against the testbed: the names offered are the cluster's workloads (and, for run, Recipes)."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.cli.tmux import Terminal

pytestmark = pytest.mark.testbed

VENV_BIN = str(Path(sys.executable).parent)
WORKLOAD = "tabbed-workload"
RECIPE = "tabrecipe-qwen"


@pytest.fixture
def namespace(kube: KubeApi, crds: list[str]) -> Iterator[str]:
    name = f"t-complete-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.create(
        {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": WORKLOAD, "namespace": name},
            "spec": {"model": {"name": "complete-org/complete-model", "servedName": "complete-served"}},
        },
        namespace=name,
    )
    kube.create(
        {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "Recipe",
            "metadata": {"name": RECIPE, "namespace": name},
            "spec": {"recipeVersion": "2", "model": "complete-org/recipe-model", "runtime": "vllm"},
        },
        namespace=name,
    )
    yield name
    kube.delete("v1", "Namespace", name)


def _bash(terminal: Terminal, kubeconfig: Path, home: Path) -> None:
    env = {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(home),
        "TERM": "xterm",
    }
    terminal.start("bash --norc --noprofile -i", env=env)
    terminal.keys("PS1='$ '", "Enter")
    terminal.keys('eval "$(register-python-argcomplete sparkrun-k8s)" && echo completion-on', "Enter")
    terminal.wait_for("\ncompletion-on", timeout=30)


# NB: the screen's lines lose their trailing blanks (capture-pane): a completed word is matched
# without the space bash types after it.
def test_tab_completes_verbs_and_workload_names(
    terminal: Terminal, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    _bash(terminal, kubeconfig, tmp_path)
    terminal.keys("sparkrun-k8s lo", "Tab")
    terminal.wait_for("$ sparkrun-k8s logs", timeout=30)
    terminal.keys("C-u")

    # describe's completer: the workload of the namespace on the line
    terminal.keys(f"sparkrun-k8s describe -n {namespace} tab", "Tab")
    terminal.wait_for(f"$ sparkrun-k8s describe -n {namespace} {WORKLOAD}", timeout=30)
    terminal.keys("C-u")

    # the shared completer (cli/complete.py) on rollout's NAME
    terminal.keys(f"sparkrun-k8s rollout history -n {namespace} tab", "Tab")
    terminal.wait_for(f"$ sparkrun-k8s rollout history -n {namespace} {WORKLOAD}", timeout=30)
    terminal.keys("C-u")

    # run's MODEL|RECIPE: the namespace's Recipes
    terminal.keys(f"sparkrun-k8s run -n {namespace} tabr", "Tab")
    terminal.wait_for(f"$ sparkrun-k8s run -n {namespace} {RECIPE}", timeout=30)
    terminal.keys("C-u")

    # an option of a verb, then nothing offered for another namespace's names
    terminal.keys("sparkrun-k8s validate --out", "Tab")
    terminal.wait_for("$ sparkrun-k8s validate --output", timeout=30)
    terminal.keys("C-u")
    terminal.keys("sparkrun-k8s rollout history -n default tab", "Tab", "Tab")
    terminal.keys(" ; echo done-tabbing", "Enter")
    screen = terminal.wait_for("\ndone-tabbing", timeout=30)
    assert WORKLOAD not in screen.split(f"-n {namespace} {WORKLOAD}")[-1]
