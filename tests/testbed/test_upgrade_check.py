"""``sparkrun-k8s upgrade --check`` against the testbed's real kube-apiserver (issue 28, item 5).

The real CLI runs as a subprocess with the testbed's kubeconfig. Objects stored by the apiserver
(a workload with a status the apiserver wrote through the status subresource, a Recipe) pass
the unchanged chart (no blocking finding of ours; exit 0 unless another module's leftovers on the
shared testbed block); a copy of the chart whose workload CRD allows only 8-character
names rejects the workload (exit 1), naming object, field path and message, in text and JSON.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from tests.corpus import VALID
from tests.deploy.changed_chart import TIGHT_NAME, tightened_chart
from tests.deploy.chart import CHART

pytestmark = pytest.mark.testbed

WORKLOAD = "upgrade-check-target"
CLI = [sys.executable, "-m", "sparkrun_operator.cli.main", "upgrade", "--check"]


def _example(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in VALID if d["kind"] == kind))


@pytest.fixture(scope="module")
def stored(kube: KubeApi, crds: list[str]) -> Iterator[str]:
    """A namespace holding a workload (with a status) and a Recipe, as the apiserver stored them."""
    namespace = "t-upgrade-check"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    workload = _example("InferenceWorkload")
    workload["metadata"]["name"] = WORKLOAD
    assert len(WORKLOAD) > TIGHT_NAME
    kube.apply(workload, namespace=namespace)
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "Pending",
        "message": "waiting",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }
    status = {"status": {"observedGeneration": 1, "conditions": [condition]}}
    path = kube.resource_path(workload["apiVersion"], "InferenceWorkload", namespace=namespace, name=WORKLOAD)
    kube.request(
        "PATCH",
        f"{path}/status",
        content=json.dumps(status),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    stored = kube.get(workload["apiVersion"], "InferenceWorkload", WORKLOAD, namespace=namespace) or {}
    assert stored["status"]["conditions"][0]["reason"] == "Pending"
    kube.apply(_example("Recipe"), namespace=namespace)
    try:
        yield namespace
    finally:
        kube.delete("v1", "Namespace", namespace)


def _check(kubeconfig: Path, chart: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [*CLI, "--chart", str(chart), "--kubeconfig", str(kubeconfig), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_the_unchanged_chart_passes(kubeconfig: Path, stored: str) -> None:
    """None of this module's objects has a blocking finding. NB: the testbed is shared by the
    session's modules, and the check reads every namespace: another module's leftovers may
    block, so the exit code is judged against the findings reported, and only ours must be none."""
    done = _check(kubeconfig, CHART, "-o", "json")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(done.stdout)
    blocking = [f for f in report["findings"] if f["blocking"]]
    assert [f for f in blocking if f["namespace"] == stored] == []
    assert (done.returncode, report["passed"]) == ((1, False) if blocking else (0, True)), blocking
    assert report["checked"]["InferenceWorkload"] >= 1
    assert report["checked"]["Recipe"] >= 1
    assert set(report["checked"]) == {
        "InferenceWorkload",
        "InferenceCluster",
        "ModelCache",
        "InferenceBenchmark",
        "Recipe",
        "DaemonJob",
        "RecipeRegistry",
    }


def test_a_tightened_crd_rejects_the_stored_workload(kubeconfig: Path, stored: str, tmp_path: Path) -> None:
    chart = tightened_chart(tmp_path)
    done = _check(kubeconfig, chart, "-o", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is False
    ours = [f for f in report["findings"] if f["namespace"] == stored]
    assert [(f["object"], f["problem"], f["path"]) for f in ours] == [
        (f"InferenceWorkload {stored}/{WORKLOAD}", "rejected", "metadata.name")
    ]
    assert "Too long: may not be more than" in ours[0]["message"]
    text = _check(kubeconfig, chart)
    assert text.returncode == 1
    line = f"InferenceWorkload {stored}/{WORKLOAD}: metadata.name: "
    assert any(
        row.startswith(line) and "Too long: may not be more than" in row for row in text.stdout.splitlines()
    ), text.stdout
    assert "FAILED" in text.stdout.splitlines()[-1]


def test_an_unreachable_cluster_and_a_missing_chart_have_their_exit_codes(
    kubeconfig: Path, tmp_path: Path
) -> None:
    missing = _check(kubeconfig, tmp_path / "no-such-chart")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: ")
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens on port 1
    dead = tmp_path / "kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    unreachable = _check(dead, CHART)
    assert unreachable.returncode == 3, unreachable.stdout + unreachable.stderr
