"""The gateway's RBAC (the chart's, rendered into ``manifests/gateway/rbac.yaml``; issue 15) on
the testbed's apiserver: without ``gateway.apiKeys.enabled`` the gateway reads no Secret and
only the alias ConfigMaps, and its routing source still works with exactly those permissions;
with it (the chart rendered with that value) ``--secret-keys`` can read the key Secrets."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.gateway.kube import KubeConnection, KubeRoutingSource, SecretKeySource
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.deploy.chart import helm_binary, render
from tests.deploy.test_manifests import REPO, SYSTEM_NS, _sa_kubeconfig

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]


def _apply(kubectl: Any, *files: str) -> None:
    docs = [d for f in files for d in yaml.safe_load_all((REPO / "manifests" / f).read_text()) if d]
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))


async def test_the_gateway_reads_no_secrets_unless_keys_are_enabled(
    testbed: plane.Testbed, kube: KubeApi, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    _apply(kubectl, "namespace.yaml", "gateway/rbac.yaml")
    account = f"system:serviceaccount:{SYSTEM_NS}:sparkrun-gateway"

    def can(*args: str) -> bool:
        return kubectl("auth", "can-i", f"--as={account}", *args, check=False).stdout.strip() == "yes"

    assert not can("list", "secrets", "-n", namespace)
    assert not can("get", "secrets", "-n", namespace)
    assert not can("get", "configmaps/other", "-n", namespace)
    assert can("get", "configmaps/sparkrun-gateway-aliases", "-n", namespace)

    kube.apply(
        {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": "rbac-gw", "namespace": namespace},
            "spec": {"model": {"name": "org/m", "servedName": f"rbac-{namespace}"}},
        }
    )
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "sparkrun-gateway-aliases", "namespace": namespace},
            "data": {"aliases.json": f'{{"alias-{namespace}": "rbac-{namespace}"}}'},
        }
    )
    conn = KubeConnection(
        kubeconfig=str(_sa_kubeconfig(testbed, kubectl, "sparkrun-gateway", tmp_path / "gw"))
    )
    source = KubeRoutingSource(conn)  # every namespace, with exactly the gateway's permissions
    try:
        await source.start()
        async with asyncio.timeout(30):
            table = source.snapshot()
            while table.lookup(f"alias-{namespace}") is None:
                table = await source.wait_changed(table.version)
        # gateway.apiKeys.enabled, serving every namespace: the key Secrets are read in the release
        # namespace only (an administrator namespace: its keys may grant every namespace), never
        # cluster-wide.
        helm_bin = helm_binary()
        assert helm_bin is not None, "the pinned helm is built by make testbed-bin"
        chart = render(helm_bin, tmp_path, {"gateway": {"apiKeys": {"enabled": True}}})
        assert not [
            r for r in chart.get("ClusterRole", "sparkrun-gateway")["rules"] if "secrets" in r["resources"]
        ]
        for kind in ("Role", "RoleBinding"):
            doc = chart.get(kind, "sparkrun-gateway-keys", SYSTEM_NS)
            kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(doc))
        assert can("list", "secrets", "-n", SYSTEM_NS)
        assert not can("list", "secrets", "-n", namespace)
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"k-{namespace}",
                    "namespace": SYSTEM_NS,
                    "labels": {"sparkrun.dev/gateway-key": "true"},
                },
                "data": {"key": base64.b64encode(f"sk-{namespace}".encode()).decode()},
            }
        )
        keys = SecretKeySource(conn, namespace=[SYSTEM_NS], admin_namespaces=[SYSTEM_NS])
        await asyncio.sleep(1.0)  # RBAC caches catch up
        await keys.start()
        try:
            grant = None
            for _ in range(300):
                grant = keys.lookup(f"sk-{namespace}")
                if grant is not None:
                    break
                await asyncio.sleep(0.1)
            assert grant is not None
            assert grant.namespace is None, "a release-namespace key may grant every namespace"
        finally:
            await keys.close()
    finally:
        await source.close()
        await conn.close()
        kubectl("delete", "secret", f"k-{namespace}", "-n", SYSTEM_NS, "--ignore-not-found", check=False)
        for kind in ("rolebinding", "role"):
            kubectl(
                "delete", kind, "sparkrun-gateway-keys", "-n", SYSTEM_NS, "--ignore-not-found", check=False
            )
