"""What ``sparkrun-k8s bench`` prints, as pure functions of InferenceBenchmark objects.

:func:`show_data` / :func:`show_text` (one benchmark: what ran against what, each scenario's
throughput and TTFT/ITL/E2E percentiles, the comparison the operator made with the previous
run), :func:`compare_data` / :func:`compare_text` (benchmarks side by side per scenario, each
figure's change in % against the first, the best marked) and :func:`progress_text` (one line
while ``bench run --wait`` waits). Every value from the cluster passes through
``common.printable`` before it is printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sparkrun_operator.cli import common
from sparkrun_operator.cli.cacheview import columns

#: (key, label, path in a scenario result, unit, which way is better)
METRICS: Final = (
    ("ttft_p50_ms", "TTFT p50", ("ttft", "p50"), "ms", "lower"),
    ("ttft_p90_ms", "TTFT p90", ("ttft", "p90"), "ms", "lower"),
    ("ttft_p99_ms", "TTFT p99", ("ttft", "p99"), "ms", "lower"),
    ("itl_p50_ms", "ITL p50", ("itl", "p50"), "ms", "lower"),
    ("itl_p99_ms", "ITL p99", ("itl", "p99"), "ms", "lower"),
    ("e2e_p50_ms", "E2E p50", ("e2e", "p50"), "ms", "lower"),
    ("e2e_p99_ms", "E2E p99", ("e2e", "p99"), "ms", "lower"),
    ("output_tokens_per_second", "output tok/s", ("outputTokensPerSecond",), "", "higher"),
    ("requests_per_second", "requests/s", ("requestsPerSecond",), "", "higher"),
    ("errors", "errors", ("errors",), "", "lower"),
    ("score", "score", ("score",), "", "higher"),
)
#: Changes smaller than this (in %) are "same": two runs of one server differ by noise.
SAME_PERCENT: Final = 0.5


def _p(value: Any) -> str:
    return str(common.printable("" if value is None else value))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def figure(result: Mapping[str, Any], path: Sequence[str]) -> float | None:
    """A figure of a scenario result by its path (``("ttft", "p50")``), or ``None``."""
    value: Any = result
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return _num(value)


def fmt(value: float | None, unit: str = "", *, whole: bool = False) -> str:
    """``52.1``; ``whole``: counts without decimals."""
    if value is None:
        return "-"
    text = f"{value:.0f}" if abs(value) >= 1000 or (whole and value == int(value)) else f"{value:.1f}"
    return f"{text} {unit}".rstrip()


def _target(spec: Mapping[str, Any]) -> str:
    target = spec.get("target") or {}
    ref = (target.get("workloadRef") or {}).get("name")
    if ref:
        return f"InferenceWorkload {_p(ref)} (via {_p(target.get('via', 'Service'))})"
    return f"{_p(target.get('url'))} (model {_p(target.get('model'))})"


def _failure(status: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return {"reason": c.get("reason"), "message": c.get("message")}
    return None


def show_data(bench: Mapping[str, Any]) -> dict[str, Any]:
    """One benchmark as scripts read it (``-o json``) and :func:`show_text` prints it."""
    meta, spec, status = bench.get("metadata") or {}, bench.get("spec") or {}, bench.get("status") or {}
    scenarios = [s.get("name") for s in spec.get("scenarios") or []]
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "phase": status.get("phase") or "Pending",
        "target": spec.get("target") or {},
        "framework": spec.get("framework", "llama-benchy"),
        "profile": spec.get("profile"),
        "scenarios": scenarios,
        "current_scenario": status.get("currentScenario"),
        "attempt": status.get("attempt", 0),
        "started_at": status.get("startedAt"),
        "finished_at": status.get("finishedAt"),
        "provenance": status.get("provenance") or {},
        "results": list(status.get("results") or []),
        "comparison": status.get("comparison"),
        "failure": _failure(status),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions") or []
        ],
    }


def _results_table(results: Sequence[Mapping[str, Any]]) -> list[str]:
    table = [
        [
            "SCENARIO",
            "REQ",
            "ERR",
            "TTFT p50/p90/p99 ms",
            "ITL p50/p90/p99 ms",
            "E2E p50/p99 ms",
            "TOK/S",
            "REQ/S",
        ]
    ]
    for r in results:

        def trio(name: str, keys: Sequence[str] = ("p50", "p90", "p99"), r: Mapping[str, Any] = r) -> str:
            values = [figure(r, (name, k)) for k in keys]
            return "-" if all(v is None for v in values) else "/".join(fmt(v) for v in values)

        table.append(
            [
                _p(r.get("name")),
                _p(r.get("requests", "-")),
                _p(r.get("errors", "-")),
                trio("ttft"),
                trio("itl"),
                trio("e2e", ("p50", "p99")),
                fmt(figure(r, ("outputTokensPerSecond",))),
                fmt(figure(r, ("requestsPerSecond",))),
            ]
        )
        if figure(r, ("score",)) is not None:
            table[-1][-1] += f"  score {fmt(figure(r, ('score',)))}"
    return columns(table).splitlines()


def show_text(data: Mapping[str, Any]) -> str:
    """``bench show``: the header, the results table, the comparison, the failure."""
    lines = [f"InferenceBenchmark {_p(data['namespace'])}/{_p(data['name'])}: {_p(data['phase'])}"]
    spec_target = {"target": data.get("target") or {}}
    lines.append(f"  Target:     {_target(spec_target)}")
    framework = _p(data["framework"]) + (f", profile {_p(data['profile'])}" if data.get("profile") else "")
    lines.append(f"  Framework:  {framework}")
    prov = data.get("provenance") or {}
    if prov:
        model = _p(prov.get("model")) + (
            f"@{_p(prov.get('modelRevision'))[:12]}" if prov.get("modelRevision") else ""
        )
        lines.append(f"  Model:      {model}, workload revision {_p(prov.get('workloadRevision') or '-')}")
        engine = _p(prov.get("engineImage") or "-")
        gpus = (
            f"{prov.get('gpuCount')} x {_p(prov.get('gpuProduct') or 'GPU')}"
            if prov.get("gpuCount")
            else "no GPU"
        )
        lines.append(f"  Engine:     {engine} on {gpus}")
        if prov.get("url"):
            lines.append(f"  Measured:   {_p(prov['url'])}")
    when = f"{_p(data.get('started_at') or '-')} -> {_p(data.get('finished_at') or '-')}"
    lines.append(f"  Ran:        {when}" + (f" (attempt {data['attempt']})" if data.get("attempt") else ""))
    if data["phase"] == "Running" and data.get("current_scenario"):
        lines.append(f"  Running:    scenario {_p(data['current_scenario'])}")
    if data.get("failure"):
        failure = data["failure"]
        lines.append(f"  Failed:     {_p(failure.get('reason'))}: {_p(failure.get('message'))[:400]}")
    if data["results"]:
        lines.append("Results:")
        lines.extend("  " + line for line in _results_table(data["results"]))
    else:
        lines.append("Results: none yet")
    comparison = data.get("comparison")
    if comparison:
        lines.append(f"Against {_p(comparison.get('baseline'))} (this / baseline):")
        for s in comparison.get("scenarios") or []:
            ratios = ", ".join(f"{_p(k)} {v:.2f}x" for k, v in sorted((s.get("ratios") or {}).items()))
            lines.append(f"  {_p(s.get('name'))}: {ratios or '-'}")
    return "\n".join(lines) + "\n"


def progress_text(data: Mapping[str, Any]) -> str:
    """One line while waiting: the phase and what it is doing."""
    done, total = len(data["results"]), len(data["scenarios"])
    phase = _p(data["phase"])
    if data["phase"] == "Running":
        return f"{phase}: scenario {_p(data.get('current_scenario') or '?')} ({done}/{total} done)"
    if data["phase"] == "Pending":
        waiting = next(
            (c for c in data["conditions"] if c.get("type") == "TargetReady" and c.get("status") == "False"),
            None,
        )
        if waiting:
            return f"{phase}: target not ready: {_p(waiting.get('message') or waiting.get('reason'))[:200]}"
        return f"{phase}: starting"
    return f"{phase} ({done}/{total} scenarios)"


def _delta(base: float | None, value: float | None, better: str) -> tuple[float | None, str]:
    """Change of ``value`` over ``base`` in %, and ``better``/``worse``/``same``."""
    if base is None or value is None:
        return None, ""
    if base == 0:
        return None, "same" if value == 0 else ("worse" if better == "lower" else "better")
    pct = (value - base) / abs(base) * 100
    if abs(pct) < SAME_PERCENT:
        return pct, "same"
    return pct, "better" if (pct < 0) == (better == "lower") else "worse"


def compare_data(benches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per scenario (those of the first benchmark, then any others), per figure: each benchmark's
    value, its change against the first in %, and which benchmark is best."""
    names = [str((b.get("metadata") or {}).get("name")) for b in benches]
    results = [{str(r.get("name")): r for r in (b.get("status") or {}).get("results") or []} for b in benches]
    order = list(dict.fromkeys(s for rs in results for s in rs))
    scenarios = []
    for scenario in order:
        rows = []
        for key, label, path, unit, better in METRICS:
            values = [figure(rs[scenario], path) if scenario in rs else None for rs in results]
            if all(v is None for v in values):
                continue
            deltas = [_delta(values[0], v, better) for v in values]
            present = [(v, i) for i, v in enumerate(values) if v is not None]
            pick = min if better == "lower" else max
            best_value = pick(v for v, _ in present)
            # NB: a value within SAME_PERCENT of the best is as good (noise); all as good: no best
            best = [names[i] for v, i in present if _delta(best_value, v, better)[1] in ("same", "")]
            rows.append(
                {
                    "metric": key,
                    "label": label,
                    "unit": unit,
                    "better": better,
                    "values": values,
                    "delta_percent": [None if d[0] is None else round(d[0], 1) + 0.0 for d in deltas],
                    "verdict": [d[1] for d in deltas],
                    "best": best if len(best) < len(present) else [],
                }
            )
        scenarios.append({"name": scenario, "metrics": rows})
    notes = []
    for field in ("model", "framework", "gpuProduct", "engineImage"):
        seen = {str(((b.get("status") or {}).get("provenance") or {}).get(field)) for b in benches}
        if len(seen) > 1:
            notes.append(f"the benchmarks differ in {field}: {', '.join(sorted(seen))}")
    phases = [str((b.get("status") or {}).get("phase") or "Pending") for b in benches]
    notes += [f"{n} is {p}, not Succeeded" for n, p in zip(names, phases, strict=True) if p != "Succeeded"]
    return {"baseline": names[0], "benchmarks": names, "scenarios": scenarios, "notes": notes}


