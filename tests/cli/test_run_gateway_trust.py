"""Where ``sparkrun-k8s run`` sends its user once the model is Ready, against a hostile tenant
(review R2 of issue 33): any tenant with ``edit`` in a namespace of its own can create a Service
that carries the chart gateway's labels. For a user who may list Services in every namespace (an
administrator), ``run`` must not print that Service's address (and a ``kubectl create --raw``
line through it) as the gateway of a model in another namespace: the user's prompts would go to
the tenant. Trusted are the workload's own namespace, the one named by ``--gateway-namespace``,
and the release namespace (the namespace of the daemon APIService, which only administrators
create); never a namespace that merely holds a look-alike.

``reach_of`` (what ``run`` prints) runs here with the real client against the testbed's apiserver,
as the testbed's administrator. So does run's Ctrl-C clean-up (``_delete``): it deletes only the
workload this run created (a UID precondition), never one made under the same name meanwhile.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrun_operator.cli import run
from sparkrun_operator.cli.common import FIELD_MANAGER
from sparkrun_operator.cli.run import GATEWAY_SELECTOR, reach_of
from sparkrun_operator.k8s.client import Kube
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API

pytestmark = pytest.mark.testbed


def _labels() -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in GATEWAY_SELECTOR.split(","))


@pytest.fixture
def tenant_namespace(kube: KubeApi) -> Iterator[str]:
    """A tenant's namespace with a look-alike of the chart's gateway Service, named to sort first."""
    name = f"r2-tenant-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "a", "namespace": name, "labels": _labels()},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }
    )
    yield name
    kube.delete("v1", "Namespace", name)


def _ready_workload(namespace: str) -> dict[str, object]:
    return {
        "metadata": {"name": "victim-model", "namespace": namespace, "uid": "u"},
        "spec": {"model": {"name": "org/victim-model"}},
        "status": {
            "phase": "Ready",
            "model": {"servedName": "victim-served"},
            "endpoints": [{"url": f"http://victim-model.{namespace}.svc:8000", "ready": True}],
        },
    }


async def test_a_tenants_look_alike_gateway_is_never_printed(
    kubeconfig: Path, namespace: str, tenant_namespace: str
) -> None:
    kube = await Kube.connect(field_manager=FIELD_MANAGER, kubeconfig=str(kubeconfig))
    try:
        reach = await reach_of(kube, _ready_workload(namespace), None)
    finally:
        await kube.close()
    assert f"/namespaces/{tenant_namespace}/" not in reach["url"], reach
    assert f"/namespaces/{tenant_namespace}/" not in reach["try"], reach


async def test_ctrl_c_cleanup_deletes_only_the_workload_this_run_created(
    kubeconfig: Path, crds: list[str], namespace: str, kube: KubeApi
) -> None:
    """After a Ctrl-C, ``run`` deletes by the UID it created: when someone deleted that workload and
    made another of the same name meanwhile, the other one stays, and run says so ("replaced")."""
    spec = run.build_spec(model="org/cleanup-model", recipe=None)
    first = kube.create(run.manifest("cleanup-w", namespace, spec))
    kube.delete(API, "InferenceWorkload", "cleanup-w", namespace=namespace)
    kube.wait(
        lambda: kube.get(API, "InferenceWorkload", "cleanup-w", namespace=namespace) is None or None,
        timeout=30,
        what="the first workload gone",
    )
    second = kube.create(run.manifest("cleanup-w", namespace, spec))
    client = await Kube.connect(field_manager=FIELD_MANAGER, kubeconfig=str(kubeconfig))
    asked: list[bool] = []
    try:
        state = await run._delete(client, "cleanup-w", namespace, first["metadata"]["uid"], asked)
    finally:
        await client.close()
    assert state == "replaced"
    assert asked == []
    left = kube.get(API, "InferenceWorkload", "cleanup-w", namespace=namespace)
    assert left is not None
    assert left["metadata"]["uid"] == second["metadata"]["uid"]
