"""``InferenceBenchmark``: a load test against a served model; results live in status."""

from __future__ import annotations

import datetime as dt
from typing import Any, Final, Literal, get_args

from pydantic import ConfigDict, Field

from sparkrun_operator.api import bounds, cel
from sparkrun_operator.api.meta import DNS_LABEL, Condition, KubeModel, LocalObjectReference, Toleration

BenchmarkPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
LLAMA_BENCHY: Final = "llama-benchy"
TOOL_EVAL_BENCH: Final = "tool-eval-bench"
#: The frameworks the runner drives (sparkrun's): ``runtime/benchframeworks.py``.
FRAMEWORKS: Final = (LLAMA_BENCHY, TOOL_EVAL_BENCH)
Framework = Literal["llama-benchy", "tool-eval-bench"]
#: The figures a rollout gate's thresholds name (latencies in ms, of the scenario's result).
LatencyMetric = Literal[
    "ttftP50", "ttftP90", "ttftP99", "itlP50", "itlP90", "itlP99", "e2eP50", "e2eP90", "e2eP99"
]
#: Figures where more is better: a threshold on them is a ``min``.
RateMetric = Literal["outputTokensPerSecond", "requestsPerSecond", "score"]
GateMetric = Literal[LatencyMetric, RateMetric, "errors"]
LATENCY_METRICS: Final = get_args(LatencyMetric)
RATE_METRICS: Final = get_args(RateMetric)
#: Framework arguments: flag names to scalars or lists (free-form, bounded: ``bounds.json_value``).
_ARGS: Final[dict[str, Any]] = bounds.json_value(bounds.BENCH_ARGS_DEPTH)


class BenchmarkTarget(KubeModel):
    """What to load: a workload in the namespace, or any OpenAI-compatible URL."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.workloadRef) != has(self.url)",
                "set exactly one of target.workloadRef or target.url",
            ),
            cel.rule(
                "!has(self.url) || has(self.model)",
                "target.model is required with target.url",
                field_path=".model",
                reason="FieldValueRequired",
            ),
        )
    )

    workload_ref: LocalObjectReference | None = Field(default=None, description="An InferenceWorkload.")
    url: str | None = Field(
        default=None,
        description="Base URL of an OpenAI-compatible server.",
        pattern=r"^https?://",
        max_length=2048,
    )
    model: str | None = Field(
        default=None,
        description="Model name to request; defaults to the workload's served name.",
        max_length=256,
    )
    via: Literal["Service", "Endpoint", "Gateway"] = Field(
        default="Service",
        description="With workloadRef: the workload's Service, its first Ready replica's endpoint "
        "(status.endpoints: one replica, no load balancing), or the gateway (operator --gateway-url).",
    )


class Scenario(KubeModel):
    """One load level: one run of the framework with these figures pinned over the arguments."""

    name: str = Field(
        description="Scenario name, unique in the benchmark.", min_length=1, max_length=63, pattern=DNS_LABEL
    )
    concurrency: int = Field(default=1, description="Concurrent requests in flight.", ge=1, le=4096)
    requests: int | None = Field(
        default=None,
        description="Requests to measure (llama-benchy: runs of `concurrency` requests, rounded up); "
        "default: the framework's.",
        ge=1,
        le=1_000_000,
    )
    input_tokens: int | None = Field(
        default=None, description="Prompt length in tokens (llama-benchy pp).", ge=1, le=1_000_000
    )
    output_tokens: int | None = Field(
        default=None, description="Tokens to generate (llama-benchy tg).", ge=1, le=1_000_000
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Framework arguments for this scenario only, over benchArgs.",
        json_schema_extra=_ARGS,
    )


class RunnerSpec(KubeModel):
    """Where the benchmark pods run (the tools image; no GPU)."""

    node_selector: dict[str, bounds.LabelValue] = Field(
        default_factory=dict,
        description="Node labels the pod must match.",
        json_schema_extra=bounds.map_keys(
            bounds.LABEL_KEY_MAX_LENGTH, max_entries=bounds.SELECTOR_MAX_ENTRIES
        ),
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of the benchmark pods.", max_length=32
    )


class BenchmarkTemplate(KubeModel):
    """What to run, without the target: an InferenceBenchmark's measuring part, and the template a
    gated rollout (``InferenceWorkload.spec.rollout.gate.benchmark``) benchmarks each new revision
    with."""

    scenarios: list[Scenario] = Field(
        description="Load levels, run in order.",
        min_length=1,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    framework: Framework = Field(
        default="llama-benchy", description="The framework that measures: llama-benchy or tool-eval-bench."
    )
    profile: str | None = Field(
        default=None,
        description="A named set of framework arguments (docs/benchmarks.md lists them).",
        max_length=63,
    )
    bench_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Framework arguments (its flag names, `_` for `-`), over the profile's.",
        json_schema_extra=_ARGS,
    )
    tokenizer: str | None = Field(
        default=None,
        description="llama-benchy's tokenizer: a Hub repo id, or a path inside the target's ModelCache; "
        "default: the target's ModelCache, then the Hub (the workload's model).",
        max_length=256,
    )
    hf_endpoint: str | None = Field(
        default=None,
        description="Hub the tokenizer comes from when the target's ModelCache cannot give it (default: the "
        "runner's HF_ENDPOINT, else huggingface.co).",
        pattern=r"^https?://",
        max_length=2048,
    )
    runner: RunnerSpec = Field(default_factory=RunnerSpec, description="Placement of the benchmark pods.")


class InferenceBenchmarkSpec(BenchmarkTemplate):
    """What to measure. Immutable: a different benchmark is a new object, so results stay comparable."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule("self == oldSelf", "spec is immutable; create a new InferenceBenchmark")
        )
    )

    target: BenchmarkTarget = Field(description="The server under test.")
    timeout_seconds: int = Field(default=3600, description="Give up after this long.", ge=1, le=604_800)
    target_ready_seconds: int = Field(
        default=600,
        description="Fail when the target workload is not Ready this long after the benchmark started.",
        ge=1,
        le=86_400,
    )


