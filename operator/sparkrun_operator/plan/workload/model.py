"""The workload planner's types: observed state, actions, the plan, and small shared helpers.

Pure data (frozen dataclasses) plus :class:`Conditions`, which accumulates the conditions one
pass sets. No I/O.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api.benchmark import ScenarioResult
from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.drain import WorkloadDrainStatus
from sparkrun_operator.api.history import ServingRevision
from sparkrun_operator.api.meta import Condition, LabelSelector, Toleration, set_condition
from sparkrun_operator.api.modelshape import ModelShape
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.api.ownership import LeaseStatus
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.scaling import ScalingDecision
from sparkrun_operator.api.workload import FailureRecord, InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.fit import GpuLabels
from sparkrun_operator.plan.names import Claim
from sparkrun_operator.plan.queue import QueueRead
from sparkrun_operator.plan.workload.hooksource import HookSource, ObservedHookJob
from sparkrun_operator.recipe.resolve import EffectiveSpec
from sparkrun_operator.render.inferencepool import PoolSettings
from sparkrun_operator.render.keys import LABEL_INFERENCE_POOL
from sparkrun_operator.render.networkpolicy import EnginePolicy
from sparkrun_operator.render.workload import RenderOptions

#: How long a Failed JobSet stays (for inspection) before it is deleted and recreated.
FAILED_BACKOFF: Final = dt.timedelta(seconds=10)
#: How soon to look again after asking engines to sleep or wake.
SLEEP_RECHECK_SECONDS: Final = 5.0
#: A running JobSet without any pod this long after its creation is reported as stuck.
PODLESS_AFTER: Final = dt.timedelta(seconds=60)
#: Cap on ``status.startup`` entries.
STARTUP_MAX: Final = 256


# -- observed state -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EngineStart:
    """What a JobSet's leader engine was started with (its container's ``vllm serve`` arguments,
    as ``render/`` writes them): the model, ``--served-model-name``, and the capabilities those
    arguments mean (``plan.served.capabilities_of`` with none declared)."""

    model: str
    served_name: str
    capabilities: tuple[str, ...]


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
    #: What its leader's engine was started with; ``None``: not readable (not rendered by us).
    engine: EngineStart | None = None


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
    #: The only node the files are reachable from (node-local volume, or a ReadWriteOnce claim).
    node_name: str | None = None
    access_modes: tuple[str, ...] = ()
    #: ``status.manifest.totalBytes`` and ``status.modelShape`` (``None``: unknown): the memory fit.
    total_bytes: int | None = None
    shape: ModelShape | None = None

    @property
    def single_node(self) -> bool:
        """Whether the claim can be mounted on one node only (ReadWriteOnce[Pod], or node-local)."""
        shared = {"ReadWriteMany", "ReadOnlyMany"}
        return self.node_name is not None or (bool(self.access_modes) and not shared & set(self.access_modes))


@dataclass(frozen=True, kw_only=True)
class NodeCapacity:
    """GPU accounting of one candidate node."""

    name: str
    ready: bool = True
    schedulable: bool = True
    allocatable: int = 0
    #: ``None`` when not counted: the planner needs free GPUs only to explain an unschedulable
    #: pod, and counting them walks every GPU pod of every candidate node.
    free: int | None = 0
    #: The node's GPU feature discovery labels (per-GPU memory, product, count): the memory fit.
    gpu_labels: GpuLabels = field(default_factory=GpuLabels)


@dataclass(frozen=True, kw_only=True)
class ObservedCluster:
    """The InferenceCluster the workload runs on (named, or the default one)."""

    name: str
    exists: bool = True
    #: The GPU resource in use: ``status.applied`` (a changed ``spec.gpuResource`` waits for
    #: ``spec.approve``, ADR 0046), the spec's before the cluster's first status.
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
class ObservedGate:
    """An InferenceBenchmark a rollout gate made for one revision (labelled with it)."""

    name: str
    uid: str
    revision: str
    template: str
    phase: str | None = None
    results: tuple[ScenarioResult, ...] = ()
    #: ``Failed``: the reason and message of its Failed condition.
    failure: tuple[str, str] | None = None
    deleting: bool = False


@dataclass(frozen=True, kw_only=True)
class ObservedRevision:
    """A ControllerRevision labelled with the workload (a serving revision, ADR 0046)."""

    name: str
    uid: str
    #: ``revision`` of the ControllerRevision (the serving revision's number).
    number: int
    #: The hash label (``keys.LABEL_REVISION``).
    hash: str | None = None
    #: Its ``data``; ``None`` when it is not a :class:`ServingRevision` (malformed, or not ours).
    data: ServingRevision | None = None
    #: The UID of its controller owner (the revision is the workload's only when it is its UID).
    owner: str | None = None
    served_from: dt.datetime | None = None
    served_until: dt.datetime | None = None
    created: dt.datetime | None = None
    deleting: bool = False


@dataclass(frozen=True, kw_only=True)
class PoolParent:
    """What one parent (a gateway) of an InferencePool reports in ``status.parents[]``."""

    #: ``Kind/namespace/name`` (the pool's namespace when the reference names none).
    parent: str
    accepted: Literal["True", "False", "Unknown"] = "Unknown"
    resolved_refs: Literal["True", "False", "Unknown"] = "Unknown"
    #: The reason of the first of the two conditions that is not True (else Accepted's), as the
    #: gateway wrote it (bounded; not necessarily a valid condition reason).
    reason: str = ""
    #: Its message, clipped.
    message: str = ""

    @property
    def accepts(self) -> bool:
        """Whether this gateway accepted the pool and resolved its references."""
        return self.accepted == "True" and self.resolved_refs == "True"


@dataclass(frozen=True, kw_only=True)
class ObservedPool:
    """The InferencePool of the workload's name, whoever made it."""

    name: str
    uid: str
    #: Its :data:`~sparkrun_operator.render.keys.ANNOTATION_POOL_HASH` (``None``: absent).
    hash: str | None = None
    #: The UID of its controller owner; the pool is the workload's only when it is its UID.
    controller: str | None = None
    parents: tuple[PoolParent, ...] = ()
    deleting: bool = False


