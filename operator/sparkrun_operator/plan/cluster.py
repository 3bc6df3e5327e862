"""The InferenceCluster planner: member nodes and their pods -> the cluster's status.

Pure (time is passed in). Per member node: readiness, schedulability (ready and not cordoned),
GPU product (``nvidia.com/gpu.product`` label), memory per GPU and the driver's version (the GPU
feature discovery labels of ``api/telemetry.py``, whoever wrote them: GFD or the telemetry agent;
memory read as the placement check reads it, ``plan/fit.py``), GPU capacity/allocatable from the
node, allocated as the GPU requests of bound, non-terminated pods, free = allocatable - allocated,
and the InferenceWorkloads (``namespace/name``) with pods there. Ready when at least ``minReadyNodes``
member nodes are ready. At most one cluster is the default: when several say ``default: true``,
the oldest (then the first by name) is, and the others are marked Degraded.

Apply on request (ADR 0046, Skyward's semantics for fields that would move running pods):
``spec.gpuResource`` in use is ``status.applied`` (the spec's at first sight). A spec that
differs is recorded as ``status.drift`` (the hash of the desired values, since when, each field
applied and desired) with ``UpToDate=False DriftPending``, and is applied when ``spec.approve``
names that hash once a previous status has shown it as drift. GPU accounting and workload
placement use the applied value.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import echo
from sparkrun_operator.api.cluster import (
    AppliedClusterSettings,
    ClusterTotals,
    GPUCounts,
    InferenceClusterSpec,
    InferenceClusterStatus,
    NodeStatus,
)
from sparkrun_operator.api.history import ClusterDrift, ClusterDriftItem
from sparkrun_operator.api.meta import Condition, LabelSelector, set_condition
from sparkrun_operator.api.telemetry import (
    DRIVER_MAJOR_LABEL,
    DRIVER_MINOR_LABEL,
    DRIVER_REV_LABEL,
    DRIVER_VERSION_LABEL,
)
from sparkrun_operator.plan.fit import gpu_labels

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
TERMINATED_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: What a driver version label may hold (a label value's own alphabet, at most 63 characters).
_VERSION_CHARS: Final = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-")
_VERSION_MAX: Final = 63
_VERSION_PART_MAX: Final = 9


@dataclass(frozen=True, kw_only=True)
class ObservedNode:
    """A Node, reduced to what the cluster status needs."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = False
    unschedulable: bool = False
    #: Keys of its NoSchedule and NoExecute taints (drain and replace: ``plan/drain.py``).
    taints: frozenset[str] = frozenset()
    #: GPU count per resource name, from ``status.capacity`` / ``status.allocatable``.
    capacity: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ObservedGpuPod:
    """A pod bound to a node, with its GPU requests per resource."""

    node: str
    phase: str = "Running"
    requests: Mapping[str, int] = field(default_factory=dict)
    #: ``namespace/name`` of the owning InferenceWorkload, when it has the workload label.
    workload: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClusterRef:
    """Another InferenceCluster, for the single-default rule."""

    name: str
    default: bool
    created: dt.datetime | None = None


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (metav1.LabelSelector semantics)."""
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions or []:
        present = req.key in labels
        values = req.values or []
        if req.operator == "In" and not (present and labels[req.key] in values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def members(spec: InferenceClusterSpec, nodes: Iterable[ObservedNode]) -> list[ObservedNode]:
    """Member nodes, sorted by name."""
    if spec.nodes.names is not None:
        wanted = set(spec.nodes.names)
        picked = [n for n in nodes if n.name in wanted]
    elif spec.nodes.selector is not None:
        selector = spec.nodes.selector
        picked = [n for n in nodes if matches(selector, n.labels)]
    else:
        picked = []
    return sorted(picked, key=lambda n: n.name)


def default_cluster(clusters: Iterable[ClusterRef]) -> str | None:
    """The cluster that is *the* default: the oldest of those marked default, then by name."""
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    marked = sorted((r for r in clusters if r.default), key=lambda r: (r.created or far, r.name))
    return marked[0].name if marked else None


def driver_version(labels: Mapping[str, str]) -> str | None:
    """The driver's version from a node's GFD labels: the full version label, else major.minor
    (.rev when labelled) from the older labels; ``None`` when unlabelled or malformed."""
    full = labels.get(DRIVER_VERSION_LABEL)
    if isinstance(full, str) and 0 < len(full) <= _VERSION_MAX and set(full) <= _VERSION_CHARS:
        return full
    keys = (DRIVER_MAJOR_LABEL, DRIVER_MINOR_LABEL, DRIVER_REV_LABEL)
    major, minor, rev = (labels.get(key) for key in keys)
    if not (_digits(major) and _digits(minor)):
        return None
    return f"{major}.{minor}.{rev}" if _digits(rev) else f"{major}.{minor}"


def _digits(value: str | None) -> bool:
    if not isinstance(value, str) or not 0 < len(value) <= _VERSION_PART_MAX:
        return False
    return value.isascii() and value.isdigit()


def node_status(node: ObservedNode, *, gpu_resource: str, pods: Sequence[ObservedGpuPod]) -> NodeStatus:
    """One member node's status from the node and the pods bound to it."""
    live = [p for p in pods if p.node == node.name and p.phase not in TERMINATED_PHASES]
    allocated = sum(p.requests.get(gpu_resource, 0) for p in live)
    allocatable = node.allocatable.get(gpu_resource, 0)
    return NodeStatus(
        name=node.name,
        ready=node.ready,
        schedulable=node.ready and not node.unschedulable,
        gpu_product=node.labels.get(GPU_PRODUCT_LABEL),
        gpu_memory_mib=gpu_labels(node.labels).memory_mib,
        driver_version=driver_version(node.labels),
        gpus=GPUCounts(
            capacity=node.capacity.get(gpu_resource, 0),
            allocatable=allocatable,
            allocated=allocated,
            free=max(0, allocatable - allocated),
        ),
        workloads=sorted({p.workload for p in live if p.workload}),
    )


