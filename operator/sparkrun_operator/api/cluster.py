"""``InferenceCluster``: a named pool of GPU nodes (sparkrun's cluster, Skyward's compute).

Cluster-scoped, like the Nodes it groups. Membership is by node names or a label selector.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.drain import ClusterDrainStatus, DrainSpec
from sparkrun_operator.api.history import REVISION_HASH_PATTERN, ClusterDrift
from sparkrun_operator.api.meta import DNS_LABEL, Condition, KubeModel, LabelSelector, Toleration
from sparkrun_operator.api.queue import ClusterQueueField

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class NodeMembership(KubeModel):
    """Which nodes belong to the cluster: exactly one of names or selector."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.names) != has(self.selector)",
                "set exactly one of nodes.names or nodes.selector",
            )
        )
    )

    names: list[bounds.NodeName] | None = Field(
        default=None,
        description="Node names.",
        min_length=1,
        max_length=5000,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    selector: LabelSelector | None = Field(default=None, description="Label selector over Nodes.")


class InferenceClusterSpec(KubeModel):
    """Desired state of a GPU node pool."""

    nodes: NodeMembership = Field(description="Member nodes, by names or by label selector.")
    min_ready_nodes: int = Field(
        default=1, description="Nodes that must be Ready for the cluster to be Ready.", ge=0, le=100_000
    )
    gpu_resource: str = Field(
        default=DEFAULT_GPU_RESOURCE,
        description="Extended resource name of the GPUs (nvidia.com/gpu, amd.com/gpu ...). Applied "
        "on request: "
        "a change is recorded in status.drift and the value in status.applied stays in use (workloads keep "
        "their pods) until spec.approve names status.drift.revision.",
        min_length=1,
        max_length=253,
    )
    queue_name: str | None = Field(
        default=None,
        description="Kueue LocalQueue label put on workloads that use this cluster.",
        max_length=63,
        pattern=DNS_LABEL,
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        description="Tolerations added to pods of workloads on this cluster.",
        max_length=32,
    )
    description: str | None = Field(default=None, description="Free text for humans.", max_length=1024)
    default: bool = Field(
        default=False,
        description="Use for workloads that name no cluster. At most one cluster may be the default; the "
        "operator marks extra ones Degraded.",
    )
    approve: str | None = Field(
        default=None,
        description="Apply the recorded drift whose hash (status.drift.revision) is this value; any "
        "other value "
        "applies nothing (sparkrun-k8s rollout apply --cluster NAME).",
        pattern=REVISION_HASH_PATTERN,
        max_length=10,
    )
    drain: DrainSpec | None = Field(
        default=None,
        description="Drain and replace: move serving groups off cordoned member nodes one group at a "
        "time (docs/day-two.md).",
    )


class AppliedClusterSettings(KubeModel):
    """The apply-on-request fields as in use (workloads are placed with these)."""

    gpu_resource: str = Field(description="The GPU extended resource in use.", max_length=253)
    revision: str = Field(description="Hash of these values.", pattern=REVISION_HASH_PATTERN, max_length=10)


class GPUCounts(KubeModel):
    """GPU accounting of a node or of the whole cluster."""

    capacity: int = Field(default=0, description="GPUs the node(s) report as capacity.", ge=0)
    allocatable: int = Field(default=0, description="GPUs allocatable to pods.", ge=0)
    allocated: int = Field(default=0, description="GPUs requested by bound, non-terminated pods.", ge=0)
    free: int = Field(default=0, description="allocatable minus allocated.", ge=0)


class NodeStatus(KubeModel):
    """One member node."""

    name: str = Field(description="Node name.")
    ready: bool = Field(description="Node condition Ready is True.")
    schedulable: bool = Field(description="Not cordoned and ready.")
    gpu_product: str | None = Field(default=None, description="GPU product label (nvidia.com/gpu.product).")
    gpu_memory_mib: int | None = Field(
        default=None,
        alias="gpuMemoryMiB",
        ge=0,
        le=1 << 24,
        description="Memory per GPU in MiB, from the node label nvidia.com/gpu.memory (GPU feature "
        "discovery or the telemetry agent); absent when the node has no such label.",
    )
    driver_version: str | None = Field(
        default=None,
        max_length=63,
        description="The NVIDIA driver's version, from the node label nvidia.com/cuda.driver-version.full, "
        "else nvidia.com/cuda.driver.major/minor/rev joined with dots; absent when unlabelled.",
    )
    gpus: GPUCounts = Field(default_factory=GPUCounts, description="GPU accounting of this node.")
    workloads: list[str] = Field(
        default_factory=list, description="InferenceWorkloads (namespace/name) with pods on this node."
    )


class ClusterTotals(KubeModel):
    """Totals over all member nodes."""

    nodes: int = Field(default=0, description="Member nodes.", ge=0)
    ready_nodes: int = Field(default=0, description="Member nodes that are Ready.", ge=0)
    gpus: GPUCounts = Field(default_factory=GPUCounts, description="GPU totals.")


class InferenceClusterStatus(KubeModel):
    """Observed state of the node pool."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready (minReadyNodes are ready), Degraded, UpToDate, and QueueReady (with queueName).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    nodes: list[NodeStatus] = Field(default_factory=list, description="Per-node state.")
    totals: ClusterTotals = Field(default_factory=ClusterTotals, description="Totals over member nodes.")
    gpu_product: str | None = Field(
        default=None, description="The GPU product when all member nodes share one, else 'mixed'."
    )
    applied: AppliedClusterSettings | None = Field(
        default=None,
        description="The apply-on-request fields in use (the spec's at first sight, then on each approve).",
    )
    drift: ClusterDrift | None = Field(
        default=None,
        description="Spec values recorded but not applied: approve status.drift.revision to apply them.",
    )
    drain: ClusterDrainStatus | None = Field(
        default=None, description="The drain of cordoned member nodes: request, nodes, each group's move."
    )
    queue: ClusterQueueField = None
