"""`helm install`, `helm upgrade` and `helm uninstall` of the chart against the testbed's real
apiserver (the pods themselves are KWOK's: this checks the objects, not the processes).

The upgrade path of the generated TLS material is the point: `lookup` must find the Secret of
the install so the CA stays. Also the gateway's RBAC as the chart's values change it, checked
by the apiserver's own authorizer. The CRDs are the session's (`crds.install=false`), the
APIService is off (no backend would serve it) and the release has its own name, so nothing
collides with tests/deploy/test_manifests.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.chart import CHART, helm, helm_binary

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]
RELEASE = "chart-it"
# NB: no uninstall hook here: its Job's pod would be KWOK's, which never completes, and
# `helm uninstall` would wait for it (e2e/test_helm_pods.py runs the hook on process nodes).
# NB: the fixed-name ClusterRoles (daemon, inference, tenant roles) are left to
# tests/deploy/test_manifests.py: another install of the chart in the suite would own them.
BASE = ["--set", "crds.install=false", "--set", "daemonRoles=false", "--set", "shim.apiService.enabled=false",
        "--set", "operator.stopBeforeUninstall=false", "--set", "gateway.auth.inferenceRole=false",
        "--set", "tenancy.tenantRole=false",
        # NB: no product image runs on the session testbed's nodes, so the pre-upgrade check's Job
        # would wait out its deadline; e2e/test_upgrade_hook.py and e2e/test_helm_pods.py upgrade
        # with it on, on testbeds whose nodes run the product's pods.
        "--set", "upgradeCheck.enabled=false"]  # fmt: skip


def _secret_ca(kubectl: Any, namespace: str) -> str:
    secret = kubectl.json("get", "secret", f"{RELEASE}-shim-tls", "-n", namespace)
    ca: str = secret["data"]["ca.crt"]
    return ca


def test_install_upgrade_uninstall_keeps_the_ca_and_applies_rbac_values(kubectl: Any, namespace: str) -> None:
    helm_bin = helm_binary()
    assert helm_bin is not None, "the testbed binaries include helm"

    def can(account: str, *args: str) -> bool:
        user = f"--as=system:serviceaccount:{namespace}:{RELEASE}-{account}"
        return kubectl("auth", "can-i", user, *args, check=False).stdout.strip() == "yes"

    install = helm(helm_bin, "install", RELEASE, str(CHART), "-n", namespace, *BASE, check=False)
    assert install.returncode == 0, install.stderr
    try:
        ca = _secret_ca(kubectl, namespace)
        status = json.loads(helm(helm_bin, "status", RELEASE, "-n", namespace, "-o", "json").stdout)
        assert status["info"]["status"] == "deployed"
        assert not can("gateway", "list", "secrets", "-n", namespace)
        assert can("gateway", "watch", "inferenceworkloads.sparkrun.dev", "-n", "default")

        upgrade = ["upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values"]
        upgrade += ["--set", "gateway.replicas=3", "--set", "gateway.apiKeys.enabled=true"]
        upgrade += ["--set", f"gateway.watchNamespace={namespace}"]
        done = helm(helm_bin, *upgrade, check=False)
        assert done.returncode == 0, done.stderr
        assert _secret_ca(kubectl, namespace) == ca, "the upgrade must keep the CA of the install"
        deployment = kubectl.json("get", "deployment", f"{RELEASE}-gateway", "-n", namespace)
        assert deployment["spec"]["replicas"] == 3
        assert "--secret-keys" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert can("gateway", "list", "secrets", "-n", namespace)
        assert not can("gateway", "list", "secrets", "-n", "default"), "keys only where it routes"
        assert not can("gateway", "watch", "inferenceworkloads.sparkrun.dev", "-n", "default")
        # The deprecated gateway.watchNamespace counts as watchNamespaces: Roles for the operator too.
        assert can("operator", "create", "jobsets.jobset.x-k8s.io", "-n", namespace)
        assert not can("operator", "create", "jobsets.jobset.x-k8s.io", "-n", "default")
        assert can("operator", "list", "nodes")
    finally:
        gone = helm(helm_bin, "uninstall", RELEASE, "-n", namespace, "--wait", check=False)
    assert gone.returncode == 0, gone.stderr
    left = kubectl("get", "clusterrole", f"{RELEASE}-operator", check=False)
    assert left.returncode != 0, "uninstall removes the cluster-scoped objects of the release"
    assert kubectl("get", "secret", f"{RELEASE}-shim-tls", "-n", namespace, check=False).returncode != 0
