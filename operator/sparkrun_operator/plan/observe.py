"""Raw Kubernetes objects (as the API returns them) -> the planners' observed-state types.

Pure and total: a malformed or foreign object gives ``None`` (it is not ours) rather than an
exception, because these run on every watch event of pods and nodes in the cluster.

The last part (:func:`recipe_of`, :func:`workload_cluster`, :func:`capacity`) turns the
operator's in-memory indexes (mappings of a key to the records stored under it) into what one
workload's planner looks at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from sparkrun_operator.api.benchmark import ScenarioResult
from sparkrun_operator.api.cluster import AppliedClusterSettings, InferenceClusterSpec
from sparkrun_operator.api.meta import LabelSelector
from sparkrun_operator.api.meta import (
    parse_time as parse_time,  # where the planner and controllers look for it
)
from sparkrun_operator.api.modelshape import ModelShape, shape_from_event
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.plan import cluster as cluster_plan
from sparkrun_operator.plan import failures, fit, served
from sparkrun_operator.plan.cluster import ClusterRef, ObservedGpuPod, ObservedNode
from sparkrun_operator.plan.poolobserve import picker_from as picker_from  # the pool's (issue 30)
from sparkrun_operator.plan.poolobserve import pool_from as pool_from
from sparkrun_operator.plan.workload import (
    NodeCapacity,
    ObservedCache,
    ObservedCluster,
    ObservedGate,
    ObservedJobSet,
    ObservedPod,
    ObservedRecipe,
)
from sparkrun_operator.plan.workload.model import EngineStart
from sparkrun_operator.render import keys

Obj = Mapping[str, Any]

#: The flag ``render/`` starts the engine with its served name by.
SERVED_NAME_FLAG: Final = "--served-model-name"


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Obj) -> Mapping[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _conditions(obj: Obj) -> list[Mapping[str, Any]]:
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return []
    return [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]


def _condition(obj: Obj, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def workload_key(obj: Obj) -> tuple[str, str] | None:
    """``(namespace, workload)`` of a child labelled with ``sparkrun.dev/workload``."""
    workload = _labels(obj).get(keys.LABEL_WORKLOAD)
    namespace = _meta(obj).get("namespace")
    if not workload or not namespace:
        return None
    return str(namespace), str(workload)


def gate_key(obj: Obj) -> tuple[str, str] | None:
    """``(namespace, workload)`` of a rollout gate's InferenceBenchmark."""
    workload = _labels(obj).get(keys.LABEL_GATE_WORKLOAD)
    namespace = _meta(obj).get("namespace")
    return (str(namespace), str(workload)) if workload and namespace else None


