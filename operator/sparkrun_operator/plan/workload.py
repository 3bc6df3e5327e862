"""The InferenceWorkload planner: observed state -> next actions and the status to write.

``plan(obs)`` is pure (no I/O, no clock: ``obs.now`` is the time). It stores no progress
anywhere: every decision is derived again from what is observed (the JobSets with their
revision/replica labels, their pods, the ModelCache, the InferenceCluster and the engines'
sleep state), so a restarted operator continues any rollout exactly where it stopped.

Rules (ARCHITECTURE section 5):

- one JobSet per replica slot ``0..replicas-1`` at the desired serving revision; JobSets at
  other revisions are replaced: with ``maxSurge > 0`` the new one is created first and the old
  one deleted once the new leader is Ready; with ``maxSurge == 0`` the old one is deleted first
  (at most ``max(1, maxUnavailable)`` slots down at a time) and the new one created once the old
  one is gone. Never more than ``replicas + maxSurge`` JobSets exist, counting ones still being
  deleted (their pods may hold GPUs);
- scale down deletes the highest replica indices first;
- ``state: Stopped`` suspends every JobSet (with a Kueue queue, where Kueue owns ``suspend``,
  it deletes them instead); ``state: Sleeping`` keeps the pods and asks each Ready leader to
  sleep (an action the executor performs through the engine's ``/sleep``); ``Running`` wakes any
  leader found asleep;
- with ``cacheRef`` no JobSet is created until the ModelCache is Ready;
- a Failed JobSet (``maxRestarts`` exhausted) is deleted after :data:`FAILED_BACKOFF` and
  recreated; a Completed one (the server exited 0) at once;
- children are deleted with UID preconditions (a new object may reuse the name).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.meta import Condition, LabelSelector, Toleration, set_condition
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import (
    ENGINE_PORT,
    Endpoint,
    FailureRecord,
    InferenceWorkloadSpec,
    InferenceWorkloadStatus,
    StartupEvent,
    WorkloadPhase,
)
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.resolve import EffectiveSpec, resolve
from sparkrun_operator.render import names
from sparkrun_operator.render.workload import (
    CacheMount,
    Owner,
    Placement,
    RenderOptions,
    ServingInputs,
    render_jobset,
    render_service,
    selector_string,
)

#: How long a Failed JobSet stays (for inspection) before it is deleted and recreated.
FAILED_BACKOFF: Final = dt.timedelta(seconds=10)
#: How soon to look again after asking engines to sleep or wake.
SLEEP_RECHECK_SECONDS: Final = 5.0
#: A running JobSet without any pod this long after its creation is reported as stuck.
PODLESS_AFTER: Final = dt.timedelta(seconds=60)
#: Cap on ``status.startup`` entries.
STARTUP_MAX: Final = 256

_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]*[A-Za-z0-9_])")


# -- observed state -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ObservedJobSet:
    """A JobSet labelled as belonging to the workload."""

    name: str
    uid: str
    replica: int | None
    revision: str | None
    suspended: bool = False
    deleting: bool = False
    #: ``Completed`` / ``Failed`` once the JobSet is terminal.
    terminal: Literal["Completed", "Failed"] | None = None
    terminal_time: dt.datetime | None = None
    terminal_message: str = ""
    restarts: int = 0
    #: The leader pod is Ready (vLLM's /health is 200 only once every rank joined).
    leader_ready: bool = False
    created: dt.datetime | None = None
    #: Jobs the JobSet reports in any state (``status.replicatedJobsStatus``); 0: none exist.
    jobs: int = 0


@dataclass(frozen=True, kw_only=True)
class ObservedPod:
    """A pod of one of the workload's JobSets."""

    name: str
    jobset: str
    role: str
    replica: int | None = None
    revision: str | None = None
    phase: str = "Pending"
    ready: bool = False
    ip: str | None = None
    node: str | None = None
    #: PodScheduled=False reason Unschedulable: the scheduler's message.
    unschedulable: str | None = None
    scheduled_time: dt.datetime | None = None
    running_time: dt.datetime | None = None
    ready_time: dt.datetime | None = None
    #: The most recent container failure (reason, message, exit code, time).
    failure: FailureRecord | None = None
    #: The pod has a deletionTimestamp (a group restart or a deletion is removing it).
    deleting: bool = False


@dataclass(frozen=True, kw_only=True)
class ObservedCache:
    """The ModelCache named by ``spec.model.cacheRef``."""

    name: str
    exists: bool = True
    ready: bool = False
    phase: str | None = None
    message: str = ""
    claim_name: str | None = None
    path: str = "/"
    resolved_revision: str | None = None


