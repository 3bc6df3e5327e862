"""The shared fixtures reach the session testbed: kubectl, the async client, KUBECONFIG."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sparkrun_testbed.plane import Testbed
from sparkrun_testbed.topology import Topology

pytestmark = pytest.mark.testbed


async def test_async_client_lists_the_fake_nodes(testbed: Testbed, k8s_api: Any) -> None:
    from kubernetes_asyncio import client

    nodes = await client.CoreV1Api(k8s_api).list_node()
    names = {node.metadata.name for node in nodes.items}
    assert set(Topology.from_dict(testbed.state.topology).node_names()) <= names


def test_kubectl_and_kubeconfig_point_at_the_testbed(testbed: Testbed, kubectl: Any, namespace: str) -> None:
    assert os.environ["KUBECONFIG"] == str(testbed.kubeconfig)
    (ns,) = [n for n in kubectl.json("get", "namespaces")["items"] if n["metadata"]["name"] == namespace]
    assert ns["status"]["phase"] == "Active"
    assert kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == "sparkrun-admin"
