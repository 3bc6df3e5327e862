"""The install manifests (``manifests/``, rendered from the Helm chart) against the real apiserver.

RBAC, the namespace and the kopf peering CRDs are applied for real; Deployments, Services,
NetworkPolicies and the APIService are checked with a server-side dry run (an APIService with no
serving backend would disturb discovery for every other test). cert-manager's Certificate and
Issuer are only counted: the testbed has no cert-manager CRDs. Then the operator runs with *exactly* its
ServiceAccount's permissions, with peering on as in the Deployment (namespaced: it serves only
the test's namespace, so it never acts on other tests' objects), and must bring a workload to
Ready without a single Forbidden.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi

REPO = Path(__file__).resolve().parents[2]
APPLY_FOR_REAL = {
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}
SYSTEM_NS = "sparkrun-system"

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]


def _kustomize(kubectl: Any) -> list[dict[str, Any]]:
    rendered = kubectl("kustomize", str(REPO / "manifests")).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def _sa_kubeconfig(testbed: plane.Testbed, kubectl: Any, account: str, path: Path) -> Path:
    token = kubectl("create", "token", account, "-n", SYSTEM_NS, "--duration", "1h").stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tb",
                "cluster": {"server": testbed.server, "certificate-authority": str(testbed.ca_file())},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "tb", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _ready(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def test_manifests_apply_and_the_operator_works_with_its_own_rbac(
    testbed: plane.Testbed, kube: KubeApi, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    docs = _kustomize(kubectl)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "APIService", "ClusterRole", "ServiceAccount"} <= kinds
    real = [d for d in docs if d["kind"] in APPLY_FOR_REAL]
    cert_manager = [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    assert sorted(d["kind"] for d in cert_manager) == ["Certificate", "Issuer"]
    rest = [d for d in docs if d["kind"] not in APPLY_FOR_REAL and d not in cert_manager]
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(real))
    time.sleep(1.0)  # discovery of the peering CRDs
    dry = kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(rest))
    assert dry.stdout.count("(server dry run)") == len(rest), dry.stdout

    # Least privilege holds where it matters.
    def can(account: str, *args: str) -> bool:
        result = kubectl(
            "auth", "can-i", f"--as=system:serviceaccount:{SYSTEM_NS}:{account}", *args, check=False
        )
        return result.stdout.strip() == "yes"

    assert can("sparkrun-gateway", "patch", "inferenceworkloads.sparkrun.dev", "-n", namespace)
    assert not can("sparkrun-gateway", "delete", "inferenceworkloads.sparkrun.dev", "-n", namespace)
    assert not can("sparkrun-gateway", "create", "pods", "-n", namespace)
    assert not can("sparkrun-gateway", "list", "secrets", "-n", namespace), "API keys are off"
    assert can("sparkrun-gateway", "get", "configmaps/sparkrun-gateway-aliases", "-n", namespace)
    assert not can("sparkrun-gateway", "get", "configmaps/other", "-n", namespace)
    # The gateway's alias informer lists by name in every namespace: RBAC resourceNames allow it.
    gateway_user = f"--as=system:serviceaccount:{SYSTEM_NS}:sparkrun-gateway"
    by_name = ["get", "configmaps", "-A", "--field-selector", "metadata.name=sparkrun-gateway-aliases"]
    listed = kubectl(*by_name, gateway_user, check=False)
    assert listed.returncode == 0, listed.stderr
    assert kubectl("get", "configmaps", "-A", gateway_user, check=False).returncode != 0
    assert not can("sparkrun-operator", "get", "secrets", "-n", namespace), "only its own namespace"
    assert can("sparkrun-operator", "get", "secrets", "-n", SYSTEM_NS)
    assert not can("sparkrun-operator", "create", "clusterrolebindings.rbac.authorization.k8s.io")
    assert can("sparkrun-shim", "create", "tokenreviews.authentication.k8s.io")
    assert can("sparkrun-shim", "create", "subjectaccessreviews.authorization.k8s.io")
    assert not can("sparkrun-shim", "create", "jobsets.jobset.x-k8s.io", "-n", namespace)
    assert can("sparkrun-operator", "create", "jobsets.jobset.x-k8s.io", "-n", namespace)
    assert not can("sparkrun-operator", "create", "pods", "-n", namespace)
    assert not can("sparkrun-operator", "bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin")

    kubeconfig = _sa_kubeconfig(testbed, kubectl, "sparkrun-operator", tmp_path / "operator.kubeconfig")
    log = tmp_path / "operator.log"
    # NB: POD_NAMESPACE as the Deployment sets it (the executor's Lease goes where the Role is).
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", "POD_NAMESPACE": SYSTEM_NS}
    # NB: it serves this test's namespace only. Every namespace would make it a second operator of
    # the other tests' objects, running concurrently on the shared testbed: it reconciled their
    # workloads and took their DaemonJobs (whose executor Leases it may not touch there). The
    # chart's own `--all-namespaces` runs with this RBAC in e2e/test_helm_pods.py.
    argv = [sys.executable, "-m", "sparkrun_operator.cli.main", "operator", "run", "-n", namespace,
            "--peering-name", f"rbac-{namespace}", "--priority", "100",
            "--inference-pools", "off"]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        manifest = {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": "rbac-check", "namespace": namespace},
            "spec": {"model": {"name": "org/small"}, "topology": {"nodes": 1, "gpusPerNode": 1}},
        }
        kube.apply(manifest)
        deadline = time.monotonic() + 120
        while not _ready(
            kube.get("sparkrun.dev/v1alpha1", "InferenceWorkload", "rbac-check", namespace=namespace)
        ):
            assert proc.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, (
                "workload not Ready under the operator's RBAC:\n" + log.read_text()[-5000:]
            )
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        kube.delete("sparkrun.dev/v1alpha1", "InferenceWorkload", "rbac-check", namespace=namespace)
    output = log.read_text(errors="replace")
    forbidden = [line for line in output.splitlines() if "forbidden" in line.lower() or " 403" in line]
    assert forbidden == [], "\n".join(forbidden[:20])