@dataclass(frozen=True, kw_only=True)
class NodeCapacity:
    """GPU accounting of one candidate node."""

    name: str
    ready: bool = True
    schedulable: bool = True
    allocatable: int = 0
    free: int = 0


@dataclass(frozen=True, kw_only=True)
class ObservedCluster:
    """The InferenceCluster the workload runs on (named, or the default one)."""

    name: str
    exists: bool = True
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    node_names: tuple[str, ...] = ()
    node_selector: LabelSelector | None = None
    tolerations: tuple[Toleration, ...] = ()
    queue_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ObservedRecipe:
    """The Recipe named by ``spec.recipe``."""

    name: str
    exists: bool = True
    spec: RecipeSpec | None = None


@dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything the planner looks at for one workload."""

    name: str
    namespace: str
    uid: str
    generation: int
    spec: InferenceWorkloadSpec
    status: InferenceWorkloadStatus
    now: dt.datetime
    created: dt.datetime | None = None
    recipe: ObservedRecipe | None = None
    cache: ObservedCache | None = None
    cluster: ObservedCluster | None = None
    #: Candidate nodes (the cluster's members, else every node with the GPU resource);
    #: ``None`` when unknown (no capacity check).
    capacity: tuple[NodeCapacity, ...] | None = None
    jobsets: tuple[ObservedJobSet, ...] = ()
    pods: tuple[ObservedPod, ...] = ()
    #: The Service ``<workload>`` as it exists (``None``: absent).
    service: Mapping[str, Any] | None = None
    #: Replica-slot leader -> engine asleep (True/False), from ``/is_sleeping``; absent: unknown.
    asleep: Mapping[str, bool] = field(default_factory=dict)
    options: RenderOptions = field(default_factory=RenderOptions)


# -- actions ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Delete:
    """Delete a child with a UID precondition (and foreground propagation)."""

    kind: str
    name: str
    uid: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class SetSuspend:
    """Patch ``spec.suspend`` of an existing JobSet."""

    name: str
    uid: str
    suspend: bool


@dataclass(frozen=True, kw_only=True)
class EngineCall:
    """Ask a leader's engine to sleep (``POST /sleep?level=1``) or wake (``POST /wake_up``)."""

    jobset: str
    url: str
    action: Literal["sleep", "wake_up"]


@dataclass(frozen=True, kw_only=True)
class Event:
    """A Kubernetes Event to emit on the workload after the status write."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(kw_only=True)
class Plan:
    """What to do now; ``requeue_after`` (seconds) when something must be looked at again by time."""

    apply: list[dict[str, Any]] = field(default_factory=list)
    suspend: list[SetSuspend] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    engine: list[EngineCall] = field(default_factory=list)
    status: InferenceWorkloadStatus = field(default_factory=InferenceWorkloadStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    effective: EffectiveSpec | None = None
    revision: str | None = None

    @property
    def idle(self) -> bool:
        """No child action (the status may still change)."""
        return not (self.apply or self.suspend or self.delete or self.engine)

    def later(self, seconds: float) -> None:
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


# -- helpers ------------------------------------------------------------------------------


class _Conditions:
    def __init__(self, previous: Sequence[Condition], generation: int, now: dt.datetime) -> None:
        self.items = [cond.model_copy() for cond in previous]
        self.generation = generation
        self.now = now
        self.seen: set[str] = set()

    def set(self, type_: str, status: bool | None, reason: str, message: str) -> None:
        value: Literal["True", "False", "Unknown"] = (
            "Unknown" if status is None else ("True" if status else "False")
        )
        set_condition(
            self.items,
            type=type_,
            status=value,
            reason=reason,
            message=message,
            observed_generation=self.generation,
            now=self.now,
        )
        self.seen.add(type_)

    def finish(self) -> list[Condition]:
        return [cond for cond in self.items if cond.type in self.seen]


def _leader_pod(pods: Iterable[ObservedPod], jobset: str) -> ObservedPod | None:
    """The leader pod of ``jobset``: one not being deleted first (a group restart overlaps two)."""
    leaders = [p for p in pods if p.jobset == jobset and p.role == "leader"]
    leaders.sort(key=lambda p: (p.deleting, not p.ready, p.name))
    return leaders[0] if leaders else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _slot_of(js: ObservedJobSet) -> int:
    return js.replica if js.replica is not None else -1


# -- the planner --------------------------------------------------------------------------


def plan(obs: Observation) -> Plan:
    """Derive the next actions and the complete new status from ``obs``."""
    out = Plan()
    spec = obs.spec
    prev = obs.status
    cond = _Conditions(prev.conditions, obs.generation, obs.now)
    status = InferenceWorkloadStatus(
        observed_generation=obs.generation,
        selector=selector_string(obs.name),
        revision=prev.revision,
        workload_id=prev.workload_id,
        intent_id=prev.intent_id,
        recipe_revision=prev.recipe_revision,
        startup=list(prev.startup),
        last_failure=prev.last_failure,
    )

    live = [js for js in obs.jobsets if not js.deleting]
    # -- what may serve: recipe, spec, cache, cluster -------------------------------------
    blocked: tuple[str, str] | None = None  # (Ready reason, message) when nothing new may be created

    recipe_spec: RecipeSpec | None = None
    if spec.recipe is not None:
        observed = obs.recipe
        if observed is None or not observed.exists or observed.spec is None:
            msg = f"Recipe {spec.recipe.name!r} not found in namespace {obs.namespace!r}"
            cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_NOT_FOUND, msg)
            blocked = (c.REASON_RECIPE_NOT_FOUND, msg)
        else:
            recipe_spec = observed.spec

    resolution = None
    if blocked is None:
        resolution = resolve(workload=spec, recipe=recipe_spec)
        if resolution.spec is None:
            detail = "; ".join(f"{i.field}: {i.message}" if i.field else i.message for i in resolution.errors)
            if spec.recipe is not None and any(
                not (i.field or "").startswith("spec.") for i in resolution.errors
            ):
                cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_INVALID, detail)
                blocked = (c.REASON_RECIPE_INVALID, detail)
            else:
                if spec.recipe is not None:
                    cond.set(
                        c.RECIPE_RESOLVED, True, c.REASON_RECIPE_RESOLVED, f"Recipe {spec.recipe.name!r}"
                    )
                blocked = (c.REASON_INVALID_SPEC, detail)
        elif spec.recipe is not None:
            got = resolution.spec.recipe_revision
            pinned = spec.recipe.revision
            if pinned and got != pinned:
                msg = (
                    f"spec.recipe.revision pins {pinned}, but Recipe {spec.recipe.name!r} is now at {got}; "
                    "nothing is rolled out until the pin is updated or removed"
                )
                cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_REVISION_MISMATCH, msg)
                blocked = (c.REASON_RECIPE_REVISION_MISMATCH, msg)
            else:
                warnings = [i.message for i in resolution.issues if i.severity == "warning"]
                msg = f"Recipe {spec.recipe.name!r} at revision {got}"
                if warnings:
                    msg += "; warnings: " + "; ".join(warnings)
                cond.set(c.RECIPE_RESOLVED, True, c.REASON_RECIPE_RESOLVED, msg)

    effective = resolution.spec if resolution is not None else None
    if blocked is None and effective is not None:
        problem = names.check_workload_name(workload=obs.name, nodes=effective.topology.nodes)
        if problem is not None:
            blocked = (c.REASON_INVALID_SPEC, problem)
        elif spec.state == "Sleeping" and not effective.enable_sleep_mode:
            blocked = (c.REASON_INVALID_SPEC, "state Sleeping needs engine.enableSleepMode: true")

    # cache
    cache_mount: CacheMount | None = None
    cache_ref = (
        effective.cache_ref
        if effective is not None
        else (spec.model.cache_ref.name if spec.model is not None and spec.model.cache_ref else None)
    )
    if cache_ref is None:
        cond.set(
            c.CACHE_READY, True, c.REASON_NO_CACHE, "no cacheRef: the engine downloads the weights itself"
        )
    else:
        cache = obs.cache
        if cache is None or not cache.exists:
            msg = (
                f"ModelCache {cache_ref!r} not found in namespace {obs.namespace!r}; "
                "create it or fix cacheRef"
            )
            cond.set(c.CACHE_READY, False, c.REASON_CACHE_NOT_FOUND, msg)
            blocked = blocked or (c.REASON_WAITING_FOR_CACHE, msg)
        elif not cache.ready or cache.claim_name is None:
            msg = f"ModelCache {cache_ref!r} is {cache.phase or 'not Ready'}"
            if cache.message:
                msg += f": {cache.message}"
            msg += "; no pod starts until it is Ready"
            cond.set(c.CACHE_READY, False, c.REASON_CACHE_NOT_READY, msg)
            blocked = blocked or (c.REASON_WAITING_FOR_CACHE, msg)
        else:
            cache_mount = CacheMount(
                cache=cache.name,
                claim_name=cache.claim_name,
                path=cache.path,
                revision=cache.resolved_revision,
            )
            msg = f"ModelCache {cache_ref!r} is Ready"
            if cache.resolved_revision:
                msg += f" at {cache.resolved_revision}"
            cond.set(c.CACHE_READY, True, c.REASON_CACHE_READY, msg)
            if status.startup is not None and not any(e.stage == "cacheReady" for e in status.startup):
                status.startup.append(StartupEvent(stage="cacheReady", time=obs.now))

    # cluster
    placement: Placement | None = None
    cluster_problem: str | None = None
    if obs.cluster is not None:
        if not obs.cluster.exists:
            cluster_problem = (
                f"InferenceCluster {obs.cluster.name!r} not found; create it or fix spec.cluster"
            )
            blocked = blocked or (c.REASON_CLUSTER_NOT_FOUND, cluster_problem)
        else:
            placement = Placement(
                cluster=obs.cluster.name,
                gpu_resource=obs.cluster.gpu_resource,
                node_names=obs.cluster.node_names,
                node_selector=obs.cluster.node_selector,
                tolerations=obs.cluster.tolerations,
                queue_name=obs.cluster.queue_name,
            )
    elif spec.cluster:
        cluster_problem = f"InferenceCluster {spec.cluster!r} not found; create it or fix spec.cluster"
        blocked = blocked or (c.REASON_CLUSTER_NOT_FOUND, cluster_problem)

    # -- identity -------------------------------------------------------------------------
    if effective is not None:
        status.intent_id = effective.intent_id
        status.recipe_revision = effective.recipe_revision
        status.workload_id = recipe_identity.workload_id(
            effective.intent_id, recipe_identity.placement_token_for(obs.namespace, obs.name, obs.uid)
        )
    if not any(e.stage == "accepted" for e in status.startup):
        status.startup.insert(0, StartupEvent(stage="accepted", time=obs.created or obs.now))

    owner = Owner(name=obs.name, uid=obs.uid)
    inputs: ServingInputs | None = None
    if blocked is None and effective is not None:
        inputs = ServingInputs(
            spec=effective, scheduling=spec.scheduling, placement=placement, cache=cache_mount
        )
        out.revision = inputs.revision()
        out.effective = effective
        status.revision = out.revision

    # -- the Service ------------------------------------------------------------------------
    desired_service = render_service(namespace=obs.namespace, workload=obs.name, owner=owner)
    if _service_differs(obs.service, desired_service):
        out.apply.append(desired_service)

    # -- JobSets ----------------------------------------------------------------------------
    queued = inputs is not None and inputs.queue_name is not None
    if inputs is not None and out.revision is not None:
        _plan_jobsets(obs=obs, out=out, inputs=inputs, owner=owner, live=live, queued=queued)
    else:
        # Hold: keep what runs, create nothing new. Terminal and surplus JobSets still go.
        _cleanup_only(obs=obs, out=out, live=live)

    # -- sleep / wake -----------------------------------------------------------------------
    sleeping_expected = spec.state == "Sleeping"
    ready_leaders = [js for js in live if js.leader_ready and js.terminal is None and not js.suspended]
    asleep_count = sum(1 for js in ready_leaders if obs.asleep.get(js.name) is True)
    sleep_capable = effective.enable_sleep_mode if effective is not None else spec.engine.enable_sleep_mode
    for js in ready_leaders:
        leader = _leader_pod(obs.pods, js.name)
        if leader is None or leader.ip is None:
            continue
        url = f"http://{leader.ip}:{ENGINE_PORT}"
        state = obs.asleep.get(js.name)
        if sleeping_expected and state is False:
            out.engine.append(EngineCall(jobset=js.name, url=url, action="sleep"))
        elif not sleeping_expected and state is True and sleep_capable:
            out.engine.append(EngineCall(jobset=js.name, url=url, action="wake_up"))
    if out.engine:
        out.later(SLEEP_RECHECK_SECONDS)

    # -- status: counts, endpoints, timeline, failures ------------------------------------------
    counted = [js for js in live if js.terminal is None]
    status.replicas = len(counted)
    ready = [js for js in counted if js.leader_ready and not js.suspended]
    status.ready_replicas = len(ready)
    status.endpoints = _endpoints(counted, obs.pods)
    status.restarts = sum(js.restarts for js in counted)
    if out.revision is not None:
        status.startup = _timeline(status.startup, obs=obs, revision=out.revision)
    status.last_failure = _last_failure(prev.last_failure, obs)

    desired = spec.replicas
    current_rev = [js for js in counted if js.revision == out.revision] if out.revision else counted
    old_rev = [js for js in counted if out.revision is not None and js.revision != out.revision]

    # Scheduled
    _scheduled(cond=cond, obs=obs, counted=counted, inputs=inputs, cluster_problem=cluster_problem)

    # Degraded
    failed = [js for js in obs.jobsets if js.terminal == "Failed"]
    completed = [js for js in obs.jobsets if js.terminal == "Completed"]
    restarting = [js for js in counted if js.restarts > 0 and not js.leader_ready and not js.suspended]
    if failed:
        js = failed[0]
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_FAILED,
            f"JobSet {js.name} failed after {js.restarts} group restarts"
            + (f": {js.terminal_message}" if js.terminal_message else "")
            + "; it is recreated",
        )
    elif completed:
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_COMPLETED,
            f"the engine of JobSet {completed[0].name} exited successfully, which a server should not; "
            "recreating",
        )
    elif restarting:
        js = restarting[0]
        cond.set(
            c.DEGRADED,
            True,
            c.REASON_GROUP_RESTARTING,
            f"replica {js.replica} restarted its group {_plural(js.restarts, 'time')} and is not Ready yet"
            + (f"; last failure: {status.last_failure.reason}" if status.last_failure else ""),
        )
    else:
        cond.set(c.DEGRADED, False, c.REASON_AS_EXPECTED, "no group restarts pending")

    # Sleeping
    if sleeping_expected:
        if ready_leaders and asleep_count == len(ready_leaders):
            cond.set(c.SLEEPING, True, c.REASON_ASLEEP, f"{_plural(asleep_count, 'replica')} asleep")
        else:
            cond.set(
                c.SLEEPING,
                False,
                c.REASON_FALLING_ASLEEP,
                f"{asleep_count} of {len(ready_leaders)} ready replicas asleep",
            )
    elif asleep_count:
        cond.set(c.SLEEPING, False, c.REASON_WAKING_UP, f"waking {_plural(asleep_count, 'replica')}")
    else:
        cond.set(c.SLEEPING, False, c.REASON_AWAKE, "engines awake")

    # Progressing and Ready
    rolling = bool(old_rev) or any(js.deleting for js in obs.jobsets)
    scaling = len(current_rev) != desired
    if blocked is not None and not counted:
        cond.set(c.PROGRESSING, False, blocked[0], blocked[1])
    elif rolling and out.revision is not None:
        cond.set(
            c.PROGRESSING,
            True,
            c.REASON_ROLLING_OUT,
            f"rolling out revision {out.revision}: {len(current_rev)} of {desired} replicas updated, "
            f"{_plural(len(old_rev), 'old replica')} left (maxSurge {spec.rollout.max_surge})",
        )
    elif scaling or not out.idle:
        reason = c.REASON_CREATING if not counted else c.REASON_SCALING
        cond.set(c.PROGRESSING, True, reason, f"{len(current_rev)} of {desired} replicas exist")
    elif spec.state == "Running" and len(ready) < desired:
        cond.set(c.PROGRESSING, True, c.REASON_CREATING, f"{len(ready)} of {desired} replicas Ready")
    else:
        cond.set(
            c.PROGRESSING,
            False,
            c.REASON_STABLE,
            f"{len(current_rev)} of {desired} replicas at revision {out.revision or status.revision}",
        )

    phase: WorkloadPhase
    if spec.state == "Stopped":
        cond.set(c.READY, False, c.REASON_STOPPED, "state is Stopped: JobSets suspended, no pods")
        phase = "Stopped"
    elif blocked is not None and not ready:
        cond.set(c.READY, False, blocked[0], blocked[1])
        phase = "Failed" if blocked[0] in _FATAL else "Pending"
    elif sleeping_expected and ready_leaders:
        cond.set(
            c.READY,
            False,
            c.REASON_ASLEEP,
            f"state is Sleeping: {asleep_count} of {len(ready_leaders)} engines asleep; "
            "the gateway does not route",
        )
        phase = "Sleeping"
    elif desired == 0:
        cond.set(c.READY, False, c.REASON_NO_REPLICAS, "spec.replicas is 0")
        phase = "Stopped"
    elif len(ready) >= desired and not sleeping_expected:
        cond.set(c.READY, True, c.REASON_ALL_REPLICAS_READY, f"{len(ready)} of {desired} replicas Ready")
        phase = "Updating" if rolling else "Running"
    else:
        cond.set(
            c.READY,
            False,
            c.REASON_REPLICAS_NOT_READY,
            f"{len(ready)} of {desired} replicas Ready" + _not_ready_hint(obs, cond),
        )
        if failed or restarting:
            phase = "Degraded"
        elif rolling:
            phase = "Updating"
        elif ready:
            phase = "Degraded"
        else:
            phase = "Starting" if counted else "Pending"
    status.phase = phase
    status.conditions = cond.finish()
    out.status = status
    if out.requeue_after is None and (failed or completed):
        out.later(FAILED_BACKOFF.total_seconds())
    return out


_FATAL = frozenset({c.REASON_INVALID_SPEC, c.REASON_RECIPE_INVALID})


def _not_ready_hint(obs: Observation, cond: _Conditions) -> str:
    for item in cond.items:
        if item.type == c.SCHEDULED and item.status == "False" and item.reason != c.REASON_STOPPED:
            return f"; {item.message}"
    return ""


def _service_differs(observed: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    if observed is None:
        return True
    spec = observed.get("spec") or {}
    want = desired["spec"]
    ports = [
        {k: p.get(k) for k in ("name", "port", "targetPort", "protocol")} for p in spec.get("ports") or []
    ]
    return bool(
        spec.get("selector") != want["selector"]
        or ports != want["ports"]
        or bool(spec.get("publishNotReadyAddresses")) != want["publishNotReadyAddresses"]
    )


def _plan_jobsets(
    *,
    obs: Observation,
    out: Plan,
    inputs: ServingInputs,
    owner: Owner,
    live: list[ObservedJobSet],
    queued: bool,
) -> None:
    spec = obs.spec
    revision = out.revision
    assert revision is not None
    replicas = spec.replicas
    stopped = spec.state == "Stopped"
    max_surge = spec.rollout.max_surge
    # Kueue owns spec.suspend of queued JobSets: create them suspended, let Kueue admit them,
    # and delete them on Stop (Kueue would otherwise re-admit a suspended JobSet).
    want_suspend = stopped or queued
    if stopped and queued:
        for js in sorted(live, key=_slot_of, reverse=True):
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="stopped (queued)"))
        return

    deleted: set[str] = set()

    def delete(js: ObservedJobSet, reason: str) -> None:
        if js.name not in deleted:
            deleted.add(js.name)
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason=reason))
            out.events.append(
                Event(type="Normal", reason="DeletedJobSet", message=f"Deleted JobSet {js.name}: {reason}")
            )

    # terminal JobSets: recreate (after a pause for a Failed one, so it can be inspected)
    for js in live:
        if js.terminal == "Completed":
            delete(js, "the engine exited; recreating the replica")
        elif js.terminal == "Failed":
            since = obs.now - (js.terminal_time or obs.now)
            if since >= FAILED_BACKOFF:
                delete(js, "failed after exhausting maxRestarts; recreating the replica")
            else:
                out.later((FAILED_BACKOFF - since).total_seconds())

    # surplus replicas and strays: highest index first
    for js in sorted(live, key=_slot_of, reverse=True):
        slot = js.replica
        if slot is None or slot >= replicas or slot < 0:
            delete(js, f"scaled down to {_plural(replicas, 'replica')}")

    active = [js for js in live if js.name not in deleted]
    total = len([js for js in obs.jobsets if js.name not in deleted])  # deleting ones still hold GPUs
    budget = replicas + max_surge - total
    by_slot: dict[int, list[ObservedJobSet]] = {}
    for js in active:
        by_slot.setdefault(_slot_of(js), []).append(js)
    deleting_slots = {_slot_of(js) for js in obs.jobsets if js.deleting or js.name in deleted}

    ready_slots = {
        slot for slot, items in by_slot.items() if any(js.leader_ready and not js.suspended for js in items)
    }
    unavailable = replicas - len([s for s in ready_slots if 0 <= s < replicas])
    allowed_unavailable = max(spec.rollout.max_unavailable, 1 if max_surge == 0 else 0)

    for slot in range(replicas):
        items = by_slot.get(slot, [])
        current = next((js for js in items if js.revision == revision), None)
        olds = [js for js in items if js.revision != revision]
        if current is None:
            if olds and not stopped and max_surge == 0:
                # delete first: no spare GPUs for a new group next to the old one
                for old in olds:
                    old_ready = old.leader_ready and not old.suspended
                    if old_ready and unavailable >= allowed_unavailable:
                        continue
                    delete(old, f"rolling out revision {revision} (maxSurge 0: old replica goes first)")
                    if old_ready:
                        unavailable += 1
                continue
            if olds and stopped:
                for old in olds:
                    delete(old, f"revision {revision} replaces it (stopped: nothing to keep serving)")
                    budget += 1
            if slot in deleting_slots and not olds and max_surge == 0:
                continue  # the old group is still terminating and may hold the GPUs
            if budget > 0:
                budget -= 1
                out.apply.append(
                    render_jobset(
                        namespace=obs.namespace,
                        workload=obs.name,
                        inputs=inputs,
                        replica=slot,
                        suspend=want_suspend,
                        owner=owner,
                        options=obs.options,
                        revision=revision,
                    )
                )
                name = names.jobset_name(workload=obs.name, replica=slot, revision=revision)
                out.events.append(
                    Event(
                        type="Normal",
                        reason="CreatedJobSet",
                        message=f"Created JobSet {name} (revision {revision})",
                    )
                )
        else:
            if olds and (current.leader_ready or stopped):
                for old in olds:
                    delete(old, f"replaced by {current.name} (revision {revision}), which is Ready")
            if not queued and current.suspended != want_suspend and current.terminal is None:
                out.suspend.append(SetSuspend(name=current.name, uid=current.uid, suspend=want_suspend))
                verb = "Suspended" if want_suspend else "Resumed"
                out.events.append(
                    Event(type="Normal", reason=f"{verb}JobSet", message=f"{verb} JobSet {current.name}")
                )
        # old JobSets kept during a rollout follow the state too
        for old in olds:
            if old.name in deleted or queued or old.terminal is not None:
                continue
            if old.suspended != want_suspend:
                out.suspend.append(SetSuspend(name=old.name, uid=old.uid, suspend=want_suspend))


def _cleanup_only(*, obs: Observation, out: Plan, live: list[ObservedJobSet]) -> None:
    """While blocked: keep serving JobSets, remove terminal and surplus ones, follow the state."""
    replicas = obs.spec.replicas
    stopped = obs.spec.state == "Stopped"
    for js in sorted(live, key=_slot_of, reverse=True):
        slot = js.replica
        if slot is None or slot >= replicas or slot < 0:
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="scaled down"))
        elif js.terminal == "Completed" or (
            js.terminal == "Failed" and obs.now - (js.terminal_time or obs.now) >= FAILED_BACKOFF
        ):
            out.delete.append(Delete(kind="JobSet", name=js.name, uid=js.uid, reason="terminal"))
        elif js.terminal is None and js.suspended != stopped:
            out.suspend.append(SetSuspend(name=js.name, uid=js.uid, suspend=stopped))


def _endpoints(counted: Sequence[ObservedJobSet], pods: Sequence[ObservedPod]) -> list[Endpoint]:
    endpoints: list[Endpoint] = []
    for js in sorted(counted, key=lambda j: (_slot_of(j), j.name)):
        leader = _leader_pod(pods, js.name)
        if leader is None or leader.ip is None or js.replica is None:
            continue
        endpoints.append(
            Endpoint(
                replica=js.replica,
                url=f"http://{leader.ip}:{ENGINE_PORT}",
                ready=js.leader_ready and leader.ready,
            )
        )
    return endpoints


def _timeline(previous: list[StartupEvent], *, obs: Observation, revision: str) -> list[StartupEvent]:
    """Keep workload-level stages and this revision's per-replica stages; add newly seen ones."""
    events = [e for e in previous if e.replica is None or e.revision == revision]
    have = {(e.stage, e.replica, e.revision) for e in events}

    def add(stage: Any, replica: int | None, when: dt.datetime | None) -> None:
        key = (stage, replica, revision if replica is not None else None)
        if key in have:
            return
        have.add(key)
        events.append(
            StartupEvent(
                stage=stage,
                time=when or obs.now,
                replica=replica,
                revision=revision if replica is not None else None,
            )
        )

    for js in obs.jobsets:
        if js.revision != revision or js.replica is None or js.deleting:
            continue
        group = [p for p in obs.pods if p.jobset == js.name]
        leader = _leader_pod(group, js.name)
        if group and all(p.node for p in group):
            add("scheduled", js.replica, max((p.scheduled_time or obs.now) for p in group))
        if leader is not None and leader.phase == "Running":
            add("running", js.replica, leader.running_time)
        if js.leader_ready and leader is not None and leader.ready:
            add("ready", js.replica, leader.ready_time)
    order = {"accepted": 0, "cacheReady": 1, "scheduled": 2, "running": 3, "ready": 4}
    events.sort(key=lambda e: (e.replica if e.replica is not None else -1, order.get(e.stage, 9), e.time))
    return events[-STARTUP_MAX:]


