"""Reading the cluster the way the daemon operations need it: nodes, GPU pods, clusters, workloads.

Hosts of the daemon API are Kubernetes Nodes; a daemon "cluster" is an ``InferenceCluster``;
a workload is an ``InferenceWorkload`` (its ``status.workloadId`` is the daemon's
``workload_id``). Helpers here resolve a request's ``hosts``/``cluster`` selection to nodes and
summarise GPU occupancy from bound, non-terminated pods. All reads; one list per kind.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE, InferenceClusterSpec
from sparkrun_operator.api.resources import INFERENCE_CLUSTER, INFERENCE_WORKLOAD, RECIPE
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import NODES, PODS, resource_of
from sparkrun_operator.ops.errors import Invalid, NotFound
from sparkrun_operator.plan import cluster as cluster_plan
from sparkrun_operator.render import keys

__all__ = [
    "CLUSTERS",
    "RECIPES",
    "WORKLOADS",
    "Occupancy",
    "cluster_hosts",
    "node_view",
    "occupancy",
    "parse_time",
]

CLUSTERS = resource_of(INFERENCE_CLUSTER)
WORKLOADS = resource_of(INFERENCE_WORKLOAD)
RECIPES = resource_of(RECIPE)
DNS_SUBDOMAIN_MAX = 253


def parse_time(raw: Any) -> dt.datetime | None:
    if not raw:
        return None
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def epoch(raw: Any) -> float | None:
    value = parse_time(raw)
    return value.timestamp() if value else None


def check_name(name: str, what: str) -> str:
    """Refuse names Kubernetes cannot store (``Invalid`` naming the rule)."""
    import re

    if (
        not name
        or len(name) > DNS_SUBDOMAIN_MAX
        or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name)
    ):
        raise Invalid(
            f"{what} name {name!r} is not a valid Kubernetes object name "
            "(lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
        )
    return name


def _int(raw: Any) -> int:
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def node_view(node: Mapping[str, Any]) -> cluster_plan.ObservedNode:
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    return cluster_plan.ObservedNode(
        name=meta.get("name", ""),
        labels=meta.get("labels") or {},
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        capacity={k: _int(v) for k, v in (status.get("capacity") or {}).items()},
        allocatable={k: _int(v) for k, v in (status.get("allocatable") or {}).items()},
    )


@dataclass(frozen=True)
class GpuPod:
    """A bound, non-terminated pod and what it holds."""

    namespace: str
    name: str
    node: str
    phase: str
    gpus: int
    workload: str | None
    role: str | None
    image: str
    started: float | None

    def observed(self, gpu_resource: str) -> cluster_plan.ObservedGpuPod:
        return cluster_plan.ObservedGpuPod(
            node=self.node,
            phase=self.phase,
            requests={gpu_resource: self.gpus},
            workload=f"{self.namespace}/{self.workload}" if self.workload else None,
        )


def _pod_gpus(pod: Mapping[str, Any], resource: str) -> int:
    total = 0
    for container in pod.get("spec", {}).get("containers") or ():
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(resource) or (res.get("requests") or {}).get(resource)
        total += _int(value)
    return total


@dataclass
class Occupancy:
    """Nodes and their GPU pods, as observed at ``observed_at``."""

    nodes: dict[str, cluster_plan.ObservedNode]
    pods: list[GpuPod]
    observed_at: float

    def pods_on(self, node: str) -> list[GpuPod]:
        return [p for p in self.pods if p.node == node]


async def occupancy(
    rest: Kube, *, namespaces: Sequence[str] = (), gpu_resource: str = DEFAULT_GPU_RESOURCE
) -> Occupancy:
    """All nodes and every bound, non-terminated pod: of every namespace (one list), or of
    ``namespaces`` only (one list each: the chart's watchNamespaces grants pods nowhere else, so
    other namespaces' GPU pods are not seen; the scheduler still enforces capacity)."""
    nodes = {n.name: n for n in map(node_view, await rest.list(NODES, cached=True))}
    selector = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="
    listed = await asyncio.gather(
        *(rest.list(PODS, ns, field_selector=selector, cached=True) for ns in (tuple(namespaces) or (None,)))
    )
    pods = []
    for pod in (p for chunk in listed for p in chunk):
        meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
        labels = meta.get("labels") or {}
        containers = spec.get("containers") or [{}]
        pods.append(
            GpuPod(
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                node=spec.get("nodeName", ""),
                phase=status.get("phase", "Pending"),
                gpus=_pod_gpus(pod, gpu_resource),
                workload=labels.get(keys.LABEL_WORKLOAD),
                role=labels.get(keys.LABEL_ROLE),
                image=str(containers[0].get("image", "")),
                started=epoch(status.get("startTime")),
            )
        )
    return Occupancy(nodes=nodes, pods=pods, observed_at=dt.datetime.now(dt.UTC).timestamp())


async def get_cluster(rest: Kube, name: str) -> dict[str, Any]:
    """The InferenceCluster ``name``; ``NotFound`` (404) when absent."""
    found = await rest.get(CLUSTERS, name)
    if found is None:
        raise NotFound(f"Unknown cluster: {name}")
    return found


async def default_cluster_name(rest: Kube) -> str | None:
    clusters = await rest.list(CLUSTERS)
    refs = [
        cluster_plan.ClusterRef(
            name=c["metadata"]["name"],
            default=bool(c.get("spec", {}).get("default")),
            created=parse_time(c["metadata"].get("creationTimestamp")),
        )
        for c in clusters
    ]
    return cluster_plan.default_cluster(refs)


def members_of(cluster: Mapping[str, Any], nodes: Iterable[cluster_plan.ObservedNode]) -> list[str]:
    spec = InferenceClusterSpec.model_validate(cluster.get("spec") or {})
    return [n.name for n in cluster_plan.members(spec, nodes)]


def declared_hosts(cluster: Mapping[str, Any]) -> list[str]:
    """Hosts as the daemon shows them: the named nodes, or the members found by the selector."""
    spec = cluster.get("spec", {})
    names = (spec.get("nodes") or {}).get("names")
    if names is not None:
        return list(names)
    return [n.get("name", "") for n in (cluster.get("status") or {}).get("nodes") or ()]


async def cluster_hosts(
    rest: Kube,
    *,
    hosts: Sequence[str] | None,
    cluster: str | None,
    occupancy_: Occupancy | None = None,
    fallback_all: bool = True,
) -> tuple[list[str], str | None]:
    """``(hosts, cluster name)`` a request selects: explicit hosts, else the named cluster's
    members, else the default cluster's, else (``fallback_all``) every node with GPUs."""
    if hosts:
        return list(dict.fromkeys(hosts)), cluster
    nodes = list((occupancy_.nodes if occupancy_ else {}).values())
    if not nodes:
        nodes = [node_view(n) for n in await rest.list(NODES)]
    name = cluster or await default_cluster_name(rest)
    if name is not None:
        found = await get_cluster(rest, name)
        named = (found.get("spec", {}).get("nodes") or {}).get("names")
        return (list(named) if named is not None else members_of(found, nodes)), name
    if not fallback_all:
        return [], None
    gpu_nodes = [n.name for n in nodes if n.allocatable.get(DEFAULT_GPU_RESOURCE, 0) > 0]
    return sorted(gpu_nodes or [n.name for n in nodes]), None


def workload_id_of(workload: Mapping[str, Any]) -> str:
    """The daemon workload id of an InferenceWorkload (its namespace/name until the controller
    has written ``status.workloadId``)."""
    status = workload.get("status") or {}
    found = status.get("workloadId")
    if found:
        return str(found)
    meta = workload.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_ready(workload: Mapping[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
