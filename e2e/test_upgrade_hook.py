"""The chart's pre-upgrade check stops ``helm upgrade`` (issue 28, item 5).

``helm install`` on a testbed of its own (``e2e/helm_pods.py``: its components run as pods on
process nodes, the product image mapped to this checkout's ``sparkrun-k8s``), then a workload
stored with a 20-character name. ``helm upgrade`` to a copy of the chart whose workload CRD allows
8 (``tests/deploy/changed_chart.py``): the hook Job (the new chart's image, its own read-only
ServiceAccount, the new CRDs from its ConfigMap) fails, ``helm upgrade`` fails naming the hook,
the release stays at revision 1 with the old CRD, and the Job's log lists object, field path and
message. ``helm upgrade`` to the unchanged chart then passes, and the hook's objects are gone.

It starts a control plane of its own, so it lives in ``e2e/`` beside ``test_helm_pods.py``
(``make test`` runs all of ``e2e/`` on one worker: one chart-installed testbed at a time).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.helm_pods import CHART, NAMESPACE, RELEASE, TESTBED_VALUES, Cluster, start_cluster
from tests.deploy.changed_chart import TIGHT_NAME, tightened_chart

pytestmark = pytest.mark.testbed
HOOK = f"{RELEASE}-upgrade-check"
TENANT = "upgrade-tenant"
WORKLOAD = "upgrade-check-target"
#: Only the operator (one replica): the check needs the CRDs and what is stored, not the rest.
VALUES = ("--values", str(TESTBED_VALUES), "--set", "operator.replicas=1",
          "--set", "shim.enabled=false", "--set", "gateway.enabled=false")  # fmt: skip
WAIT = ("--wait", "--timeout", "180s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = start_cluster(tmp_path_factory.mktemp("upgrade-hook") / "testbed")
    try:
        made.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *VALUES, *WAIT)
        made.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT}})
        workload = {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": WORKLOAD},
            "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "replicas": 0},
        }
        made.kube.apply(workload, namespace=TENANT)
        yield made
    finally:
        made.kube.close()
        made.testbed.stop()


def _history(cluster: Cluster) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        cluster.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout
    )
    return found


def _name_bound(cluster: Cluster) -> int:
    crd = cluster.kube.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", "inferenceworkloads.sparkrun.dev"
    )
    schema = (crd or {})["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return int(schema["properties"]["metadata"]["properties"]["name"]["maxLength"])


def test_the_hook_stops_an_upgrade_whose_crd_rejects_a_stored_object(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert len(WORKLOAD) > TIGHT_NAME
    chart = tightened_chart(tmp_path)
    done = cluster.helm("upgrade", RELEASE, str(chart), "-n", NAMESPACE, *VALUES, *WAIT, check=False)
    assert done.returncode != 0, done.stdout
    assert "pre-upgrade hooks failed" in done.stderr
    assert HOOK in done.stderr
    # the release still serves revision 1, and nothing of the new chart was applied
    deployed = [r["revision"] for r in _history(cluster) if r["status"] == "deployed"]
    assert deployed == [1]
    assert _name_bound(cluster) == 35
    # the failed Job stays, its log lists object, field path and message
    log = cluster.kubectl("logs", "-n", NAMESPACE, f"job/{HOOK}").stdout
    line = f"InferenceWorkload {TENANT}/{WORKLOAD}: metadata.name: "
    assert any(
        row.startswith(line) and "Too long: may not be more than" in row for row in log.splitlines()
    ), log
    assert "FAILED" in log


def test_the_unchanged_chart_passes_the_check_and_leaves_nothing(cluster: Cluster) -> None:
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *VALUES, *WAIT)
    history = _history(cluster)
    assert history[-1]["status"] == "deployed"
    assert history[-1]["revision"] > 1
    # hook-succeeded: the Job, its account, role, binding and ConfigMap are gone
    for kind, namespaced in (("jobs", True), ("configmaps", True), ("serviceaccounts", True),
                             ("clusterroles", False), ("clusterrolebindings", False)):  # fmt: skip
        where = ("-n", NAMESPACE) if namespaced else ()
        got = cluster.kubectl("get", kind, HOOK, *where, "--ignore-not-found", "-o", "name")
        assert got.stdout.strip() == "", kind
