"""Kueue as the operator sees it (issue 32): an InferenceWorkload's ``status.queue`` and an
InferenceCluster's ``status.queue``.

Positions are Kueue's own (its visibility API, ``pendingworkloads`` of a LocalQueue), counted
from 0 as Kueue counts them: 0 is the next workload the queue admits.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sparkrun_operator.api.meta import KubeModel

#: The most LocalQueues an InferenceCluster's ``status.queue.namespaces`` lists.
MAX_CLUSTER_QUEUE_NAMESPACES = 64
#: How far into a LocalQueue positions are read (the visibility API's ``limit``): a workload
#: further back is reported as queued with its position unknown (``docs/concepts.md``).
POSITION_LIMIT = 200

_Count = Annotated[int, Field(ge=0, le=10_000_000)]


class WorkloadQueueStatus(KubeModel):
    """Where the workload's JobSets stand in Kueue (with a queue name: the workload's
    ``scheduling.queueName``, else its InferenceCluster's ``queueName``)."""

    name: str = Field(description="The Kueue LocalQueue (in the workload's namespace).", max_length=63)
    cluster_queue: str | None = Field(
        default=None,
        description="The ClusterQueue the LocalQueue feeds (its spec.clusterQueue).",
        max_length=253,
    )
    admitted: bool = Field(
        default=False, description="Every JobSet of the workload is admitted (Kueue unsuspended it)."
    )
    waiting: int = Field(
        default=0, description="JobSets of the workload that Kueue has not admitted yet.", ge=0
    )
    position_in_local_queue: int | None = Field(
        default=None,
        description="Kueue's position of the first waiting JobSet in the LocalQueue (0: next to be "
        "admitted); unset when not waiting, or unknown (beyond the first 200, or not readable).",
        ge=0,
    )
    position_in_cluster_queue: int | None = Field(
        default=None, description="Its position in the ClusterQueue, as Kueue counts it (0: next).", ge=0
    )
    message: str = Field(default="", description="The same, in words.", max_length=1024)


class LocalQueueState(KubeModel):
    """The cluster's LocalQueue in one namespace where a workload on the cluster runs."""

    namespace: str = Field(description="Namespace of the LocalQueue.", max_length=63)
    exists: bool = Field(description="The LocalQueue exists.")
    cluster_queue: str | None = Field(default=None, description="Its spec.clusterQueue.", max_length=253)
    pending: _Count = Field(default=0, description="Kueue's status.pendingWorkloads of the LocalQueue.")
    admitted: _Count = Field(default=0, description="Kueue's status.admittedWorkloads of the LocalQueue.")


class ClusterQueueStatus(KubeModel):
    """The InferenceCluster's ``queueName`` as Kueue sees it (condition ``QueueReady``)."""

    name: str = Field(description="spec.queueName.", max_length=63)
    kueue_installed: bool | None = Field(
        default=None,
        description="Kueue's LocalQueue CRD (localqueues.kueue.x-k8s.io) is installed (unset: not read yet).",
    )
    namespaces: list[LocalQueueState] = Field(
        default_factory=list,
        description="The LocalQueue of that name in each namespace with a workload on the cluster "
        "that uses it (at most 64, by namespace).",
        max_length=MAX_CLUSTER_QUEUE_NAMESPACES,
    )


#: An InferenceWorkload's ``status.queue``.
WorkloadQueueField = Annotated[
    WorkloadQueueStatus | None,
    Field(
        description="Where the workload's JobSets stand in Kueue: its LocalQueue, admitted or its "
        "position (with a queue name; condition Admitted)."
    ),
]
#: An InferenceCluster's ``status.queue``.
ClusterQueueField = Annotated[
    ClusterQueueStatus | None,
    Field(
        description="spec.queueName as Kueue sees it: the LocalQueue per namespace (condition QueueReady)."
    ),
]
