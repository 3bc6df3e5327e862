"""The chart's RBAC for the operator and the shim, applied to a testbed, and a kubeconfig per
component that authenticates as its ServiceAccount (a TokenRequest), nothing more.

``helm template`` renders ``templates/operator/rbac.yaml`` and ``templates/shim/rbac.yaml`` of
the chart with a release named after the namespace (its ClusterRoles do not collide with other
modules') into the daemon API's namespace, as ``helm install -n <namespace>`` would: the
components' namespaced Roles (answer Secrets, auth delegation) land there. :class:`ShimRunner`
then runs the shim and the operator with these kubeconfigs instead of the testbed admin's, so
every operation a test runs proves the chart grants what it needs.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import CHART, require_helm
from tests.shim.harness import service_account_token

TEMPLATES = ("templates/operator/rbac.yaml", "templates/shim/rbac.yaml")


@dataclass
class ChartRbac:
    """What :func:`apply_chart_rbac` made, for the runner and for the teardown."""

    kube: KubeApi
    kubeconfigs: dict[str, Path]
    #: The release the chart was rendered as (its ServiceAccounts are ``<release>-shim``, ...).
    release: str = ""
    #: Objects outside the namespace (its teardown takes the rest): (apiVersion, kind, namespace, name).
    outside: list[tuple[str, str, str | None, str]] = field(default_factory=list)

    def teardown(self) -> None:
        for api_version, kind, namespace, name in self.outside:
            self.kube.delete(api_version, kind, name, namespace=namespace)


def render_rbac(namespace: str, release: str, sets: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's operator and shim RBAC as ``helm template`` renders it (``--set`` each of
    ``sets``: ``tests/kueue/test_kueue_daemon_api.py`` adds a value's roles to a running release)."""
    argv = [require_helm(), "template", release, str(CHART), "--namespace", namespace]
    for value in sets:
        argv += ["--set", value]
    for template in TEMPLATES:
        argv += ["--show-only", template]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _kubeconfig(testbed: Testbed, token: str, path: Path) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {
                    "server": testbed.server,
                    "certificate-authority-data": base64.b64encode(testbed.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "component", "user": {"token": token}}],
        "contexts": [{"name": "component", "context": {"cluster": "testbed", "user": "component"}}],
        "current-context": "component",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def apply_chart_rbac(testbed: Testbed, kube: KubeApi, namespace: str, workdir: Path) -> ChartRbac:
    """Apply the chart's operator and shim RBAC in ``namespace``; kubeconfigs for both."""
    release = f"rbac-{namespace}"[:40]
    made = ChartRbac(kube=kube, kubeconfigs={}, release=release)
    accounts: dict[str, str] = {}
    for doc in render_rbac(namespace, release):
        kube.apply(doc)
        meta = doc["metadata"]
        if meta.get("namespace") != namespace:
            made.outside.append((doc["apiVersion"], doc["kind"], meta.get("namespace"), meta["name"]))
        if doc["kind"] == "ServiceAccount":
            component = meta["labels"]["app.kubernetes.io/component"]
            accounts[component] = meta["name"]
    assert sorted(accounts) == ["operator", "shim"], accounts
    for component, account in accounts.items():
        token = service_account_token(kube, namespace, account)
        path = _kubeconfig(testbed, token, workdir / f"{component}.kubeconfig")
        made.kubeconfigs[component] = path
        # The apiserver sees the ServiceAccount, not the admin.
        with KubeApi.from_kubeconfig(path) as client:
            review = client.request(
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            ).json()
        assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{account}"
    return made
