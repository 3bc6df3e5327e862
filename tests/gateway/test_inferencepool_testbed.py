"""A foreign InferencePool routed by the gateway, on the testbed: the real apiserver with the
Inference Extension's v1.5.0 InferencePool CRD (the chart's vendored copy), real engine pods on
process nodes, the gateway's real watches and the real ``openai`` client.

Shown: a pool annotated ``sparkrun.dev/model-name`` is routed to its Ready pods (a matching pod
that is not Ready is not); an unannotated pool is ignored; a pool claiming a name a workload
serves loses it, however old; a pool in a namespace the name policy refuses that name is not
routed; a pool never selects the operator's pods (here a Ready pod labelled as a workload's
engine that the pool's labels match too).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from sparkrun_operator.api import namepolicy
from sparkrun_operator.gateway.kube import KubeConnection, KubeRoutingSource
from sparkrun_operator.gateway.routing import RoutingTable
from sparkrun_operator.render import keys
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import Topology
from tests.process.helpers import ENGINE_IMAGE, pod, pod_spec, ready, shell, wait_pod

from .conftest import StartGateway

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]

CRD = Path(__file__).resolve().parents[2] / "helm/sparkrun-operator/files/inferencepool-crd.yaml"
POOLS = "inference.networking.k8s.io/v1"


@pytest.fixture
def pool_crd(testbed: plane.Testbed, require: Any) -> None:
    require(CRD.is_file(), f"the chart's vendored InferencePool CRD {CRD} is missing")
    testbed.apply_crds([yaml.safe_load(CRD.read_text())])


@pytest.fixture
def process_nodes(testbed: plane.Testbed) -> list[str]:
    names = Topology.from_dict(testbed.state.topology).process_node_names()
    assert names, "the session testbed has no process nodes"
    return names


class _ClosingSource(KubeRoutingSource):
    """The gateway's Kubernetes source, closing its connection with it (on the gateway's loop)."""

    def __init__(self, conn: KubeConnection, **options: Any) -> None:
        super().__init__(conn, **options)
        self.conn = conn

    async def close(self) -> None:
        await super().close()
        await self.conn.close()


def _pool(name: str, model: str | None, app: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if model is not None:
        meta["annotations"] = {keys.ANNOTATION_POOL_MODEL: model}
    return {
        "apiVersion": POOLS,
        "kind": "InferencePool",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}},
        },
    }


def _engine(served: str) -> dict[str, Any]:
    return {
        "name": "engine",
        "image": ENGINE_IMAGE,
        "args": ["org/tiny", "--served-model-name", served, "--port", "8000"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }


def _until(source: KubeRoutingSource, check: Any, what: str, within: float = 60.0) -> RoutingTable:
    deadline = time.monotonic() + within
    while not check(table := source.snapshot()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return table


def test_foreign_pools_route_by_their_annotation(
    kube: KubeApi,
    namespace: str,
    testbed: plane.Testbed,
    pool_crd: None,
    process_nodes: list[str],
    start_gateway: StartGateway,
) -> None:
    other = f"{namespace}-np"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        # A pool older than the workload whose name it claims: it still loses the name.
        kube.create(_pool("squatter", "wl-model", "llm"), namespace=namespace)
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        workload = {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": "wl"},
            "spec": {"model": {"name": "org/m", "servedName": "wl-model"}},
        }
        kube.create(workload, namespace=namespace)
        kube.create(_pool("theirs", "their-model", "llm"), namespace=namespace)
        kube.create(_pool("plain", None, "llm"), namespace=namespace)
        kube.create(_pool("refused", "their-model-2", "nothing"), namespace=other)
        labels = {"app": "llm"}
        kube.create(
            pod("engine", pod_spec([_engine("their-model")], restart="Always"), labels=labels),
            namespace=namespace,
        )
        never = shell(
            "idle", "exec sleep 600", readinessProbe={"exec": {"command": ["false"]}, "periodSeconds": 1}
        )
        kube.create(pod("unready", pod_spec([never], restart="Always"), labels=labels), namespace=namespace)
        # An engine pod of a workload that the pool's labels match too: the pool never selects it
        # (the apiserver applies the selector's exclusion of the operator's pods).
        ours = shell(
            "ours", "exec sleep 600", readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1}
        )
        decoy = {**labels, keys.LABEL_WORKLOAD: "wl"}
        kube.create(pod("ours", pod_spec([ours], restart="Always"), labels=decoy), namespace=namespace)
        up = wait_pod(kube, namespace, "engine", ready, timeout=90, what="the engine pod Ready")
        wait_pod(kube, namespace, "ours", ready, timeout=90, what="the workload's pod Ready")
        ip = up["status"]["podIP"]

        policy = namepolicy.parse({namespace: [""], other: ["allowed-"]})
        conn = KubeConnection(kubeconfig=str(testbed.kubeconfig))
        source = _ClosingSource(conn, namespace=[namespace, other], name_policy=policy, inference_pools=True)
        gw = start_gateway([], source=source)
        table = _until(
            source, lambda t: (e := t.lookup("their-model")) is not None and e.routable, "the pool"
        )

        theirs = table.lookup("their-model")
        assert theirs is not None
        assert theirs.key == f"InferencePool/{namespace}/theirs"
        # Neither the unready pod nor the workload's pod is among them.
        assert theirs.endpoints == (f"http://{ip}:8000",)
        wl = table.lookup("wl-model")
        assert wl is not None
        assert not wl.pool  # the workload keeps its name, although the pool is older
        assert table.lookup("their-model-2") is None  # the name policy refuses it in `other`
        assert {e.name for e in table.workloads if e.pool} == {"squatter", "theirs"}  # not "plain"

        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20) as client:
            answer = client.chat.completions.create(
                model="their-model", messages=[{"role": "user", "content": "hello pool"}], max_tokens=5
            )
            assert answer.model == "their-model"
            assert answer.choices[0].message.content
            listed = {m.id for m in client.models.list().data}
            assert "their-model" in listed
            assert "their-model-2" not in listed
            with pytest.raises(openai.NotFoundError):
                client.chat.completions.create(
                    model="their-model-2", messages=[{"role": "user", "content": "x"}], max_tokens=2
                )
        raw = {m["id"]: m for m in httpx.get(f"{gw.url}/v1/models").json()["data"]}
        assert raw["their-model"]["inferencePool"] == f"{namespace}/theirs"
        assert raw["their-model"]["workload"] is None
        tags = {m["name"] for m in httpx.get(f"{gw.url}/api/tags").json()["models"]}
        assert "their-model" in tags

        # The pool goes: so does its name.
        kube.delete(POOLS, "InferencePool", "theirs", namespace=namespace)
        _until(source, lambda t: t.lookup("their-model") is None, "the pool's removal")
    finally:
        kube.delete("v1", "Namespace", other)