def plan_status(
    *,
    name: str,
    spec: InferenceClusterSpec,
    generation: int,
    previous: InferenceClusterStatus,
    nodes: Sequence[ObservedNode],
    pods: Sequence[ObservedGpuPod],
    clusters: Sequence[ClusterRef],
    now: dt.datetime,
) -> InferenceClusterStatus:
    """The complete status of cluster ``name``."""
    applied, drift = plan_applied(spec=spec, previous=previous, now=now)
    gpu_resource = applied.gpu_resource
    member_nodes = members(spec, nodes)
    statuses = [node_status(n, gpu_resource=gpu_resource, pods=pods) for n in member_nodes]
    totals = _totals(statuses)
    products = {s.gpu_product for s in statuses if s.gpu_product}
    product = None if not products else (products.pop() if len(products) == 1 else "mixed")

    conditions: list[Condition] = [cond.model_copy() for cond in previous.conditions]

    def put(type_: str, ok: bool, reason: str, message: str) -> None:
        status: Literal["True", "False"] = "True" if ok else "False"
        set_condition(
            conditions,
            type=type_,
            status=status,
            reason=reason,
            message=message,
            observed_generation=generation,
            now=now,
        )

    enough = totals.ready_nodes >= spec.min_ready_nodes
    put(
        c.READY,
        enough,
        c.REASON_ENOUGH_READY_NODES if enough else c.REASON_NOT_ENOUGH_READY_NODES,
        f"{totals.ready_nodes} of {totals.nodes} member nodes ready (minReadyNodes {spec.min_ready_nodes}); "
        f"{totals.gpus.free} of {totals.gpus.allocatable} {gpu_resource} free",
    )
    put(
        c.UP_TO_DATE,
        drift is None,
        c.REASON_REVISION_CURRENT if drift is None else c.REASON_DRIFT_PENDING,
        f"the spec is applied (revision {applied.revision})" if drift is None else drift_message(drift),
    )

    problems = _problems(
        name=name, spec=spec, member_nodes=member_nodes, statuses=statuses, clusters=clusters
    )
    if problems:
        put(c.DEGRADED, True, problems[0][0], "; ".join(message for _, message in problems))
    else:
        put(c.DEGRADED, False, c.REASON_AS_EXPECTED, "all member nodes ready")

    return InferenceClusterStatus(
        observed_generation=generation,
        conditions=[cond for cond in conditions if cond.type in (c.READY, c.DEGRADED, c.UP_TO_DATE)],
        nodes=statuses,
        totals=totals,
        gpu_product=product,
        applied=applied,
        drift=drift,
    )