def _last_failure(previous: FailureRecord | None, obs: Observation) -> FailureRecord | None:
    best = previous
    candidates: list[FailureRecord] = [p.failure for p in obs.pods if p.failure is not None]
    for js in obs.jobsets:
        # NB: only with a time from the apiserver; "now" would change the status on every pass.
        if js.terminal == "Failed" and js.terminal_time is not None:
            candidates.append(
                FailureRecord(
                    reason="JobSetFailed",
                    message=js.terminal_message,
                    time=js.terminal_time,
                    object=f"JobSet/{js.name}",
                )
            )
    for cand in candidates:
        if best is None or cand.time > best.time:
            best = cand
    return best


def _scheduled(
    *,
    cond: _Conditions,
    obs: Observation,
    counted: Sequence[ObservedJobSet],
    inputs: ServingInputs | None,
    cluster_problem: str | None,
) -> None:
    spec = obs.spec
    if cluster_problem is not None:
        cond.set(c.SCHEDULED, False, c.REASON_CLUSTER_NOT_FOUND, cluster_problem)
        return
    if spec.state == "Stopped":
        cond.set(c.SCHEDULED, False, c.REASON_STOPPED, "state is Stopped: no pods to schedule")
        return
    gpus = inputs.spec.topology.gpus_per_node if inputs is not None else spec.topology.gpus_per_node
    nodes = inputs.spec.topology.nodes if inputs is not None else spec.topology.nodes
    resource = inputs.gpu_resource if inputs is not None else DEFAULT_GPU_RESOURCE
    where = f"cluster {obs.cluster.name!r}" if obs.cluster is not None else "the cluster"
    ask = f"each replica asks {nodes} x {gpus} {resource} (one pod per node)"

    pods = [p for p in obs.pods if any(p.jobset == js.name for js in counted)]
    pending = [p for p in pods if p.node is None]
    if pods and not pending:
        cond.set(c.SCHEDULED, True, c.REASON_ALL_PODS_SCHEDULED, f"{_plural(len(pods), 'pod')} scheduled")
        return

    if obs.capacity is not None:
        usable = [n for n in obs.capacity if n.ready and n.schedulable]
        fitting = [n for n in usable if n.allocatable >= gpus]
        if len(fitting) < nodes:
            largest = max((n.allocatable for n in usable), default=0)
            cond.set(
                c.SCHEDULED,
                False,
                c.REASON_NO_FITTING_NODES,
                f"{ask}; {where} has {_plural(len(fitting), 'schedulable node')} with at least {gpus} "
                f"allocatable (largest: {largest}, {_plural(len(usable), 'usable node')}): "
                "add nodes, or lower gpusPerNode/nodes",
            )
            return

    unschedulable = [p for p in pending if p.unschedulable]
    if unschedulable:
        first = unschedulable[0]
        message = first.unschedulable or ""
        short = [m.group(1) for m in _INSUFFICIENT.finditer(message)]
        if resource in short:
            free = ""
            if obs.capacity is not None:
                free_nodes = [n for n in obs.capacity if n.ready and n.schedulable and n.free >= gpus]
                total_free = sum(n.free for n in obs.capacity if n.ready and n.schedulable)
                free = (
                    f"; {where} has {total_free} {resource} free, on "
                    f"{_plural(len(free_nodes), 'node')} with at least {gpus} free"
                )
            cond.set(
                c.SCHEDULED,
                False,
                c.REASON_INSUFFICIENT_GPU,
                f"{_plural(len(unschedulable), 'pod')} cannot be placed: {ask}{free}. Scheduler: {message}",
            )
        else:
            cond.set(
                c.SCHEDULED,
                False,
                c.REASON_PODS_PENDING,
                f"{_plural(len(unschedulable), 'pod')} unschedulable: {message}",
            )
        return
    podless = [
        (js, obs.now - js.created)
        for js in counted
        if not js.suspended
        and js.created is not None
        and js.jobs == 0
        and not any(p.jobset == js.name for p in pods)
    ]
    stuck = [(js, age) for js, age in podless if age >= PODLESS_AFTER]
    if stuck:
        js = stuck[0][0]
        # NB: no exact age in the message: it would change (and be written) on every pass.
        cond.set(
            c.SCHEDULED,
            False,
            c.REASON_PODS_PENDING,
            f"JobSet {js.name} has no pods more than {int(PODLESS_AFTER.total_seconds())} s after it was "
            f"created: the JobSet or Job controller could not create them; `kubectl describe jobset "
            f"{js.name}` shows why",
        )
        return
    if pending or (not pods and counted):
        cond.set(
            c.SCHEDULED,
            False,
            c.REASON_PODS_PENDING,
            f"waiting for {_plural(len(pending), 'pod')} to be scheduled" if pending else "waiting for pods",
        )
        return
    cond.set(c.SCHEDULED, False, c.REASON_PODS_PENDING, "no pods yet")
