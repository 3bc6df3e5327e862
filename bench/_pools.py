"""``bench.scale --inference-pools`` (issue 30): the InferencePool CRD on the bench's testbed, the
operator's flag, and what the run reads of the pools' cost: the objects made, the pickers'
readiness, the workloads' ``PoolAccepted`` reasons, the apiserver's watch events by resource and
the bytes the operator read.

With pools on, the operator keeps per workload an InferencePool and a managed endpoint picker
(ServiceAccount, RoleBinding, Deployment, Service ``<w>-epp``); the bench's KWOK nodes have no
taints, so the scheduler places the picker pods (100m CPU, 128 MiB requested) beside the engines
and KWOK marks them Running and Ready: the controller-manager's Deployment and ReplicaSet work is
in the measurement, as it is on a real cluster (no process runs: nothing is pulled or scraped).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from sparkrun_operator.render import keys

REPO: Final = Path(__file__).resolve().parent.parent
#: The chart's vendored InferencePool CRD (v1.5.0).
CRD_FILE: Final = REPO / "helm" / "sparkrun-operator" / "files" / "inferencepool-crd.yaml"
POOLS: Final = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"
#: The resources a workload's pool and picker add (the operator's server-side applies).
POOL_RESOURCES: Final = (
    "inferencepools",
    "deployments",
    "serviceaccounts",
    "rolebindings",
    "networkpolicies",
)
#: What the run counts in the bench's namespace after converging: (resource, collection path).
COUNTED: Final[tuple[tuple[str, str], ...]] = (
    ("inferenceworkloads", "/apis/sparkrun.dev/v1alpha1/namespaces/{ns}/inferenceworkloads"),
    ("jobsets", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"),
    ("jobs", "/apis/batch/v1/namespaces/{ns}/jobs"),
    ("pods", "/api/v1/namespaces/{ns}/pods"),
    ("services", "/api/v1/namespaces/{ns}/services"),
    ("endpointslices", "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
    ("controllerrevisions", "/apis/apps/v1/namespaces/{ns}/controllerrevisions"),
    ("inferencepools", POOLS),
    ("deployments", "/apis/apps/v1/namespaces/{ns}/deployments"),
    ("replicasets", "/apis/apps/v1/namespaces/{ns}/replicasets"),
    ("serviceaccounts", "/api/v1/namespaces/{ns}/serviceaccounts"),
    ("rolebindings", "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
    ("networkpolicies", "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
    ("configmaps", "/api/v1/namespaces/{ns}/configmaps"),
)
#: The resources whose watch traffic is reported (the picker indexes watch the first four of
#: every namespace and filter by label in the operator).
WATCHED: Final = ("deployments", "services", "serviceaccounts", "rolebindings", "inferencepools", "pods")


def crd() -> dict[str, Any]:
    """The vendored InferencePool CRD, as one document."""
    doc = yaml.safe_load(CRD_FILE.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
        raise RuntimeError(f"{CRD_FILE}: not a CustomResourceDefinition")
    return doc


def operator_flags(pools: bool) -> list[str]:
    """The operator's ``--inference-pools`` for a run with or without pools (``off`` without:
    the chart's ``inferencePool.enabled: false``, so no run depends on discovery failing)."""
    return ["--inference-pools", "auto" if pools else "off"]


async def count_objects(http: httpx.AsyncClient, namespace: str) -> dict[str, int]:
    """How many of each :data:`COUNTED` resource the namespace holds (one page of one item and
    ``remainingItemCount``: no full list of a thousand objects). A resource not served counts 0."""
    out: dict[str, int] = {}
    for resource, path in COUNTED:
        response = await http.get(path.format(ns=namespace), params={"limit": 1})
        if response.status_code == 404:
            out[resource] = 0
            continue
        response.raise_for_status()
        body = response.json()
        out[resource] = len(body.get("items") or []) + int(
            (body.get("metadata") or {}).get("remainingItemCount") or 0
        )
    return out


async def pickers_ready(http: httpx.AsyncClient, namespace: str) -> dict[str, int]:
    """Managed pickers (Deployments labelled as such) and how many have a ready replica."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    selector = f"{keys.LABEL_COMPONENT}={keys.COMPONENT_ENDPOINT_PICKER}"
    total = ready = 0
    params: dict[str, Any] = {"labelSelector": selector, "limit": 500}
    while True:
        response = await http.get(path, params=params)
        response.raise_for_status()
        body = response.json()
        for item in body.get("items") or []:
            total += 1
            ready += int(((item.get("status") or {}).get("readyReplicas") or 0) >= 1)
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return {"pickers": total, "ready": ready}
        params["continue"] = token


def pool_reasons(workloads: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``PoolAccepted`` ``status/reason`` over the workloads seen (``none`` where absent)."""
    out: dict[str, int] = {}
    for obj in workloads:
        conditions = (obj.get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c.get("type") == "PoolAccepted"), None)
        key = f"{found.get('status')}/{found.get('reason')}" if found else "none"
        out[key] = out.get(key, 0) + 1
    return out


_WATCH = re.compile(r"^(apiserver_watch_events_(?:total|sizes_sum))\{([^}]*)\} (\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def watch_events(text: str) -> dict[str, dict[str, float]]:
    """``{resource: {"events": n, "bytes": b}}`` of the apiserver's watch events sent to all
    watchers so far (``apiserver_watch_events_total`` and ``..._sizes_sum``), for :data:`WATCHED`."""
    out: dict[str, dict[str, float]] = {}
    for name, labels, value in _WATCH.findall(text):
        fields = dict(_LABEL.findall(labels))
        resource = fields.get("resource") or fields.get("kind", "").lower() + "s"
        if resource not in WATCHED:
            continue
        slot = out.setdefault(resource, {"events": 0.0, "bytes": 0.0})
        slot["events" if name.endswith("total") else "bytes"] += float(value)
    return out


def diff_watch(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    return {
        resource: {k: v - before.get(resource, {}).get(k, 0.0) for k, v in values.items()}
        for resource, values in after.items()
    }


def read_bytes(pid: int) -> int:
    """Bytes the process read so far (``rchar`` of ``/proc/<pid>/io``: its sockets included,
    so for the operator mostly the apiserver's answers and watch streams)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def foreign_deployment(name: str, namespace: str) -> dict[str, Any]:
    """A Deployment that is none of ours (no picker labels; 0 replicas: no pods), the size of
    a small application's: what the operator's picker watch receives and drops by label."""
    container = {
        "name": "app",
        "image": "registry.example/app:1.0",
        "args": ["--listen", ":8080", "--log-level", "info"],
        "env": [{"name": f"SETTING_{i}", "value": "x" * 32} for i in range(8)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }
