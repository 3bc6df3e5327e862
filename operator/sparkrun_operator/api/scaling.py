"""Capacity that follows demand (ADR 0045): ``spec.autoscaling``, ``spec.idle`` and
``status.scaling`` of an InferenceWorkload.

Who writes what: the operator's autoscaler writes ``spec.replicas`` and ``spec.state`` as field
manager ``sparkrun-autoscaler`` (as an HPA writes a Deployment's replicas); an HPA or KEDA does
the same through the scale subresource in ``External`` mode; the gateway's wake writes them as
``sparkrun-gateway``. Git leaves both fields out of a workload that sets ``autoscaling`` or
``idle`` (docs/install.md, "GitOps"). ``status.scaling`` is the planner's, like every status
field: the decisions, the idle clock and the measured wake times.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import ConfigDict, Field

from sparkrun_operator.api import cel
from sparkrun_operator.api.meta import KubeModel

MAX_REPLICAS = 1000
#: Wake and cold-start times kept per kind of wake (``status.scaling.wakeSeconds``).
WAKE_HISTORY = 8

AutoscalingMode = Literal["Operator", "External"]
#: Where a wake starts from: an engine asleep (pods and GPUs kept), zero replicas (the idle
#: policy or the autoscaler took them away: a cold start), or the user's ``state: Stopped``
#: (suspended JobSets resumed: a cold start too).
WakeFrom = Literal["Sleeping", "Zero", "Stopped"]
ScalingAction = Literal["ScaleUp", "ScaleDown", "Sleep", "ScaleToZero"]


class ScalingTarget(KubeModel):
    """What one replica should carry; the autoscaler keeps every set figure at or below it."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.waitingPerReplica) || has(self.kvCacheUsage)",
                "set waitingPerReplica, kvCacheUsage or both",
                reason="FieldValueRequired",
            ),
        )
    )

    waiting_per_replica: float | None = Field(
        default=None,
        description="Requests queued per replica (vLLM's vllm:num_requests_waiting, summed over the "
        "replicas and divided by their number).",
        gt=0,
        le=100_000,
    )
    kv_cache_usage: float | None = Field(
        default=None,
        description="Mean KV-cache use of the replicas (vllm:kv_cache_usage_perc), a fraction in (0, 1].",
        gt=0,
        le=1,
    )


