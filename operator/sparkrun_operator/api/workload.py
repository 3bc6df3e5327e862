"""``InferenceWorkload``: one served model (``docs/concepts.md``, ``docs/resources/inferenceworkload.md``)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.benchmark import LATENCY_METRICS, BenchmarkTemplate, GateMetric
from sparkrun_operator.api.drain import WorkloadDrainStatus
from sparkrun_operator.api.failures import MAX_RANKS, FailureSpec
from sparkrun_operator.api.failures import (
    FailureRecord as FailureRecord,  # re-exported: its home before ADR 0046
)
from sparkrun_operator.api.history import (
    DEFAULT_HISTORY_LIMIT,
    MAX_HISTORY_LIMIT,
    REVISION_HASH_PATTERN,
    ApplyMode,
    DriftStatus,
    EffectiveStatus,
    HistoryStatus,
)
from sparkrun_operator.api.inferencepool import InferencePoolField, InferencePoolStatusField
from sparkrun_operator.api.meta import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Condition,
    EnvVar,
    KubeModel,
    LocalObjectReference,
    Toleration,
)
from sparkrun_operator.api.ownership import LeaseSpec, LeaseStatus
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.api.queue import WorkloadQueueField
from sparkrun_operator.api.scaling import AutoscalingSpec, IdleSpec, ScalingStatus
from sparkrun_operator.api.servedname import ServedName

DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.33.0"
ENGINE_PORT = 8000
MASTER_PORT = 29501
MAX_NODES = MAX_RANKS
MAX_GPUS_PER_NODE = 16

WorkloadState = Literal["Running", "Sleeping", "Stopped"]
WorkloadPhase = Literal[
    "Pending", "Starting", "Running", "Updating", "Degraded", "Sleeping", "ScaledToZero", "Stopped", "Failed"
]


class ModelSpec(KubeModel):
    """Which model to serve."""

    name: ServedName = Field(
        description="Hugging Face model id (org/name) or a path the engine understands; the served name "
        "when servedName is not set, so held to the same rule.",
    )
    revision: str | None = Field(
        default=None,
        description="Model revision: a commit SHA (recommended: reproducible) or a branch/tag.",
        min_length=1,
        max_length=128,
    )
    served_name: ServedName | None = Field(
        default=None,
        description="Name clients use in the 'model' field; defaults to the model name. 1-256 characters, "
        "no control or format characters, no whitespace at either end.",
    )
    aliases: list[ServedName] = Field(
        default_factory=list,
        description="Extra names the gateway routes to this workload (each held to servedName's rule).",
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    cache_ref: LocalObjectReference | None = Field(
        default=None,
        description="ModelCache in the same namespace holding the weights. No pod starts until it is Ready; "
        "the cache volume is mounted read-only and the engine reads from it.",
    )


class EngineSpec(KubeModel):
    """The inference engine and its arguments."""

    kind: Literal["vllm"] = Field(default="vllm", description="Engine kind. Only vllm is supported.")
    image: str = Field(
        default=DEFAULT_ENGINE_IMAGE,
        description="Container image of the engine.",
        min_length=1,
        max_length=512,
    )
    args: list[bounds.EngineArg] = Field(
        default_factory=list,
        description="Extra 'vllm serve' arguments, appended after the ones the operator derives. "
        f"Each item is one argument (at most {bounds.ARG_MAX_LENGTH} characters); items are shell-quoted.",
        max_length=128,
    )
    env: list[EnvVar] = Field(
        default_factory=list, description="Extra environment variables.", max_length=128
    )
    max_model_len: int | None = Field(
        default=None, description="Maximum context length (--max-model-len).", ge=1, le=10_000_000
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        description="Fraction of GPU memory vLLM may use (--gpu-memory-utilization), in (0, 1].",
        gt=0,
        le=1,
    )
    enable_sleep_mode: bool = Field(
        default=False,
        description="Start vLLM with --enable-sleep-mode so state Sleeping can free GPU memory without "
        "stopping the pods. Required for state Sleeping.",
    )


class TopologySpec(KubeModel):
    """How one replica is laid out over nodes and GPUs."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "(self.tensorParallel * self.pipelineParallel) % self.nodes == 0",
                "tensorParallel x pipelineParallel must be a multiple of nodes",
                field_path=".nodes",
            ),
            cel.rule(
                "self.gpusPerNode * self.nodes == self.tensorParallel * self.pipelineParallel",
                "gpusPerNode x nodes must equal tensorParallel x pipelineParallel "
                "(every GPU of the replica serves one rank)",
                field_path=".gpusPerNode",
            ),
        )
    )

    nodes: int = Field(default=1, description="Nodes per replica (one pod per node).", ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(
        default=1, description="GPUs each pod requests (nvidia.com/gpu limit).", ge=1, le=MAX_GPUS_PER_NODE
    )
    tensor_parallel: int = Field(
        default=1, description="Tensor-parallel size (--tensor-parallel-size).", ge=1, le=1024
    )
    pipeline_parallel: int = Field(
        default=1, description="Pipeline-parallel size (--pipeline-parallel-size).", ge=1, le=MAX_NODES
    )


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


class GateThreshold(KubeModel):
    """One figure the new revision's benchmark must meet."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule("has(self.min) != has(self.max)", "set exactly one of min or max", field_path=".max"),
            cel.rule(
                f"!(self.metric in {_cel_list((*LATENCY_METRICS, 'errors'))}) || has(self.max)",
                "latencies and errors are bounded by max (lower is better)",
                field_path=".metric",
            ),
            cel.rule(
                f"self.metric in {_cel_list((*LATENCY_METRICS, 'errors'))} || has(self.min)",
                "outputTokensPerSecond, requestsPerSecond and score are bounded by min (higher is better)",
                field_path=".metric",
            ),
        )
    )

    metric: GateMetric = Field(
        description="The figure: ttftP50..e2eP99 (ms), outputTokensPerSecond, requestsPerSecond, score "
        "(tool-eval-bench) or errors (failed requests)."
    )
    scenario: str | None = Field(
        default=None,
        description="The scenario whose result is checked; unset: every scenario of the benchmark.",
        max_length=63,
        pattern=DNS_LABEL,
    )
    min: float | None = Field(default=None, description="The figure must be at least this.", ge=0)
    max: float | None = Field(default=None, description="The figure must be at most this.", ge=0)


class RolloutGate(KubeModel):
    """Benchmark a new revision's surge replica before any old replica is removed."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "self.thresholds.all(t, !has(t.scenario) || "
                "self.benchmark.scenarios.exists(s, s.name == t.scenario))",
                "every threshold's scenario must be one of benchmark.scenarios",
                field_path=".thresholds",
            ),
        )
    )

    benchmark: BenchmarkTemplate = Field(
        description="The benchmark run against the new revision's first Ready replica (its pod, not the "
        "Service or the gateway)."
    )
    thresholds: list[GateThreshold] = Field(
        description="What the new revision must meet to be promoted; all of them.",
        min_length=1,
        max_length=32,
    )
    timeout_seconds: int = Field(
        default=1800,
        description="The benchmark's timeoutSeconds: past it the benchmark fails and the rollout is held.",
        ge=1,
        le=86_400,
    )
    on_rollback: Literal["Gate", "Skip"] = Field(
        default="Gate",
        description="Gate: a rollback (spec.rollout.revision) is benchmarked like any new revision. Skip: a "
        "rollback is promoted without its benchmark (the settings served before; for emergencies).",
    )