def compare_text(data: Mapping[str, Any]) -> str:
    """``bench compare``: a table per scenario; changes against the first benchmark, the best
    marked ``*``."""
    names = [_p(n) for n in data["benchmarks"]]
    lines = [f"Compared with {names[0]} (the first named); * marks the best of each figure."]
    for scenario in data["scenarios"]:
        lines.append(f"Scenario {_p(scenario['name'])}:")
        table = [["FIGURE", *names]]
        for row in scenario["metrics"]:
            cells = [f"{row['label']}" + (f" ({row['unit']})" if row["unit"] else "")]
            for i, value in enumerate(row["values"]):
                cell = fmt(value, whole=row["metric"] == "errors")
                pct, verdict = row["delta_percent"][i], row["verdict"][i]
                if i > 0 and pct is not None:
                    cell += f" ({pct:+.1f}% {verdict})"
                elif i > 0 and verdict:
                    cell += f" ({verdict})"
                if data["benchmarks"][i] in row["best"]:
                    cell += " *"
                cells.append(cell)
            table.append(cells)
        lines.extend("  " + line for line in columns(table).splitlines())
    if not data["scenarios"]:
        lines.append("no results to compare yet")
    lines.extend(f"note: {_p(n)}" for n in data["notes"])
    return "\n".join(lines) + "\n"