def desired_values(spec: InferenceClusterSpec) -> dict[str, str]:
    """The apply-on-request fields of ``spec`` (spec field -> value)."""
    return {"gpuResource": spec.gpu_resource}


def _applied_values(applied: AppliedClusterSettings) -> dict[str, str]:
    return {"gpuResource": applied.gpu_resource}


def settings_hash(values: Mapping[str, str]) -> str:
    """The revision of a set of apply-on-request values: 10 hex digits of their canonical JSON."""
    canonical = json.dumps(dict(values), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def plan_applied(
    *, spec: InferenceClusterSpec, previous: InferenceClusterStatus, now: dt.datetime
) -> tuple[AppliedClusterSettings, ClusterDrift | None]:
    """The values in use and the drift, if any: the spec's at first sight (or when they equal
    it, or when ``spec.approve`` names their hash and the previous status showed that hash as
    drift: an approval counts only for what was shown, so one left from an earlier change never
    applies a value unseen); else the previous ones, with the difference recorded (``since``
    kept while the cluster stays drifted)."""
    desired = desired_values(spec)
    revision = settings_hash(desired)
    in_use = previous.applied
    shown = previous.drift is not None and previous.drift.revision == revision
    if in_use is None or _applied_values(in_use) == desired or (spec.approve == revision and shown):
        return AppliedClusterSettings(gpu_resource=spec.gpu_resource, revision=revision), None
    current = _applied_values(in_use)
    applied = AppliedClusterSettings(gpu_resource=in_use.gpu_resource, revision=settings_hash(current))
    items = [
        ClusterDriftItem(field=name, applied=current.get(name), desired=value)
        for name, value in desired.items()
        if current.get(name) != value
    ]
    since = previous.drift.since if previous.drift is not None else now
    return applied, ClusterDrift(revision=revision, since=since, items=items)


def drift_message(drift: ClusterDrift) -> str:
    """The UpToDate condition's message while the cluster is drifted."""
    changed = "; ".join(
        f"spec.{item.field} {echo(item.desired, 96)} is recorded, {echo(item.applied, 96)} stays in use"
        for item in drift.items
    )
    return (
        f"{changed}; set spec.approve to {drift.revision} to apply it (workloads on this cluster are "
        "then placed with the new value)"
    )


def _totals(statuses: Sequence[NodeStatus]) -> ClusterTotals:
    return ClusterTotals(
        nodes=len(statuses),
        ready_nodes=sum(1 for s in statuses if s.ready),
        gpus=GPUCounts(
            capacity=sum(s.gpus.capacity for s in statuses),
            allocatable=sum(s.gpus.allocatable for s in statuses),
            allocated=sum(s.gpus.allocated for s in statuses),
            free=sum(s.gpus.free for s in statuses),
        ),
    )


def _problems(
    *,
    name: str,
    spec: InferenceClusterSpec,
    member_nodes: Sequence[ObservedNode],
    statuses: Sequence[NodeStatus],
    clusters: Sequence[ClusterRef],
) -> list[tuple[str, str]]:
    """(Degraded reason, message) of each problem found, most important first."""
    problems: list[tuple[str, str]] = []
    if spec.default:
        chosen = default_cluster([*clusters, ClusterRef(name=name, default=True)])
        if chosen is not None and chosen != name:
            problems.append(
                (
                    c.REASON_DUPLICATE_DEFAULT,
                    f"InferenceCluster {chosen!r} is already the default; unset spec.default here or there",
                )
            )
    if spec.nodes.names is not None:
        missing = sorted(set(spec.nodes.names) - {n.name for n in member_nodes})
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            problems.append((c.REASON_NODES_MISSING, f"{len(missing)} named nodes do not exist: {shown}"))
    not_ready = [s.name for s in statuses if not s.ready]
    if not_ready:
        shown = ", ".join(not_ready[:10]) + (" ..." if len(not_ready) > 10 else "")
        problems.append((c.REASON_NODES_NOT_READY, f"{len(not_ready)} member nodes not ready: {shown}"))
    return problems