class RolloutSpec(KubeModel):
    """How a change of the serving revision is rolled out."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "!has(self.gate) || self.maxSurge >= 1",
                "rollout.gate needs maxSurge >= 1: the new revision's surge replica is benchmarked while the "
                "old one still serves",
                field_path=".maxSurge",
            ),
        )
    )

    max_surge: int = Field(
        default=1,
        description="Extra replicas created ahead of deleting old ones. 0 deletes an old replica first "
        "(for clusters without spare GPUs).",
        ge=0,
        le=100,
    )
    max_unavailable: int = Field(
        default=0,
        description="Replicas that may be unavailable during a rollout beyond those maxSurge=0 implies.",
        ge=0,
        le=100,
    )
    gate: RolloutGate | None = Field(
        default=None,
        description="Promote a new revision only when its benchmark meets these thresholds; else hold the "
        "rollout (the old revision keeps serving) with condition Promoted=False naming the figure that "
        "missed. Needs maxSurge >= 1.",
    )
    apply: ApplyMode = Field(
        default="Immediate",
        description="Immediate: a change that needs new pods (image, arguments, topology, recipe revision, "
        "cluster or cache) rolls out at once. OnRequest: it is recorded in status.drift (what, from where, "
        "since when) and rolled out when spec.rollout.approve names its hash (sparkrun-k8s rollout apply).",
    )
    approve: str | None = Field(
        default=None,
        description="With apply OnRequest: roll out the pending drift whose desired revision "
        "(status.drift.revision) is this hash. A hash that is not the pending one applies nothing.",
        pattern=REVISION_HASH_PATTERN,
        max_length=10,
    )
    revision: int | None = Field(
        default=None,
        description="Roll back: serve the settings recorded in this revision (a ControllerRevision of the "
        "workload; sparkrun-k8s rollout history). The rollback is a new revision; while set, changes to the "
        "spec or its sources are recorded as drift (reason RevisionPinned), not applied. Remove it to follow "
        "the spec again.",
        ge=1,
    )
    revision_history_limit: int = Field(
        default=DEFAULT_HISTORY_LIMIT,
        description="Revisions kept as ControllerRevisions (the serving one, the one a rollback "
        "names and any "
        "with pods are kept beyond it).",
        ge=1,
        le=MAX_HISTORY_LIMIT,
    )


class SchedulingSpec(KubeModel):
    """Placement and queueing of the workload's pods."""

    queue_name: str | None = Field(
        default=None,
        description="Kueue LocalQueue; set as the kueue.x-k8s.io/queue-name label on every JobSet.",
        max_length=63,
        pattern=DNS_LABEL,
    )
    priority_class_name: str | None = Field(
        default=None, description="PriorityClass of the pods.", max_length=253, pattern=DNS_SUBDOMAIN
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations added to every pod.", max_length=32
    )
    node_selector: dict[str, bounds.LabelValue] = Field(
        default_factory=dict,
        description="Node labels every pod must match.",
        json_schema_extra=bounds.map_keys(
            bounds.LABEL_KEY_MAX_LENGTH, max_entries=bounds.SELECTOR_MAX_ENTRIES
        ),
    )