class LatencySummary(KubeModel):
    """Percentiles of one latency, in milliseconds."""

    p50: float = Field(description="Median, ms.", ge=0)
    p90: float = Field(description="90th percentile, ms.", ge=0)
    p99: float = Field(description="99th percentile, ms.", ge=0)


class SampleCounts(KubeModel):
    """How many measurements each latency summarises."""

    ttft: int = Field(default=0, description="Requests with a first token.", ge=0)
    itl: int = Field(default=0, description="Requests with two tokens or more.", ge=0)
    e2e: int = Field(default=0, alias="e2e", description="Completed requests.", ge=0)


class RawOutput(KubeModel):
    """Where the framework's own output (bounded) is kept."""

    config_map: str = Field(description="ConfigMap in the benchmark's namespace.")
    key: str = Field(description="Key of the scenario's output in it.")
    bytes: int = Field(description="Bytes kept (the tail of the output).", ge=0)


class ScenarioResult(KubeModel):
    """Results of one scenario, in one schema whatever the framework."""

    name: str = Field(description="Scenario name.")
    framework: str | None = Field(default=None, description="Framework that measured.")
    framework_version: str | None = Field(default=None, description="Its version.")
    requests: int = Field(description="Requests completed.", ge=0)
    errors: int = Field(description="Requests that failed.", ge=0)
    errors_by_kind: dict[str, int] = Field(
        default_factory=dict,
        description="Failed requests by kind (http_<status>, timeout, connection, other).",
    )
    samples: SampleCounts | None = Field(default=None, description="Sample counts behind each summary.")
    ttft: LatencySummary | None = Field(default=None, description="Time to first token.")
    itl: LatencySummary | None = Field(
        default=None,
        description="Inter-token latency per request (decode time per token after the first: TPOT).",
    )
    e2e: LatencySummary | None = Field(default=None, alias="e2e", description="End-to-end request latency.")
    output_tokens: int | None = Field(default=None, description="Output tokens received.", ge=0)
    output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second over the measured span.", ge=0
    )
    requests_per_second: float | None = Field(
        default=None, description="Completed requests per second over the measured span.", ge=0
    )
    duration_seconds: float | None = Field(default=None, description="Measured span, s.", ge=0)
    score: float | None = Field(default=None, description="tool-eval-bench: the final score (0-100).")
    framework_figures: dict[str, float] = Field(
        default_factory=dict,
        description="The framework's own summary figures (e.g. llama-benchy tgThroughput).",
    )
    raw_output: RawOutput | None = Field(default=None, description="The framework's own output.")
    finished_at: dt.datetime | None = Field(default=None, description="When the scenario finished.")


