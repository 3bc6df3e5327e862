"""Engine metrics in Prometheus text format, with vLLM's metric and label names."""

from __future__ import annotations

from dataclasses import dataclass, field

# vLLM's TTFT histogram buckets (vllm/v1/metrics/loggers.py), so dashboards built on the real
# engine read the stand-in's histogram the same way.
_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


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
    ttft: Histogram = field(default_factory=lambda: Histogram(_TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(_E2E_BUCKETS))