Capability = Literal["text-generation", "embedding"]


class RoutingSpec(KubeModel):
    """How the inference gateway routes requests to this workload."""

    capabilities: list[Capability] = Field(
        default_factory=list,
        description="What the model can do: text-generation and/or embedding. Empty: derived from the "
        "engine arguments (--task embed or --runner pooling means embedding, else text-generation). "
        "The gateway answers 400 for a request the model cannot serve.",
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    prefix_affinity: bool = Field(
        default=False,
        description="Send requests sharing a prompt prefix to the same replica (consistent hashing with "
        "bounded load), so vLLM's prefix cache hits more often.",
    )
    connect_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=300,
        description="Seconds the gateway waits to connect to a replica before trying another. "
        "Unset: the gateway's --connect-timeout (5).",
    )
    read_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=86400,
        description="Longest silence, in seconds, the gateway accepts from a replica (before the "
        "response head and between two bytes of the response); then 504 or an in-band stream error. "
        "Unset: the gateway's --read-timeout (600).",
    )
    total_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=86400,
        description="Longest a whole request may take at the gateway, from connecting to the replica to "
        "the last byte of the response; then 504 or an in-band stream error. Unset: the gateway's "
        "--total-timeout (1800).",
    )


class RecipeRef(KubeModel):
    """A Recipe to serve."""

    name: str = Field(
        description="Name of a Recipe in the same namespace.",
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )
    revision: str | None = Field(
        default=None,
        description="Pin to this recipe revision (12 hex). On mismatch nothing is rolled and a condition "
        "says so. Unset: follow the recipe, rolling out each new revision.",
        pattern=r"^[0-9a-f]{12}$",
        max_length=12,
    )


