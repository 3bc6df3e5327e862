"""The chart's policy on the GPU agent's node writes (templates/gpu-agent/admission.yaml) on the
testbed's real kube-apiserver: RBAC grants the agent's ServiceAccount ``patch nodes`` cluster-wide,
so its token (one on every GPU node) could relabel, taint or annotate any node. With the policy it
changes GPU feature discovery's labels of its own node (the node its pod-bound token names) and
nothing else, and none where GFD runs.

The policy matches the agent's ServiceAccount alone (a fresh release and namespace per test), so
the shared testbed's other clients are untouched.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.agent import labels as agent_labels
from sparkrun_operator.api import telemetry
from sparkrun_operator.api.telemetry import NodeSample
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.agent.test_node_labels import _agent, _until
from tests.deploy.chart import CHART, require_helm
from tests.shim.chart_rbac import _kubeconfig

pytestmark = pytest.mark.testbed

TEMPLATES = ["templates/gpu-agent/rbac.yaml", "templates/gpu-agent/admission.yaml"]


@dataclass
class Agent:
    api: KubeApi
    own: str
    other: str
    kubeconfig: Path


def _render(release: str, namespace: str) -> list[dict[str, Any]]:
    argv = [require_helm(), "template", release, str(CHART), "--namespace", namespace]
    argv += ["--set", "gpuAgent.enabled=true"]
    for template in TEMPLATES:
        argv += ["--show-only", template]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _bound_token(kube: KubeApi, namespace: str, account: str, pod: dict[str, Any]) -> str:
    """A token of ``account`` bound to ``pod`` (as the kubelet mounts one: it names the pod's node)."""
    answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    ).json()
    return str(answer["status"]["token"])


@pytest.fixture
def agent(testbed: Testbed, kube: KubeApi, namespace: str, tmp_path: Path) -> Iterator[Agent]:
    release = f"r2{secrets.token_hex(3)}"
    docs = _render(release, namespace)
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ], kinds
    token = secrets.token_hex(3)
    own, other = f"r2-own-{token}", f"r2-other-{token}"
    for node in (own, other):
        kube.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"pool": "r2"}}}
        )
    created: list[dict[str, Any]] = []
    api: KubeApi | None = None
    try:
        for doc in docs:
            created.append(kube.create(doc, namespace=namespace if doc["kind"] == "ServiceAccount" else None))
        account = docs[0]["metadata"]["name"]
        pod = kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "gpu-agent", "namespace": namespace},
                "spec": {
                    "nodeName": own,
                    "serviceAccountName": account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:0"}],
                },
            }
        )
        token = _bound_token(kube, namespace, account, pod)
        api = KubeApi(server=testbed.server, ca_pem=testbed.ca_pem, token=token)
        _policy_in_force(api, own)
        yield Agent(api, own, other, _kubeconfig(testbed, token, tmp_path / "agent.kubeconfig"))
    finally:
        if api is not None:
            api.close()
        for doc in reversed(created):
            if doc["kind"] != "ServiceAccount":
                kube.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        for node in (own, other):
            kube.delete("v1", "Node", node)


def _patch(api: KubeApi, node: str, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    answer: dict[str, Any] = api.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        params={"dryRun": "All"} if dry_run else {},
        content=json.dumps(body),
        headers={"Content-Type": "application/merge-patch+json"},
    ).json()
    return answer


def _refused(call: Callable[[], Any], words: str) -> None:
    """The apiserver refuses ``call`` (403, its message says ``words``)."""
    with pytest.raises(ApiError) as refusal:
        call()
    assert refusal.value.status == 403, refusal.value.message
    assert words in refusal.value.message, refusal.value.message


