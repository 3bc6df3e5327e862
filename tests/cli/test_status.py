"""``sparkrun-k8s status`` as a person and a script run it, against the testbed with the real
operator: a workload (named unlike its model and served name) in a fresh namespace shows up
Ready; ``-o json`` parses with stable fields; ``-A`` lists two namespaces; ``--watch`` in a real
terminal redraws when a workload appears and ends on Ctrl-C with exit 130."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.cli.tmux import Terminal
from tests.operator.conftest import OperatorProcess, wait_condition, workload

pytestmark = pytest.mark.testbed

Run = Callable[..., subprocess.CompletedProcess[str]]
Factory = Callable[..., OperatorProcess]

MODEL = "Qwen/Qwen3-0.6B"
SERVED = "status-chat-served"


@pytest.fixture
def other_namespace(kube: KubeApi) -> Iterator[str]:
    name = f"t-status-other-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("v1", "Namespace", name)


def _ready_workload(kube: KubeApi, namespace: str, operator_factory: Factory, name: str) -> dict[str, Any]:
    operator_factory(namespace)
    kube.apply(workload(name, namespace, model={"name": MODEL, "servedName": SERVED}))
    return wait_condition(kube, namespace, name, "Ready", timeout=120)


def test_status_text_and_json(
    kube: KubeApi, namespace: str, operator_factory: Factory, sparkrun_k8s: Run, other_namespace: str
) -> None:
    obj = _ready_workload(kube, namespace, operator_factory, "stat-wl")
    # a second namespace: a workload no operator serves (no status yet)
    kube.apply(workload("stat-other", other_namespace, model={"name": MODEL, "servedName": "other-served"}))

    shown = sparkrun_k8s("status", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    line = next(row for row in shown.stdout.splitlines() if row.startswith("stat-wl "))
    assert line.split()[:4] == ["stat-wl", "Running", "1/1", SERVED]
    assert line.rstrip().endswith("Ready")
    assert "InferenceWorkloads" in shown.stdout
    assert "stat-other" not in shown.stdout

    as_json = sparkrun_k8s("status", "-n", namespace, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert {"workloads", "clusters", "caches", "benchmarks", "notes", "more"} <= set(data)
    (row,) = data["workloads"]
    assert row["name"] == "stat-wl"
    assert row["namespace"] == namespace
    assert (row["phase"], row["ready"], row["readyReplicas"], row["replicas"]) == ("Running", True, 1, 1)
    assert (row["served"], row["model"]) == (SERVED, MODEL)
    assert row["workloadId"] == obj["status"]["workloadId"]
    assert row["condition"] == "Ready"

    everywhere = sparkrun_k8s("status", "-A", "-o", "json")
    assert everywhere.returncode == 0, everywhere.stderr
    where = {(w["namespace"], w["name"]) for w in json.loads(everywhere.stdout)["workloads"]}
    assert {(namespace, "stat-wl"), (other_namespace, "stat-other")} <= where
    table = sparkrun_k8s("status", "-A")
    assert table.stdout.splitlines()[1].split()[:2] == ["NAMESPACE", "NAME"]
    assert any(r.split()[:2] == [other_namespace, "stat-other"] for r in table.stdout.splitlines())

    as_yaml = sparkrun_k8s("status", "-n", namespace, "-o", "yaml")
    assert as_yaml.returncode == 0
    assert f"served: {SERVED}" in as_yaml.stdout


def test_status_limit_says_more(kube: KubeApi, namespace: str, sparkrun_k8s: Run) -> None:
    for index in range(3):
        kube.apply(workload(f"lim-{index}", namespace, model={"name": MODEL, "servedName": f"lim-s{index}"}))
    shown = sparkrun_k8s("status", "-n", namespace, "--limit", "2")
    assert shown.returncode == 0, shown.stderr
    assert "... and 1 more (raise --limit)" in shown.stdout
    data = json.loads(sparkrun_k8s("status", "-n", namespace, "--limit", "2", "-o", "json").stdout)
    assert len(data["workloads"]) == 2
    assert data["more"] == {"workloads": 1}


def test_status_empty_namespace_and_unreachable(namespace: str, sparkrun_k8s: Run, tmp_path: Any) -> None:
    shown = sparkrun_k8s("status", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "InferenceWorkloads" not in shown.stdout
    assert "ModelCaches" not in shown.stdout
    # a kubeconfig pointing at nothing: exit 3, one line
    bad = tmp_path / "kubeconfig"
    bad.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n"
    )
    down = sparkrun_k8s("status", "-n", namespace, env={"KUBECONFIG": str(bad)})
    assert down.returncode == 3, (down.stdout, down.stderr)
    assert down.stderr.startswith("error: ")


def test_status_watch_in_a_terminal(
    kube: KubeApi, namespace: str, operator_factory: Factory, terminal: Terminal, kubeconfig: Any
) -> None:
    operator_factory(namespace)
    terminal.start(
        f"sparkrun-k8s status --watch -n {namespace}",
        env={"KUBECONFIG": str(kubeconfig), "PATH": _venv_path()},
    )
    terminal.wait_for("Ctrl-C to stop", timeout=60)
    assert "watch-wl" not in terminal.screen()
    kube.apply(workload("watch-wl", namespace, model={"name": MODEL, "servedName": "watch-served"}))
    terminal.wait_for("watch-wl", timeout=30)
    screen = terminal.wait_for("watch-served", timeout=60)
    assert "InferenceWorkloads" in screen
    wait_condition(kube, namespace, "watch-wl", "Ready", timeout=120)
    ready = _wait_line(terminal, "watch-wl", "Ready")
    assert "1/1" in ready
    terminal.keys("C-c")
    assert terminal.exit_code(timeout=20) == 130
    assert "Traceback" not in terminal.history()


def _wait_line(terminal: Terminal, name: str, text: str, timeout: float = 30.0) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in terminal.screen().splitlines():
            if line.startswith(name + " ") and text in line:
                return line
        time.sleep(0.2)
    raise AssertionError(f"no line {name} ... {text} on the screen:\n{terminal.screen()}")


def _venv_path() -> str:
    import os
    import sys
    from pathlib import Path

    return f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


def test_status_a_section_you_may_not_list(
    testbed: Any, kube: KubeApi, namespace: str, sparkrun_k8s: Run, tmp_path: Any
) -> None:
    """A user who may list workloads only: the other sections say so, the command still works."""
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": namespace}}
    )
    rule = {"apiGroups": ["sparkrun.dev"], "resources": ["inferenceworkloads"], "verbs": ["get", "list"]}
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "viewer", "namespace": namespace},
            "rules": [rule],
        }
    )
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "viewer", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
        }
    )
    kube.apply(workload("seen-wl", namespace, model={"name": MODEL, "servedName": "seen-served"}))
    token = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/viewer/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).json()["status"]["token"]
    config = tmp_path / "viewer.kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "tb",
                        "cluster": {
                            "server": testbed.server,
                            "certificate-authority": str(testbed.ca_file()),
                        },
                    }
                ],
                "users": [{"name": "viewer", "user": {"token": token}}],
                "contexts": [
                    {"name": "viewer", "context": {"cluster": "tb", "user": "viewer", "namespace": namespace}}
                ],
                "current-context": "viewer",
            }
        )
    )
    shown = sparkrun_k8s("status", env={"KUBECONFIG": str(config)})
    assert shown.returncode == 0, shown.stderr
    assert "seen-wl" in shown.stdout
    assert f"ModelCaches: you may not list modelcaches in namespace {namespace}" in shown.stdout
    assert "InferenceClusters: you may not list inferenceclusters" in shown.stdout
    data = json.loads(sparkrun_k8s("status", "-o", "json", env={"KUBECONFIG": str(config)}).stdout)
    assert [w["name"] for w in data["workloads"]] == ["seen-wl"]
    assert set(data["notes"]) == {"clusters", "caches", "benchmarks"}
