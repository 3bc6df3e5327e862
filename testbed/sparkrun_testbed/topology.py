"""Fake GPU nodes: the cluster shape a testbed pretends to have.

A :class:`Topology` is a tuple of :class:`NodePool` s. Each pool becomes ``count`` Node objects
named ``<prefix>-<i>`` that carry ``nvidia.com/gpu`` capacity and the ``nvidia.com/gpu.product``
label the GPU operator's feature discovery would set on a real cluster. KWOK manages them
(annotation ``kwok.x-k8s.io/node: fake``) and keeps them Ready; the real scheduler places pods on
them by their capacity. Everything here is pure: it only builds manifests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
POOL_LABEL = "sparkrun.dev/testbed-pool"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
PROCESS_RUNTIME_LABEL = "sparkrun.dev/testbed-runtime"
PROCESS_TAINT = {"key": PROCESS_RUNTIME_LABEL, "value": "process", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodePool:
    """``count`` identical fake nodes named ``<prefix>-0 .. <prefix>-<count-1>``.

    ``gpus`` may be 0 for CPU-only nodes (the ``nvidia.com/gpu`` resource is then omitted,
    as on a real node without the device plugin). ``labels`` are added to the defaults.
    """

    prefix: str = "gpu"
    count: int = 2
    gpus: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    # Process nodes (testbed/process_runtime.py): pods on them run as local processes, and KWOK
    # leaves them alone (no kwok annotation); the process runtime registers and heartbeats them.
    process: bool = False
    # Taints of the pool's nodes (e.g. PROCESS_TAINT, so only pods that tolerate it run there).
    taints: tuple[dict[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.count < 0 or self.gpus < 0 or self.pods < 1:
            raise ValueError(f"node pool {self.prefix!r}: count and gpus must be >= 0, pods >= 1")

    def node_names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class Topology:
    """The fake nodes of one testbed. The default is two nodes with 8 H100s each."""

    pools: tuple[NodePool, ...] = (NodePool(),)

    def __post_init__(self) -> None:
        names = [name for pool in self.pools for name in pool.node_names()]
        if len(names) != len(set(names)):
            raise ValueError("node pools produce duplicate node names; give each pool its own prefix")

    @classmethod
    def uniform(cls, *, nodes: int, gpus_per_node: int, gpu_product: str | None = None) -> Topology:
        """One pool of ``nodes`` nodes with ``gpus_per_node`` GPUs each."""
        pool = NodePool(count=nodes, gpus=gpus_per_node)
        if gpu_product is not None:
            pool = dataclasses.replace(pool, gpu_product=gpu_product)
        return cls(pools=(pool,))

    def node_names(self) -> list[str]:
        return [name for pool in self.pools for name in pool.node_names()]

    def process_node_names(self) -> list[str]:
        """Names of the nodes whose pods run as local processes (see :class:`NodePool`)."""
        return [name for pool in self.pools if pool.process for name in pool.node_names()]

    def max_gpus_per_node(self) -> int:
        return max((pool.gpus for pool in self.pools if pool.count), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {"pools": [vars(pool) for pool in self.pools]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Topology:
        return cls(pools=tuple(NodePool(**pool) for pool in data["pools"]))


def node_manifests(topology: Topology) -> list[dict[str, Any]]:
    """Node objects for every node of ``topology``, status included.

    The apiserver keeps ``status`` given at create for Nodes, and KWOK's ``node-initialize``
    stage keeps existing ``capacity``/``allocatable``, so the GPU count survives; KWOK adds the
    Ready condition and addresses.
    """
    manifests: list[dict[str, Any]] = []
    for pool in topology.pools:
        resources: dict[str, str] = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
        labels = {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            POOL_LABEL: pool.prefix,
        }
        annotations = {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE}
        if pool.process:
            labels[PROCESS_RUNTIME_LABEL] = "process"
            annotations = {}
        else:
            labels["type"] = "kwok"
        if pool.gpus:
            resources[GPU_RESOURCE] = str(pool.gpus)
            labels[GPU_PRODUCT_LABEL] = pool.gpu_product
            labels[GPU_COUNT_LABEL] = str(pool.gpus)
        labels.update(pool.labels)
        for name in pool.node_names():
            manifests.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": dict(annotations),
                        "labels": {**labels, "kubernetes.io/hostname": name},
                    },
                    "spec": {"taints": [dict(t) for t in pool.taints]} if pool.taints else {},
                    "status": {"capacity": dict(resources), "allocatable": dict(resources)},
                }
            )
    return manifests