def _policy_in_force(api: KubeApi, node: str) -> None:
    """A new policy takes effect within seconds: a dry run (admitted or not, it changes nothing)
    until the policy refuses it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            _patch(api, node, {"metadata": {"annotations": {"probe": "x"}}}, dry_run=True)
        except ApiError as error:
            if error.status == 403:
                return
            raise
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(0.5)


def _labels(kube: KubeApi, node: str) -> dict[str, str]:
    found = kube.get("v1", "Node", node)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def test_the_agent_may_patch_only_gfd_labels_of_its_own_node(agent: Agent, kube: KubeApi) -> None:
    # another node: refused (its token names the node its pod runs on)
    _refused(
        lambda: _patch(agent.api, agent.other, {"metadata": {"labels": {telemetry.GPU_COUNT_LABEL: "8"}}}),
        "only its own node",
    )
    assert telemetry.GPU_COUNT_LABEL not in _labels(kube, agent.other)
    # its own node, GFD's labels: admitted (what agent/labels.py writes)
    gfd = {telemetry.GPU_COUNT_LABEL: "2", telemetry.GPU_MEMORY_LABEL: "143771"}
    assert _patch(agent.api, agent.own, {"metadata": {"labels": gfd}})["metadata"]["labels"] == {
        "pool": "r2",
        **gfd,
    }
    # its own node, any other label (new, changed or removed): refused
    changes: list[dict[str, str | None]] = [
        {"node-role.kubernetes.io/control-plane": ""},
        {"pool": "other"},
        {"pool": None},
        {telemetry.GFD_TIMESTAMP_LABEL: "1"},
    ]
    for labels in changes:
        _refused(
            functools.partial(_patch, agent.api, agent.own, {"metadata": {"labels": labels}}),
            "only GPU feature discovery's labels",
        )
    # its own node's spec (taints, cordon) and annotations: refused
    bodies: list[dict[str, Any]] = [
        {"spec": {"taints": [{"key": "evict", "effect": "NoExecute"}]}},
        {"spec": {"unschedulable": True}},
        {"metadata": {"annotations": {"note": "x"}}},
    ]
    for body in bodies:
        _refused(functools.partial(_patch, agent.api, agent.own, body), "changes no spec")
    assert _labels(kube, agent.own) == {"pool": "r2", **gfd}
    own = kube.get("v1", "Node", agent.own)
    assert own is not None
    assert not own["spec"].get("taints")
    assert not own["spec"].get("unschedulable")


def test_where_gfd_runs_the_agent_may_not_relabel(agent: Agent, kube: KubeApi) -> None:
    gfd = {telemetry.GFD_TIMESTAMP_LABEL: "1700000000", telemetry.GPU_PRODUCT_LABEL: "GFD-Says-So"}
    _patch(kube, agent.own, {"metadata": {"labels": gfd}})
    _refused(
        lambda: _patch(
            agent.api, agent.own, {"metadata": {"labels": {telemetry.GPU_PRODUCT_LABEL: "Agent"}}}
        ),
        "GPU feature discovery labels this node",
    )
    assert _labels(kube, agent.own) == {"pool": "r2", **gfd}


def test_the_policy_names_every_label_the_agent_writes(namespace: str) -> None:
    """The policy's list of GFD labels is the agent's (api/telemetry.py): a label added there and
    not here would be refused on every node."""
    policy = next(d for d in _render("r2list", namespace) if d["kind"] == "ValidatingAdmissionPolicy")
    (gfd,) = (v["expression"] for v in policy["spec"]["variables"] if v["name"] == "gfd")
    listed = set(re.findall(r"'([^']+)'", gfd))
    written = {
        telemetry.GPU_PRODUCT_LABEL,
        telemetry.GPU_MEMORY_LABEL,
        telemetry.GPU_COUNT_LABEL,
        telemetry.DRIVER_VERSION_LABEL,
        telemetry.DRIVER_MAJOR_LABEL,
        telemetry.DRIVER_MINOR_LABEL,
        telemetry.DRIVER_REV_LABEL,
    }
    assert listed == written
    sample = NodeSample.model_validate(
        {
            "node": "n",
            "time": 1.0,
            "nvml": {"available": True, "driverVersion": "560.35.03"},
            "host": {},
            "gpus": [{"index": 0, "name": "NVIDIA H200", "memoryTotalBytes": 1 << 30}],
        }
    )
    assert set(agent_labels.desired(sample)) <= listed


def test_the_real_agent_labels_its_node_under_the_policy(agent: Agent, kube: KubeApi, tmp_path: Path) -> None:
    """``sparkrun-k8s agent`` (the fake NVML) with the pod-bound token: the policy admits its patch."""
    with _agent(agent.own, agent.kubeconfig, tmp_path):
        found = _until(
            lambda: (ls := _labels(kube, agent.own)).get(telemetry.GPU_COUNT_LABEL) and ls, "the labels"
        )
    assert found[telemetry.GPU_COUNT_LABEL] == "2"
    assert found[telemetry.DRIVER_VERSION_LABEL] == "560.35.03"
    assert found["pool"] == "r2"