def gate_from(obj: Obj) -> ObservedGate | None:
    """A rollout gate's InferenceBenchmark: its revision, phase, results and failure."""
    meta = _meta(obj)
    labels = _labels(obj)
    revision = labels.get(keys.LABEL_REVISION)
    if not revision or not meta.get("name"):
        return None
    status = obj.get("status") or {}
    results = []
    for raw in status.get("results") or []:
        try:
            results.append(ScenarioResult.model_validate(raw))
        except ValueError:
            continue
    failed = _condition(obj, "Failed")
    failure = None
    if failed is not None and failed.get("status") == "True":
        failure = (str(failed.get("reason") or "Failed"), str(failed.get("message") or ""))
    return ObservedGate(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        revision=str(revision),
        template=str(labels.get(keys.LABEL_GATE_TEMPLATE) or ""),
        phase=status.get("phase"),
        results=tuple(results),
        failure=failure,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def jobset_from(obj: Obj) -> ObservedJobSet | None:
    """A JobSet of a workload (without leader readiness: see :func:`with_readiness`)."""
    meta = _meta(obj)
    labels = _labels(obj)
    if keys.LABEL_WORKLOAD not in labels or not meta.get("name"):
        return None
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping)
    assert isinstance(status, Mapping)
    terminal: Any = None
    terminal_time = None
    terminal_message = ""
    for type_ in ("Failed", "Completed"):
        cond = _condition(obj, type_)
        if cond is not None and cond.get("status") == "True":
            terminal = type_
            terminal_time = parse_time(cond.get("lastTransitionTime"))
            terminal_message = str(cond.get("message") or cond.get("reason") or "")
            break
    return ObservedJobSet(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        replica=_int(labels.get(keys.LABEL_REPLICA)),
        revision=labels.get(keys.LABEL_REVISION),
        suspended=bool(spec.get("suspend")),
        deleting=bool(meta.get("deletionTimestamp")),
        terminal=terminal,
        terminal_time=terminal_time,
        terminal_message=terminal_message,
        restarts=_int(status.get("restarts")) or 0,
        created=parse_time(meta.get("creationTimestamp")),
        jobs=sum(
            _int(rjob.get(k)) or 0
            for rjob in status.get("replicatedJobsStatus") or []
            if isinstance(rjob, Mapping)
            for k in ("active", "ready", "succeeded", "failed", "suspended")
        ),
        engine=engine_start(spec),
    )


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _at(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def engine_start(spec: Mapping[str, Any]) -> EngineStart | None:
    """What the leader's engine of a JobSet ``spec`` was started with: the ``vllm`` container's
    ``args`` (``vllm serve`` arguments, model first, as ``render/`` writes them) hold the model and
    ``--served-model-name``; ``None`` when they do not (whether ``status.model`` can carry them is
    the planner's check)."""
    leader = next((j for j in _items(spec.get("replicatedJobs")) if j.get("name") == keys.ROLE_LEADER), None)
    containers = _items(_at(leader, "template", "spec", "template", "spec", "containers"))
    engine = next((c for c in containers if c.get("name") == keys.CONTAINER_ENGINE), None)
    args = engine.get("args") if engine is not None else None
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        return None
    model, served_name = args[0], None
    for i, arg in enumerate(args):
        if arg == SERVED_NAME_FLAG:
            served_name = args[i + 1] if i + 1 < len(args) else None
            break
        if arg.startswith(SERVED_NAME_FLAG + "="):
            served_name = arg.partition("=")[2]
            break
    if not model or model.startswith("-") or not served_name:
        return None
    return EngineStart(model=model, served_name=served_name, capabilities=served.capabilities_of((), args))


def pod_from(obj: Obj) -> ObservedPod | None:
    """A pod of a workload's JobSet, or ``None`` for any other pod."""
    meta = _meta(obj)
    labels = _labels(obj)
    jobset = labels.get(keys.JOBSET_NAME_LABEL)
    if keys.LABEL_WORKLOAD not in labels or not jobset or not meta.get("name"):
        return None
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping)
    assert isinstance(status, Mapping)
    name = str(meta["name"])
    ready_cond = _condition(obj, "Ready")
    sched = _condition(obj, "PodScheduled")
    unschedulable = None
    scheduled_time = None
    if sched is not None:
        if sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
            unschedulable = str(sched.get("message") or "Unschedulable")
        elif sched.get("status") == "True":
            scheduled_time = parse_time(sched.get("lastTransitionTime"))
    running_time = None
    statuses = [cs for cs in status.get("containerStatuses") or [] if isinstance(cs, Mapping)]
    for cs in statuses:
        if cs.get("name") == keys.CONTAINER_ENGINE:
            state = cs.get("state")
            running = state.get("running") if isinstance(state, Mapping) else None
            if isinstance(running, Mapping):
                running_time = parse_time(running.get("startedAt"))
    ready = ready_cond is not None and ready_cond.get("status") == "True"
    # NB: without its log lines: they are redacted and kept at the pod event (plan/failures.py)
    failure = failures.failure_of(obj)
    return ObservedPod(
        name=name,
        jobset=str(jobset),
        role=str(labels.get(keys.LABEL_ROLE) or labels.get(keys.JOBSET_RJOB_LABEL) or ""),
        replica=_int(labels.get(keys.LABEL_REPLICA)),
        revision=labels.get(keys.LABEL_REVISION),
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        ip=status.get("podIP") or None,
        node=spec.get("nodeName") or None,
        unschedulable=unschedulable,
        scheduled_time=scheduled_time,
        running_time=running_time,
        ready_time=parse_time(ready_cond.get("lastTransitionTime")) if ready and ready_cond else None,
        failure=failure,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def with_readiness(jobset: ObservedJobSet, pods: Iterable[ObservedPod]) -> ObservedJobSet:
    """``jobset`` with ``leader_ready``: its leader pod is Ready and not being deleted."""
    ready = any(
        p.jobset == jobset.name and p.role == keys.ROLE_LEADER and p.ready and not p.deleting for p in pods
    )
    if ready == jobset.leader_ready:
        return jobset
    return replace(jobset, leader_ready=ready)


def _quantity(value: Any) -> int:
    """An integer extended-resource quantity (``"8"``); anything else counts as 0."""
    number = _int(value)
    return number if number is not None and number > 0 else 0


def _extended(resources: Any) -> dict[str, int]:
    if not isinstance(resources, Mapping):
        return {}
    return {str(k): _quantity(v) for k, v in resources.items() if "/" in str(k)}


def node_from(obj: Obj) -> ObservedNode | None:
    """A Node with its extended-resource capacity (GPUs)."""
    meta = _meta(obj)
    if not meta.get("name"):
        return None
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(status, Mapping)
    assert isinstance(spec, Mapping)
    ready = _condition(obj, "Ready")
    return ObservedNode(
        name=str(meta["name"]),
        labels=dict(_labels(obj)),
        ready=ready is not None and ready.get("status") == "True",
        unschedulable=bool(spec.get("unschedulable")),
        taints=frozenset(
            str(t.get("key"))
            for t in _items(spec.get("taints"))[:64]
            if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key")
        ),
        capacity=_extended(status.get("capacity")),
        allocatable=_extended(status.get("allocatable")),
    )


def gpu_pod_from(obj: Obj) -> ObservedGpuPod | None:
    """A bound pod that requests extended resources, with its effective requests.

    Effective request per resource: the larger of the containers' sum and any one init
    container (the scheduler's rule); for extended resources a limit implies the request.
    """
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    node = spec.get("nodeName")
    if not node:
        return None

    def requests(container: Any) -> dict[str, int]:
        if not isinstance(container, Mapping):
            return {}
        res = container.get("resources")
        if not isinstance(res, Mapping):
            return {}
        merged = _extended(res.get("limits"))
        merged.update(_extended(res.get("requests")))
        return merged

    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, value in requests(container).items():
            total[name] = total.get(name, 0) + value
    for container in spec.get("initContainers") or []:
        for name, value in requests(container).items():
            total[name] = max(total.get(name, 0), value)
    if not total:
        return None
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    key = workload_key(obj)
    return ObservedGpuPod(
        node=str(node),
        phase=str(status.get("phase") or "Pending"),
        requests=total,
        workload=f"{key[0]}/{key[1]}" if key else None,
    )


def cache_from(obj: Obj | None, *, name: str) -> ObservedCache:
    """The ModelCache ``name`` (``exists=False`` when ``obj`` is None).

    Storage ``create`` claims are named after the ModelCache.
    """
    if obj is None:
        return ObservedCache(name=name, exists=False)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping)
    assert isinstance(status, Mapping)
    storage = spec.get("storage") if isinstance(spec.get("storage"), Mapping) else {}
    assert isinstance(storage, Mapping)
    ready_cond = _condition(obj, "Ready")
    phase = status.get("phase")
    ready = phase == "Ready" or (ready_cond is not None and ready_cond.get("status") == "True")
    claim = storage.get("claimName") or (name if storage.get("create") else None)
    return ObservedCache(
        name=name,
        ready=bool(ready),
        phase=str(phase) if phase else None,
        message=str(ready_cond.get("message") or "") if ready_cond else "",
        claim_name=str(claim) if claim else None,
        path=str(storage.get("path") or "/"),
        resolved_revision=status.get("resolvedRevision") or None,
        node_name=status.get("nodeName") or None,
        access_modes=tuple(str(m) for m in status.get("accessModes") or ()),
        total_bytes=_total_bytes(status.get("manifest")),
        shape=shape_from_event(_snake(status.get("modelShape"))),
    )


