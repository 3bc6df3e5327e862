"""An InferenceBenchmark's comparison with the previous successful one, and its headline (pure).

The baseline is the latest other ``Succeeded`` benchmark of the same target (workload name or URL)
and framework that finished before this one; per scenario of the same name, each figure's ratio
is this run's over the baseline's (latencies: below 1 is better; throughputs: above 1 is better).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sparkrun_operator.api.benchmark import Comparison, Headline, ScenarioComparison, ScenarioResult

#: Figure name -> how to read it off a result.
FIGURES: Final = (
    "ttftP50",
    "ttftP99",
    "itlP50",
    "itlP99",
    "e2eP50",
    "e2eP99",
    "outputTokensPerSecond",
    "requestsPerSecond",
)


@dataclass(frozen=True, kw_only=True)
class PreviousRun:
    name: str
    target: str
    framework: str
    finished_at: dt.datetime | None
    results: tuple[ScenarioResult, ...]


def figure(result: ScenarioResult, name: str) -> float | None:
    """One figure of a result: ``ttftP50`` .. ``e2eP99``, ``outputTokensPerSecond``, ``requestsPerSecond``."""
    if name == "outputTokensPerSecond":
        return result.output_tokens_per_second
    if name == "requestsPerSecond":
        return result.requests_per_second
    summary = getattr(result, name[:-3].lower(), None)
    return getattr(summary, name[-3:].lower(), None) if summary is not None else None


def baseline(
    previous: Sequence[PreviousRun], *, me: str, target: str, framework: str, before: dt.datetime
) -> PreviousRun | None:
    candidates = [
        p
        for p in previous
        if p.name != me
        and p.target == target
        and p.framework == framework
        and p.finished_at is not None
        and p.finished_at <= before
    ]
    return max(candidates, key=lambda p: (p.finished_at, p.name), default=None)


def compare(results: Sequence[ScenarioResult], base: PreviousRun) -> Comparison:
    theirs = {r.name: r for r in base.results}
    scenarios = []
    for mine in results:
        other = theirs.get(mine.name)
        if other is None:
            continue
        ratios: dict[str, float] = {}
        for name in FIGURES:
            a, b = figure(mine, name), figure(other, name)
            if a is not None and b:
                ratios[name] = round(a / b, 4)
        scenarios.append(ScenarioComparison(name=mine.name, ratios=ratios))
    return Comparison(baseline=base.name, baseline_finished_at=base.finished_at, scenarios=scenarios)


def headline(results: Sequence[ScenarioResult], comparison: Comparison | None) -> Headline | None:
    if not results:
        return None
    first = results[0]
    ratio = None
    if comparison is not None:
        ratio = next((s.ratios.get("ttftP50") for s in comparison.scenarios if s.name == first.name), None)
    return Headline(
        ttft_p50_ms=first.ttft.p50 if first.ttft else None,
        itl_p50_ms=first.itl.p50 if first.itl else None,
        output_tokens_per_second=first.output_tokens_per_second,
        requests_per_second=first.requests_per_second,
        ttft_ratio=ratio,
    )