class Provenance(KubeModel):
    """What exactly was measured, so runs are comparable."""

    workload_revision: str | None = Field(default=None, description="Serving revision of the workload.")
    engine_image: str | None = Field(default=None, description="Engine image.")
    model: str | None = Field(default=None, description="Model id.")
    model_revision: str | None = Field(default=None, description="Model revision.")
    gpu_product: str | None = Field(default=None, description="GPU product of the serving nodes.")
    gpu_count: int | None = Field(default=None, description="GPUs of one replica.", ge=0)
    framework: str | None = Field(default=None, description="Framework.")
    framework_version: str | None = Field(default=None, description="Framework version.")
    url: str | None = Field(default=None, description="Base URL measured.")


class ScenarioComparison(KubeModel):
    """This run over the baseline's, per figure (ratio = this / baseline)."""

    name: str = Field(description="Scenario name.")
    ratios: dict[str, float] = Field(
        default_factory=dict,
        description="ttftP50, itlP50, e2eP50, e2eP99, outputTokensPerSecond, requestsPerSecond: "
        "this / baseline.",
    )


class Comparison(KubeModel):
    """Against the previous successful benchmark of the same target, framework and scenarios."""

    baseline: str = Field(description="The InferenceBenchmark compared with.")
    baseline_finished_at: dt.datetime | None = Field(default=None, description="When it finished.")
    scenarios: list[ScenarioComparison] = Field(default_factory=list, description="Per scenario in both.")


class Headline(KubeModel):
    """The first scenario's figures, for ``kubectl get ib``."""

    ttft_p50_ms: float | None = Field(default=None, description="TTFT p50, ms.")
    itl_p50_ms: float | None = Field(default=None, description="ITL p50, ms.")
    output_tokens_per_second: float | None = Field(default=None, description="Output tokens/s.")
    requests_per_second: float | None = Field(default=None, description="Requests/s.")
    ttft_ratio: float | None = Field(default=None, description="TTFT p50 over the baseline's.")


class InferenceBenchmarkStatus(KubeModel):
    """Observed state and results."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    phase: BenchmarkPhase | None = Field(default=None, description="Pending, Running, Succeeded or Failed.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="TargetReady, Complete and Failed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    started_at: dt.datetime | None = Field(default=None, description="When the run started.")
    finished_at: dt.datetime | None = Field(default=None, description="When the run finished.")
    current_scenario: str | None = Field(default=None, description="The scenario running now.")
    attempt: int = Field(default=0, description="Resumes so far (sparkrun.dev/resume).", ge=0)
    resume_token: str | None = Field(default=None, description="The sparkrun.dev/resume value last acted on.")
    results: list[ScenarioResult] = Field(default_factory=list, description="Per-scenario results.")
    provenance: Provenance | None = Field(default=None, description="What was measured.")
    comparison: Comparison | None = Field(default=None, description="Against the previous run.")
    headline: Headline | None = Field(default=None, description="Headline figures.")