def _total_bytes(manifest: Any) -> int | None:
    """``status.manifest.totalBytes`` when it is a positive whole number."""
    value = manifest.get("totalBytes") if isinstance(manifest, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _snake(shape: Any) -> Any:
    """``status.modelShape`` (camelCase) with the field names of the downloader's ``shape``."""
    if not isinstance(shape, Mapping):
        return None
    fields = ModelShape.model_fields
    return {name: shape[info.alias] for name, info in fields.items() if info.alias in shape}


def cluster_from(obj: Obj) -> tuple[ObservedCluster, ClusterRef] | None:
    """An InferenceCluster as a placement source and as a default-cluster candidate. Placement
    uses the GPU resource in use, ``status.applied`` (ADR 0046: a changed ``spec.gpuResource``
    waits for ``spec.approve``); the spec's until the cluster's first status."""
    meta = _meta(obj)
    name = meta.get("name")
    if not name:
        return None
    try:
        spec = InferenceClusterSpec.model_validate(obj.get("spec") or {})
    except ValueError:
        return None
    observed = ObservedCluster(
        name=str(name),
        gpu_resource=applied_gpu_resource(obj) or spec.gpu_resource,
        node_names=tuple(spec.nodes.names or ()),
        node_selector=spec.nodes.selector if isinstance(spec.nodes.selector, LabelSelector) else None,
        tolerations=tuple(spec.tolerations),
        queue_name=spec.queue_name,
    )
    ref = ClusterRef(name=str(name), default=spec.default, created=parse_time(meta.get("creationTimestamp")))
    return observed, ref


def applied_gpu_resource(obj: Obj) -> str | None:
    """``status.applied.gpuResource`` of a stored InferenceCluster, when it has a valid one: the
    GPU resource in use (a changed ``spec.gpuResource`` waits for ``spec.approve``)."""
    status = obj.get("status")
    raw = status.get("applied") if isinstance(status, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    try:
        return AppliedClusterSettings.model_validate(raw).gpu_resource
    except ValueError:
        return None


# -- one workload's view of the indexes -----------------------------------------------------

#: An index: key -> the records stored under it (kopf's ``Index`` / ``Store``, or plain lists).
Index = Mapping[Any, Iterable[Any]]


def first(index: Index | None, key: Any) -> Any:
    """The first record under ``key``, else ``None``."""
    if index is None or key not in index:
        return None
    return next(iter(index[key]), None)


def recipe_of(raw: Obj | None, *, name: str) -> ObservedRecipe:
    """The Recipe ``name`` from its stored spec (``spec=None`` when it does not parse)."""
    if raw is None:
        return ObservedRecipe(name=name, exists=False)
    try:
        spec: RecipeSpec | None = RecipeSpec.model_validate(raw)
    except ValueError:
        spec = None
    return ObservedRecipe(name=name, spec=spec)


def workload_cluster(named: str | None, clusters: Index | None) -> tuple[ObservedCluster | None, Obj | None]:
    """The cluster a workload runs on, and its stored object: the one it names (``exists=False``
    when absent), else the default cluster (:func:`~.cluster.default_cluster`), else none."""
    if named:
        raw = first(clusters, named)
        parsed = cluster_from(raw) if raw is not None else None
        return (parsed[0] if parsed else ObservedCluster(name=named, exists=False)), raw
    if clusters is None:
        return None, None
    refs = []
    for name in list(clusters):
        for candidate in clusters[name]:
            found = cluster_from(candidate)
            if found is not None:
                refs.append(found[1])
    default = cluster_plan.default_cluster(refs)
    raw = first(clusters, default) if default is not None else None
    parsed = cluster_from(raw) if raw is not None else None
    if parsed is None:
        return None, None
    return parsed[0], raw


def needs_capacity(pods: Iterable[ObservedPod]) -> bool:
    """Whether the Scheduled condition may need node capacity: no pods yet, or some unplaced."""
    pods = list(pods)
    return not pods or any(p.node is None and not p.deleting for p in pods)


def needs_free(pods: Iterable[ObservedPod]) -> bool:
    """Whether it needs free GPUs per node too: an unplaced pod the scheduler could not place."""
    return any(p.node is None and not p.deleting and p.unschedulable for p in pods)


def capacity(
    *,
    cluster: ObservedCluster | None,
    cluster_raw: Obj | None,
    nodes: Iterable[ObservedNode],
    gpu_pods: Index | None,
    gpu_resource: str,
    count_free: bool = True,
) -> tuple[NodeCapacity, ...]:
    """GPU accounting of the candidate nodes: the cluster's members (an existing ``cluster``),
    else every node with ``gpu_resource``; free GPUs (from ``gpu_pods``) only with
    ``count_free`` (else ``free`` is ``None``)."""
    candidates = list(nodes)
    if cluster is not None and cluster.exists and cluster_raw is not None:
        parsed = InferenceClusterSpec.model_validate(cluster_raw.get("spec") or {})
        candidates = cluster_plan.members(parsed, candidates)
    else:
        candidates = [n for n in candidates if n.allocatable.get(gpu_resource, 0) > 0]
    # NB: the same accounting as cluster_plan.node_status, without building its status models:
    # this runs on every pass of every workload with unplaced pods, over every candidate node.
    out: list[NodeCapacity] = []
    for node in candidates:
        allocatable = node.allocatable.get(gpu_resource, 0)
        free: int | None = None
        if count_free:
            pods = gpu_pods[node.name] if gpu_pods is not None and node.name in gpu_pods else ()
            allocated = sum(
                p.requests.get(gpu_resource, 0)
                for p in pods
                if p.node == node.name and p.phase not in cluster_plan.TERMINATED_PHASES
            )
            free = max(0, allocatable - allocated)
        out.append(
            NodeCapacity(
                name=node.name,
                ready=node.ready,
                schedulable=node.ready and not node.unschedulable,
                allocatable=allocatable,
                free=free,
                gpu_labels=fit.gpu_labels(node.labels),
            )
        )
    return tuple(out)