@dataclass(frozen=True, kw_only=True)
class ObservedPickerObject:
    """One object of a Managed endpoint picker (``<workload>-epp``): ServiceAccount,
    RoleBinding, Deployment, Service or NetworkPolicy."""

    kind: str
    name: str
    uid: str
    hash: str | None = None
    controller: str | None = None
    #: A Deployment: it has a Ready replica of its current generation.
    ready: bool = False
    deleting: bool = False


@dataclass(frozen=True, kw_only=True)
class PoolRefusal:
    """The apiserver refused the pool (or a Managed picker's object: ``kind``, ``name``) as
    rendered with ``hash`` (422/403): not applied again until what it is rendered from changes.
    ``taken``: the object's name is another object's that the workload does not control
    (``NameTaken``: an unlabelled one the indexes cannot see); the picker is then not applied at
    all while the controller remembers it (it forgets it after a while, to look again)."""

    hash: str
    message: str
    kind: str = "InferencePool"
    name: str = ""
    taken: bool = False
    #: When the controller recorded it (``time.monotonic()``; the planner does not read it).
    since: float = 0.0


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
    #: Every claim of one model name, this workload's (perhaps stale) own included: the names
    #: index over the workloads the operator serves (``None``: unknown, no ``Routable``
    #: condition). The planner checks its own names, as it resolves them, against it
    #: (:func:`~sparkrun_operator.plan.names.conflicts`).
    holders: Callable[[str], Iterable[Claim]] | None = None
    #: Which names the workload's namespace may claim (``--name-prefixes``): a name outside it
    #: is withheld (``Routable=False``, ``NameNotAllowed``; plan/names.py).
    name_policy: NamePolicy = field(default_factory=NamePolicy)
    #: The rollout gate's benchmarks (``spec.rollout.gate``), any revision.
    gates: tuple[ObservedGate, ...] = ()
    #: Who may reach the engines besides the workload's own pods (``--engine-network-policy``);
    #: ``None``: the operator makes no NetworkPolicy (render/networkpolicy.py).
    engine_policy: EnginePolicy | None = None
    #: The hash annotation of the workload's NetworkPolicy as it exists (``None``: absent).
    network_policy: str | None = None
    #: What this operator's autoscaler last decided and saw for the workload (ADR 0045;
    #: ``controllers/autoscale.py``); ``None``: nothing since this process started (the
    #: planner then carries ``status.scaling`` over).
    scaling: ScalingView | None = None
    #: The workload's ControllerRevisions (its serving revisions, ADR 0046; ``plan/workload/history.py``).
    #: ``None``: not observed (a caller without the index): the history stage is off and the
    #: desired settings serve, as before revisions were kept.
    revisions: tuple[ObservedRevision, ...] | None = None
    #: Failures the pod events recorded (``controllers/failurelog.py``): with their log lines,
    #: redacted, oldest first; they outlive the pods (a group restart deletes them at once).
    #: Empty after an operator restart (the status keeps what was reported).
    failures: tuple[FailureRecord, ...] = ()
    #: Now with sub-second precision, for the wake times it measures (``obs.now`` is whole
    #: seconds, as conditions store time; a wake from Sleeping takes a few seconds). ``None``:
    #: ``obs.now``.
    clock: dt.datetime | None = None
    #: The ownership lease as the operator's lease lane last judged it (``spec.lease``, ADR 0049;
    #: ``plan/workload/ownership.py``); ``None``: not judged by this process yet (carried over).
    ownership: LeaseStatus | None = None
    #: The workload's groups in a cluster's drain (ADR 0049; the ``iw_drains`` index, its own
    #: cluster's first: ``plan/drain.py`` ``own_first``); ``None``: none. The planner copies it
    #: into ``status.drain``, which the gateway reads to skip the pods it lists.
    drain: WorkloadDrainStatus | None = None
    #: Whether and how the operator keeps InferencePools (``--inference-pools``, the CRD served,
    #: ``--endpoint-picker``; issue 30). ``None``: not observed: the pool stage is off (no
    #: action, no ``PoolAccepted``, no ``status.inferencePool``).
    pool_settings: PoolSettings | None = None
    #: The InferencePool of the workload's name as it exists (``None``: absent).
    inference_pool: ObservedPool | None = None
    #: The objects labelled as the workload's Managed picker (``sparkrun.dev/inference-pool`` and
    #: the endpoint-picker component), whoever controls them.
    picker: tuple[ObservedPickerObject, ...] = ()
    #: The apiserver's last refusal of the pool (kept by the controller; ``None``: none).
    pool_refused: PoolRefusal | None = None
    #: The recent refusals of the Managed picker's objects, a name taken among them (kept by
    #: the controller, one per kind).
    picker_refused: tuple[PoolRefusal, ...] = ()
    #: The last read of the LocalQueue the workload's JobSets wait in (Kueue, issue 32;
    #: ``controllers/kueue.py``); ``None``: none read (``plan/workload/queue.py``).
    queue: QueueRead | None = None
    #: Where the served Recipe comes from: its trust and its registry's mods (issue 32;
    #: ``plan/workload/hooks.py``); ``None``: from no RecipeRegistry (never trusted).
    hooks: HookSource | None = None
    #: The workload's post_commands Jobs (one per serving revision; ``render/hookjob.py``).
    hook_jobs: tuple[ObservedHookJob, ...] = ()
    #: Leader pod name -> the post_exec outcome its log showed (``ok``/``failed``) and when it was read.
    post_exec: Mapping[str, tuple[str, dt.datetime]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ScalingView:
    """The autoscaler's news for the planner, which alone writes ``status.scaling``."""

    #: The newest decision it wrote to the spec (``None``: none yet in this process).
    decision: ScalingDecision | None = None
    #: Since when every replica has been idle (``None``: busy now).
    idle_since: dt.datetime | None = None
    #: Whether the autoscaler has scraped since this process started (else ``idle_since`` is
    #: unknown and the planner keeps the status' own).
    scraped: bool = False
    #: The replicas to come back to, set when it took the workload to zero.
    resume_replicas: int | None = None


# -- actions ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Delete:
    """Delete a child with a UID precondition (and foreground propagation)."""

    kind: str
    name: str
    uid: str
    reason: str
    #: An InferencePool's or its picker's object (issue 30): a refusal of this delete never
    #: fails the workload.
    pool: bool = False


@dataclass(frozen=True, kw_only=True)
class SetSuspend:
    """Patch ``spec.suspend`` of an existing JobSet."""

    name: str
    uid: str
    suspend: bool


@dataclass(frozen=True, kw_only=True)
class Annotate:
    """Merge these annotations into a ControllerRevision of the workload (served-from/until)."""

    name: str
    annotations: Mapping[str, str]


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
    #: ControllerRevisions to create (a new serving revision; its name is deterministic, so an
    #: AlreadyExists means another pass made it: the next pass plans from what it sees).
    revisions: list[dict[str, Any]] = field(default_factory=list)
    #: Annotations to set on kept ControllerRevisions (when a revision served).
    annotate: list[Annotate] = field(default_factory=list)
    #: The serving revision copies revision N's settings (a rollback): the rollout gate may skip it.
    rollback_of: int | None = None
    #: A live JobSet runs recipe hooks that may no longer run (``hooktrust.py``): the rollout gate
    #: promotes the serving revision without its benchmark.
    hooks_withdrawn: bool = False

    @property
    def idle(self) -> bool:
        """No child action (the status may still change). Annotations of kept revisions
        (``annotate``) are not actions: they only inform, so they neither hold the status lane's
        write back nor count as progress (the served-from mark falls due exactly when a replica
        turns Ready, the write readiness waits for; ADR 0030). The full pass makes them."""
        children = self.apply or self.suspend or self.delete or self.engine
        return not (children or self.revisions)

    @property
    def serving_idle(self) -> bool:
        """Idle but for the pool stage's actions (the InferencePool and its picker, ADR 0050):
        those never hold the status lane's write back, since readiness is the engines' and the
        pool stage's writes wait behind every serving write (docs/performance.md, issue 30)."""
        apply = [d for d in self.apply if LABEL_INFERENCE_POOL not in (d["metadata"].get("labels") or {})]
        delete = [d for d in self.delete if not d.pool]
        return not (apply or self.suspend or delete or self.engine or self.revisions)

    def later(self, seconds: float) -> None:
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


# -- helpers ------------------------------------------------------------------------------


class Conditions:
    """The conditions one pass sets, on top of the previous ones; :meth:`finish` keeps only those."""

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


def leader_pod(pods: Iterable[ObservedPod], jobset: str) -> ObservedPod | None:
    """The leader pod of ``jobset``: one not being deleted first (a group restart overlaps two)."""
    leaders = [p for p in pods if p.jobset == jobset and p.role == "leader"]
    leaders.sort(key=lambda p: (p.deleting, not p.ready, p.name))
    return leaders[0] if leaders else None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def slot_of(js: ObservedJobSet) -> int:
    return js.replica if js.replica is not None else -1