class AutoscalingSpec(KubeModel):
    """Replicas follow the engines' load, between ``minReplicas`` and ``maxReplicas``."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "self.minReplicas <= self.maxReplicas",
                "minReplicas must not exceed maxReplicas",
                field_path=".minReplicas",
            ),
            cel.rule(
                "self.mode != 'Operator' || has(self.target)",
                "mode Operator needs target (waitingPerReplica and/or kvCacheUsage)",
                reason="FieldValueRequired",
                field_path=".target",
            ),
        )
    )

    mode: AutoscalingMode = Field(
        default="Operator",
        description="Operator: the operator scrapes each engine's /metrics and writes spec.replicas. "
        "External: an HPA or KEDA writes spec.replicas through the scale subresource; the operator only "
        "exports sparkrun_workload_load_per_replica for it (docs/autoscaling.md).",
    )
    min_replicas: int = Field(
        default=1,
        description="The fewest replicas load alone leaves. 0 lets spec.idle take the workload to zero "
        "(load-based decisions never go below 1).",
        ge=0,
        le=MAX_REPLICAS,
    )
    max_replicas: int = Field(description="The most replicas.", ge=1, le=MAX_REPLICAS)
    target: ScalingTarget | None = Field(
        default=None, description="Per-replica targets (Operator mode; External mode ignores them)."
    )
    scrape_interval_seconds: int = Field(
        default=15, description="Seconds between two scrapes of every replica's /metrics.", ge=1, le=300
    )
    scale_up_window_seconds: int = Field(
        default=30,
        description="The load must stay above target this long (every scrape in the window) before "
        "replicas are added; the count added is the smallest that meets the target at the window's "
        "lowest load.",
        ge=0,
        le=3600,
    )
    scale_down_window_seconds: int = Field(
        default=300,
        description="The load must stay below what one replica fewer could carry this long before "
        "replicas are removed; the count kept meets the target at the window's highest load.",
        ge=0,
        le=86_400,
    )
    cooldown_seconds: int = Field(
        default=60,
        description="Least seconds between two scaling decisions of the autoscaler.",
        ge=0,
        le=86_400,
    )


class IdleSpec(KubeModel):
    """What an idle workload gives back. Idle: over the period, every replica's
    vllm:num_requests_running and vllm:num_requests_waiting stayed 0 and its request counter did
    not move (the operator's scrapes; docs/autoscaling.md)."""

    model_config = ConfigDict(
        json_schema_extra=cel.rules(
            cel.rule(
                "has(self.sleepAfterSeconds) || has(self.zeroAfterSeconds)",
                "set sleepAfterSeconds, zeroAfterSeconds or both",
                reason="FieldValueRequired",
            ),
        )
    )

    sleep_after_seconds: int | None = Field(
        default=None,
        description="Idle this long: state Sleeping (vLLM sleep level 1: weights offloaded to CPU, GPU "
        "memory freed, pods kept, a fast wake). Needs engine.enableSleepMode.",
        ge=10,
        le=30 * 86_400,
    )
    zero_after_seconds: int | None = Field(
        default=None,
        description="Then this long more (asleep, or idle when sleepAfterSeconds is unset): zero "
        "replicas, every pod and GPU freed. Not state Stopped: a request wakes it (docs/autoscaling.md).",
        ge=10,
        le=30 * 86_400,
    )
    scrape_interval_seconds: int = Field(
        default=15,
        description="Seconds between two scrapes when spec.autoscaling is absent (with it, its own "
        "scrapeIntervalSeconds applies).",
        ge=1,
        le=300,
    )


class ScalingFigures(KubeModel):
    """The load behind a decision, over all replicas scraped."""

    replicas_scraped: int = Field(default=0, description="Replicas whose /metrics answered.", ge=0)
    waiting: float = Field(default=0, description="vllm:num_requests_waiting, summed.", ge=0)
    running: float = Field(default=0, description="vllm:num_requests_running, summed.", ge=0)
    kv_cache_usage: float | None = Field(
        default=None, description="Mean vllm:kv_cache_usage_perc (0-1).", ge=0, le=1
    )
    window_seconds: int | None = Field(
        default=None, description="The window the figures held over, in seconds.", ge=0
    )


class ScalingDecision(KubeModel):
    """One decision of the autoscaler or the idle policy (also posted as an Event)."""

    action: ScalingAction = Field(description="ScaleUp, ScaleDown, Sleep or ScaleToZero.")
    time: dt.datetime = Field(description="When it was written.")
    from_replicas: int = Field(description="spec.replicas before.", ge=0, le=MAX_REPLICAS)
    to_replicas: int = Field(description="spec.replicas after.", ge=0, le=MAX_REPLICAS)
    message: str = Field(default="", description="Why, in words.", max_length=1024)
    figures: ScalingFigures | None = Field(default=None, description="The load behind it.")


class WakeInProgress(KubeModel):
    """A wake the planner saw begin and not yet end."""

    from_: WakeFrom = Field(alias="from", description="Sleeping, Zero or Stopped.")
    since: dt.datetime = Field(description="When the planner first saw the workload asked to serve again.")


class WakeSeconds(KubeModel):
    """Measured seconds from the request to wake (the planner seeing it) to Ready, the last few of
    each kind; the gateway's Retry-After is computed from them."""

    sleeping: list[float] = Field(default_factory=list, description="From Sleeping.", max_length=WAKE_HISTORY)
    zero: list[float] = Field(
        default_factory=list, description="From zero replicas.", max_length=WAKE_HISTORY
    )
    stopped: list[float] = Field(
        default_factory=list, description="From state Stopped.", max_length=WAKE_HISTORY
    )


class ScalingStatus(KubeModel):
    """What the autoscaler and the idle policy decided and measured."""

    last_decision: ScalingDecision | None = Field(default=None, description="The latest decision.")
    idle_since: dt.datetime | None = Field(
        default=None,
        description="Since when every replica has been idle (unset: busy, or not scraped yet).",
    )
    resume_replicas: int | None = Field(
        default=None,
        description="Replicas a request brings back after the idle policy took the workload to zero.",
        ge=1,
        le=MAX_REPLICAS,
    )
    wake: WakeInProgress | None = Field(default=None, description="The wake under way, if any.")
    wake_seconds: WakeSeconds = Field(
        default_factory=WakeSeconds, description="Measured wake and cold-start times."
    )