class InferenceWorkloadSpec(KubeModel):
    """Desired state of a served model."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.model) || has(self.recipe)",
                "either model or recipe must be set",
                reason="FieldValueRequired",
                field_path=".model",
            ),
            cel.rule(
                "self.state != 'Sleeping' || self.engine.enableSleepMode",
                "state Sleeping needs engine.enableSleepMode: true",
                field_path=".state",
            ),
            cel.rule(
                "!has(oldSelf.manager) || (has(self.manager) && self.manager == oldSelf.manager)",
                "manager is immutable once set",
                field_path=".manager",
            ),
            cel.rule(
                "!has(self.idle) || !has(self.idle.sleepAfterSeconds) || self.engine.enableSleepMode",
                "idle.sleepAfterSeconds needs engine.enableSleepMode: true",
                field_path=".idle.sleepAfterSeconds",
            ),
            cel.rule(
                "!has(self.idle) || !has(self.idle.zeroAfterSeconds) || !has(self.autoscaling) || "
                "(self.autoscaling.mode == 'Operator' && self.autoscaling.minReplicas == 0)",
                "idle.zeroAfterSeconds with autoscaling needs autoscaling.mode Operator and minReplicas 0 "
                "(in External mode the external autoscaler owns replicas: use its own scale to zero)",
                field_path=".idle.zeroAfterSeconds",
            ),
        )
    )

    model: ModelSpec | None = Field(
        default=None, description="The model to serve. Optional when a recipe provides it."
    )
    engine: EngineSpec = Field(
        default_factory=EngineSpec, description="Engine image, arguments and settings."
    )
    topology: TopologySpec = Field(default_factory=TopologySpec, description="Nodes and GPUs per replica.")
    replicas: int = Field(
        default=1,
        description="Number of independent serving replicas (scale subresource). With autoscaling or "
        "idle set, the autoscaler writes it (field manager sparkrun-autoscaler): leave it out of Git.",
        ge=0,
        le=1000,
    )
    cluster: str | None = Field(
        default=None,
        description="InferenceCluster whose nodes serve this workload; unset uses the default cluster "
        "if one exists, else any node.",
        max_length=253,
        pattern=DNS_SUBDOMAIN,
    )
    state: WorkloadState = Field(
        default="Running",
        description="Running serves; Sleeping puts the engine to sleep (pods and GPUs kept, not routed); "
        "Stopped suspends the JobSets (pods deleted, fast resume).",
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec, description="Rollout of serving-revision changes."
    )
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, description="Placement and queueing.")
    recipe: RecipeRef | None = Field(
        default=None, description="Serve a Recipe; this workload's own fields override the recipe's."
    )
    routing: RoutingSpec = Field(default_factory=RoutingSpec, description="Gateway routing of this workload.")
    manager: str | None = Field(
        default=None,
        description="Identity owning this workload for guarded daemon operations (stop, sleep, wake, "
        "reconcile). Immutable once set.",
        min_length=1,
        max_length=253,
    )
    autoscaling: AutoscalingSpec | None = Field(
        default=None,
        description="Replicas follow the engines' load (queue and KV-cache use per replica), or an HPA/KEDA "
        "drives them (mode External). docs/autoscaling.md.",
    )
    idle: IdleSpec | None = Field(
        default=None,
        description="Sleep, then go to zero replicas, when no request arrives for a while; a request wakes "
        "the workload again (held at the gateway meanwhile). docs/autoscaling.md.",
    )
    failures: FailureSpec = Field(
        default_factory=FailureSpec, description="How long status.firstFailure is kept."
    )
    pod: PodOverride | None = Field(
        default=None,
        description="Engine pods only (leader and workers; not download, tool or benchmark pods): their "
        "securityContext and the engine containers' (allowed subsets listed there), serviceAccountName, "
        "automountServiceAccountToken, extra labels and annotations. Unset: the operator's defaults (no "
        "token mounted, no privilege escalation, capabilities dropped, seccomp RuntimeDefault; the image's "
        "user).",
    )
    lease: LeaseSpec | None = Field(
        default=None,
        description="An ownership lease (an ephemeral workload): a client renews it (the daemon API's "
        "workloads.lease, sparkrun-k8s lease); unrenewed for ttlSeconds it lapses: deleteOnExit deletes the "
        "workload, else it is marked an orphan. docs/day-two.md.",
    )
    inference_pool: InferencePoolField = None


class Endpoint(KubeModel):
    """Where one replica serves."""

    replica: int = Field(description="Replica index.", ge=0)
    url: str = Field(description="Base URL of the replica's OpenAI-compatible server.")
    ready: bool = Field(description="Whether the leader passes its readiness probe.")


StartupStage = Literal[
    "accepted", "cacheReady", "scheduled", "running", "ready", "mods", "preExec", "postExec", "postCommands"
]


class ServedModel(KubeModel):
    """What the engine serves and the names it answers to, resolved from the workload and its
    recipe by the one naming rule (``plan/served.py``); every reader of names reads these."""

    name: str = Field(description="The model the engine loads (Hugging Face id or path).", max_length=512)
    served_name: str = Field(
        description="The name the engine is started with (--served-model-name): clients send it as 'model'.",
        max_length=256,
    )
    aliases: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list, description="Extra names the gateway routes to this workload.", max_length=16
    )
    capabilities: list[Capability] = Field(
        default_factory=list,
        description="What the model can do (declared in spec.routing, else derived from the effective "
        "engine arguments, the recipe's included).",
        max_length=2,
    )


class StartupEvent(KubeModel):
    """One step of a replica's cold start; mods, preExec, postExec, postCommands: a recipe's hooks."""

    stage: StartupStage = Field(description="accepted, cacheReady, scheduled, running, ready; hooks.")
    time: dt.datetime = Field(description="When the stage was first observed.")
    replica: int | None = Field(default=None, description="Replica index, when per replica.", ge=0)
    revision: str | None = Field(default=None, description="Serving revision the stage belongs to.")
    outcome: Literal["ok", "failed", "skipped"] | None = Field(default=None, description="A hook's end.")
    message: str | None = Field(default=None, description="Why a hook failed or was skipped.", max_length=512)


class InferenceWorkloadStatus(KubeModel):
    """Observed state of a served model, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation this status describes.", ge=0
    )
    phase: WorkloadPhase | None = Field(
        default=None, description="One-word summary for humans; see conditions."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, Scheduled, CacheReady, Sleeping, RecipeResolved, "
        "Routable, Promoted (with spec.rollout.gate), Owned (with spec.lease), PoolAccepted (when the "
        "operator manages InferencePools).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    revision: str | None = Field(default=None, description="Hash of the effective serving spec now desired.")
    model: ServedModel | None = Field(
        default=None,
        description="The model served and its names, as resolved for the desired revision (the recipe "
        "included). The gateway, the daemon API and kubectl read names from here.",
    )
    replicas: int = Field(default=0, description="Replicas that exist (scale subresource).", ge=0)
    ready_replicas: int = Field(default=0, description="Replicas whose leader is Ready.", ge=0)
    selector: str | None = Field(
        default=None, description="Label selector of the leader pods, for the scale subresource and HPA."
    )
    endpoints: list[Endpoint] = Field(default_factory=list, description="Per-replica serving addresses.")
    startup: list[StartupEvent] = Field(
        default_factory=list, description="Cold-start timeline of the current revision.", max_length=256
    )
    restarts: int = Field(default=0, description="Group restarts counted over all replicas.", ge=0)
    last_failure: FailureRecord | None = Field(default=None, description="The most recent failure.")
    first_failure: FailureRecord | None = Field(
        default=None,
        description="The first failure since the workload was last Ready for "
        "spec.failures.resetAfterReadySeconds: "
        "what broke a group before its restarts.",
    )
    history: HistoryStatus | None = Field(
        default=None, description="The kept revisions: current, previous, what the current one changed."
    )
    effective: EffectiveStatus | None = Field(
        default=None, description="Where each effective setting of the serving revision comes from."
    )
    drift: DriftStatus | None = Field(
        default=None,
        description="Desired settings the pods do not run yet (apply OnRequest, a rollback pin, a recipe "
        "revision pin): what, from where, since when.",
    )
    workload_id: str | None = Field(
        default=None,
        description="sparkrun workload id, sparkrun_<intent>_<placement>, used by the daemon API.",
        pattern=r"^sparkrun_[0-9a-f]{16}_[0-9a-f]{12}$",
    )
    intent_id: str | None = Field(
        default=None, description="sparkrun intent id of the serving configuration."
    )
    recipe_revision: str | None = Field(default=None, description="Revision of the Recipe being served.")
    scaling: ScalingStatus | None = Field(
        default=None,
        description="Autoscaling and idle decisions, the idle clock and measured wake times (with "
        "spec.autoscaling or spec.idle, or once a wake was measured).",
    )
    lease: LeaseStatus | None = Field(
        default=None,
        description="The ownership lease as last judged (with spec.lease): state, holder, since when; "
        "written on transitions only, never on a renew.",
    )
    drain: WorkloadDrainStatus | None = Field(
        default=None,
        description="This workload's groups in its InferenceCluster's drain (moved off cordoned nodes "
        "one at a time; the gateway stops routing to a group's listed pods while it moves).",
    )
    inference_pool: InferencePoolStatusField = None
    queue: WorkloadQueueField = None
