"""Engine metrics in Prometheus text format, with vLLM's metric and label names."""

from __future__ import annotations

from dataclasses import dataclass, field

# vLLM's default histogram buckets (the pinned release's vllm/v1/metrics/buckets.py, as listed in
# helm/sparkrun-operator/dashboards/vllm-metrics.yaml; a test compares them), so dashboards built
# on the real engine read the stand-in's histograms the same way.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
#: The ``inter_token_latency`` family (inter-token latency, time per output token).
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
#: The ``request_latency`` family (end-to-end and queue time).
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.n += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def render(self, name: str, labels: str) -> list[str]:
        out = []
        for bound, count in zip(self.buckets, self.counts, strict=True):
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(count)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(self.n)}')
        out.append(f"{name}_count{{{labels}}} {float(self.n)}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


@dataclass
class Stats:
    """Counters and gauges the engine exports at ``/metrics``."""

    running: int = 0
    waiting: int = 0
    running_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    #: Arrival to the first generated token (queue time included, as vLLM's).
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    #: Between two consecutive generated tokens of a request.
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    #: Arrival to the last token of a request that finished (not aborted).
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    #: Arrival to admission into the running batch (the scheduler's wait).
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    #: Running requests preempted: always 0 (the stand-in never preempts; vLLM exports it anyway).
    preemptions: int = 0
