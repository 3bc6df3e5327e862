"""``InferenceBenchmark``: a load test against a served model; results live in status."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import cel
from sparkrun_operator.api.meta import DNS_LABEL, Condition, KubeModel, LocalObjectReference

BenchmarkPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


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


class Scenario(KubeModel):
    """One load level: a fixed number of requests, or a fixed duration."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.requests) != has(self.durationSeconds)",
                "set exactly one of requests or durationSeconds",
            )
        )
    )

    name: str = Field(
        description="Scenario name, unique in the benchmark.", min_length=1, max_length=63, pattern=DNS_LABEL
    )
    concurrency: int = Field(default=1, description="Concurrent requests in flight.", ge=1, le=4096)
    requests: int | None = Field(default=None, description="Total requests to send.", ge=1, le=1_000_000)
    duration_seconds: int | None = Field(
        default=None, description="How long to send requests.", ge=1, le=86_400
    )
    input_tokens: int = Field(
        default=128, description="Approximate prompt length in tokens.", ge=1, le=1_000_000
    )
    output_tokens: int = Field(default=128, description="max_tokens of each request.", ge=1, le=1_000_000)


class InferenceBenchmarkSpec(KubeModel):
    """What to measure. Immutable: a different benchmark is a new object, so results stay comparable."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule("self == oldSelf", "spec is immutable; create a new InferenceBenchmark")
        )
    )

    target: BenchmarkTarget = Field(description="The server under test.")
    scenarios: list[Scenario] = Field(
        description="Load levels, run in order.",
        min_length=1,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    framework: Literal["builtin", "vllm-bench", "guidellm"] = Field(
        default="builtin", description="Load generator: builtin, vllm-bench or guidellm."
    )
    timeout_seconds: int = Field(default=3600, description="Give up after this long.", ge=1, le=604_800)


class LatencySummary(KubeModel):
    """Percentiles of one latency, in milliseconds."""

    p50: float = Field(description="Median, ms.", ge=0)
    p90: float = Field(description="90th percentile, ms.", ge=0)
    p99: float = Field(description="99th percentile, ms.", ge=0)


class ScenarioResult(KubeModel):
    """Results of one scenario."""

    name: str = Field(description="Scenario name.")
    requests: int = Field(description="Requests completed.", ge=0)
    errors: int = Field(description="Requests that failed.", ge=0)
    ttft: LatencySummary | None = Field(default=None, description="Time to first token.")
    itl: LatencySummary | None = Field(default=None, description="Inter-token latency.")
    e2e: LatencySummary | None = Field(default=None, description="End-to-end request latency.")
    output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens per second.", ge=0
    )
    requests_per_second: float | None = Field(
        default=None, description="Completed requests per second.", ge=0
    )


class Provenance(KubeModel):
    """What exactly was measured, so runs are comparable."""

    workload_revision: str | None = Field(default=None, description="Serving revision of the workload.")
    engine_image: str | None = Field(default=None, description="Engine image.")
    model_revision: str | None = Field(default=None, description="Model revision.")
    gpu_product: str | None = Field(default=None, description="GPU product of the serving nodes.")


class InferenceBenchmarkStatus(KubeModel):
    """Observed state and results."""

    observed_generation: int | None = Field(
        default=None, description="Generation this status describes.", ge=0
    )
    phase: BenchmarkPhase | None = Field(default=None, description="Pending, Running, Succeeded or Failed.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Complete and Failed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    started_at: dt.datetime | None = Field(default=None, description="When the run started.")
    finished_at: dt.datetime | None = Field(default=None, description="When the run finished.")
    results: list[ScenarioResult] = Field(default_factory=list, description="Per-scenario results.")
    provenance: Provenance | None = Field(default=None, description="What was measured.")
