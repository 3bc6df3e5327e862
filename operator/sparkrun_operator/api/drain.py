"""Drain and replace (ADR 0049): the InferenceCluster's ``spec.drain`` / ``status.drain``, the
workloads' ``status.drain``, and the ``plugins.sparkrun-k8s.clusters.drain`` operation's models.

The platform cordons a member node (``kubectl cordon``, or the ``node.kubernetes.io/unschedulable``
taint); the operator moves every serving group (one JobSet per replica) with a pod there, one
group at a time across the cluster: the group first leaves the gateway's routing, then one of its
pods on the drained node is evicted (Eviction API, PodDisruptionBudgets honoured), which restarts
the whole group through its JobSet failure policy, ranks kept by construction; the next group
moves once this one is Ready again. ``mode: OnRequest`` (default) drains when ``spec.drain.request``
changes to a new token (the daemon operation writes one); ``Automatic`` drains whenever a member
node is cordoned.

Pure: models only.
"""

from __future__ import annotations

import datetime as dt
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkrun_operator.api import bounds
from sparkrun_operator.api.meta import DNS_LABEL, DNS_SUBDOMAIN, KubeModel

#: The shape of a drain request token: short, printable, no spaces (an opaque id).
REQUEST_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
REQUEST_MAX_LENGTH: Final = 64
#: The most groups one status lists (the rest is counted in ``remaining``), and nodes it names.
MAX_GROUPS: Final = 64
MAX_NODES: Final = 100
#: The most nodes one group lists (its ranks' nodes; a group has at most this many ranks shown).
MAX_GROUP_NODES: Final = 64
MESSAGE_MAX_LENGTH: Final = 1024
#: The most pods one group lists as out of routing (its leaders: one per group today).
MAX_UNROUTED: Final = 8
#: A group's message: short, so 64 groups keep ``status.drain`` small (it is copied into workloads).
GROUP_MESSAGE_MAX_LENGTH: Final = 256

DrainMode = Literal["OnRequest", "Automatic"]
DrainState = Literal["Idle", "Draining", "Done", "Blocked"]
GroupState = Literal["Pending", "Moving", "Ready", "Blocked"]


class DrainSpec(KubeModel):
    """How the operator moves serving groups off cordoned member nodes."""

    mode: DrainMode = Field(
        default="OnRequest",
        description="OnRequest: drain when spec.drain.request changes (the clusters.drain operation "
        "writes a new token); Automatic: drain whenever a member node is cordoned or carries the "
        "node.kubernetes.io/unschedulable taint.",
    )
    request: str | None = Field(
        default=None,
        description="An opaque token; a value the status has not handled (status.drain.request) "
        "starts a drain of the nodes cordoned at that time.",
        pattern=REQUEST_PATTERN,
        max_length=REQUEST_MAX_LENGTH,
    )
    settle_seconds: int = Field(
        default=10,
        description="Seconds between taking a group out of the gateway's routing and evicting its "
        "pod: requests in flight on it finish meanwhile.",
        ge=0,
        le=600,
    )
    group_timeout_seconds: int = Field(
        default=900,
        description="A moved group not Ready again within this many seconds of its eviction blocks "
        "the drain (state Blocked) rather than holding it forever.",
        ge=30,
        le=86_400,
    )
    allow_last_replica: bool = Field(
        default=False,
        description="Also move a workload's only ready replica (serving of that model stops while "
        "it moves); without it such a group is Blocked.",
    )
    allow_last_replica_for: str | None = Field(
        default=None,
        description="allowLastReplica for one request only: while it equals request (the "
        "clusters.drain operation's allow_last_replica writes its token here; a later request "
        "does not inherit it).",
        pattern=REQUEST_PATTERN,
        max_length=REQUEST_MAX_LENGTH,
    )


class GroupDrain(KubeModel):
    """One serving group (a replica's JobSet) the drain moves."""

    namespace: str = Field(description="The workload's namespace.", max_length=63, pattern=DNS_LABEL)
    workload: str = Field(description="The InferenceWorkload.", max_length=253, pattern=DNS_SUBDOMAIN)
    replica: int = Field(description="The replica (its JobSet) that moves.", ge=0, le=100_000)
    jobset: str = Field(description="The JobSet moved.", max_length=253)
    state: GroupState = Field(
        description="Pending (waits its turn), Moving (out of routing, then evicted), Ready (serving "
        "again off the drained nodes) or Blocked (see message)."
    )
    from_nodes: list[bounds.NodeName] = Field(
        default_factory=list,
        description="Nodes of the group's pods when the move began.",
        max_length=MAX_GROUP_NODES,
    )
    to_nodes: list[bounds.NodeName] = Field(
        default_factory=list,
        description="Nodes of the group's pods once Ready again.",
        max_length=MAX_GROUP_NODES,
    )
    pods: int = Field(default=0, description="Pods of the group when the move began.", ge=0, le=100_000)
    unrouted: list[str] = Field(
        default_factory=list,
        description="Pods (the group's leader) the gateway no longer routes to while the group moves.",
        max_length=MAX_UNROUTED,
    )
    message: str = Field(
        default="", description="What happens, or why it is blocked.", max_length=GROUP_MESSAGE_MAX_LENGTH
    )
    since: dt.datetime | None = Field(default=None, description="When the group entered its state.")
    unrouted_at: dt.datetime | None = Field(default=None, description="When it left the routing.")
    evicted_at: dt.datetime | None = Field(default=None, description="When its pod was evicted.")
    ready_at: dt.datetime | None = Field(default=None, description="When it was Ready again.")

    @property
    def key(self) -> tuple[str, str, int]:
        """``(namespace, workload, replica)``: the group's identity across passes."""
        return (self.namespace, self.workload, self.replica)


class ClusterDrainStatus(KubeModel):
    """The cluster's drain: which request, which nodes, every group's progress."""

    request: str | None = Field(
        default=None,
        description="The spec.drain.request this drain answers (handled once).",
        max_length=REQUEST_MAX_LENGTH,
    )
    state: DrainState = Field(
        default="Idle",
        description="Idle (nothing asked), Draining (a group moves or waits), Done (no group left on "
        "a drained node) or Blocked (a group cannot move: see the group's message).",
    )
    nodes: list[bounds.NodeName] = Field(
        default_factory=list,
        description="The member nodes being drained (cordoned or unschedulable-tainted).",
        max_length=MAX_NODES,
    )
    groups: list[GroupDrain] = Field(
        default_factory=list, description="The groups the drain moves, in order.", max_length=MAX_GROUPS
    )
    remaining: int = Field(default=0, description="Groups not listed (beyond the list's bound).", ge=0)
    message: str = Field(default="", description="A summary.", max_length=MESSAGE_MAX_LENGTH)
    started: dt.datetime | None = Field(default=None, description="When this drain began.")
    finished: dt.datetime | None = Field(default=None, description="When it ended Done.")


class WorkloadDrainStatus(KubeModel):
    """A workload's groups in its cluster's drain (copied from the cluster's status.drain)."""

    cluster: str = Field(description="The InferenceCluster draining.", max_length=253)
    request: str | None = Field(default=None, description="The drain request.", max_length=64)
    state: DrainState = Field(description="The cluster drain's state.")
    groups: list[GroupDrain] = Field(
        default_factory=list, description="This workload's groups in the drain.", max_length=MAX_GROUPS
    )


# -- the daemon operation -----------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DrainRequest(_Request):
    """Which InferenceCluster to drain, and whether to wait for the end."""

    cluster: str = Field(
        description="The InferenceCluster's name.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN
    )
    wait: bool = Field(
        default=True,
        description="Follow the drain (a feedback event per group) until Done or Blocked, or the "
        "timeout; false: return once the request is written.",
    )
    timeout_seconds: int = Field(default=1800, description="How long to follow the drain.", ge=1, le=86_400)
    allow_last_replica: bool = Field(
        default=False,
        description="Also move a workload's only ready replica, in this drain only (sets "
        "spec.drain.allowLastReplicaFor to its request token).",
    )


class DrainGroupReport(_Result):
    """One group's outcome."""

    workload: str = Field(description="namespace/name of the workload.", max_length=320)
    replica: int = Field(description="The replica.", ge=0)
    state: GroupState = Field(description="Its drain state.")
    from_nodes: list[str] = Field(default_factory=list, description="Nodes before.", max_length=64)
    to_nodes: list[str] = Field(default_factory=list, description="Nodes after.", max_length=64)
    message: str = Field(default="", description="What happened.", max_length=GROUP_MESSAGE_MAX_LENGTH)


class DrainResult(_Result):
    """The drain as last seen."""

    cluster: str = Field(description="The InferenceCluster.", max_length=253)
    request: str = Field(description="The token written to spec.drain.request.", max_length=64)
    state: DrainState = Field(description="Idle, Draining, Done or Blocked when the operation ended.")
    nodes: list[str] = Field(default_factory=list, description="Nodes drained.", max_length=MAX_NODES)
    groups: list[DrainGroupReport] = Field(
        default_factory=list, description="Each group's outcome.", max_length=MAX_GROUPS
    )
    message: str = Field(default="", description="The drain's summary.", max_length=MESSAGE_MAX_LENGTH)
    timed_out: bool = Field(default=False, description="The timeout passed before Done or Blocked.")
