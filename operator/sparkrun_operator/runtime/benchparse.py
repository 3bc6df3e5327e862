"""Each framework's own output -> the ONE result schema of a scenario (``api.benchmark.ScenarioResult``
in its wire spelling).

- llama-benchy: per request, its progress stream (``--emit-progress``: ``request_start``,
  ``request_first_token`` with ``ttft_s``, ``request_end`` with ``total_tokens``,
  ``decode_seconds`` and ``error``) gives TTFT, ITL (decode time over the tokens after the first,
  i.e. TPOT), end-to-end latency and errors; its ``--save-result`` JSON gives the suite's own
  throughput figures (``tg_throughput``), kept as ``frameworkFigures``.
- tool-eval-bench: its ``--json-file`` envelope (schema 1): ``scores.scenario_results[]`` rows
  (status, ``duration_seconds``, ``ttft_ms``, tokens, ``failure_kind``) and ``scores`` totals.

Pure: text in, dicts out.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

RAW_LIMIT: Final = 16 * 1024
_INFRA: Final = frozenset({"timeout", "connection_error", "server_error"})


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """p50/p90/p99 (linear interpolation between closest ranks), in the unit given; None if empty."""
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = (len(ordered) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo), 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def error_kind(message: str) -> str:
    """A short class of a failed request: http_<status>, timeout, connection, or other."""
    status = re.match(r"HTTP (\d{3})", message)
    if status:
        return f"http_{status.group(1)}"
    low = message.lower()
    if "timeout" in low or "timed out" in low:
        return "timeout"
    if "connect" in low or "refused" in low or "reset" in low or "disconnect" in low:
        return "connection"
    return "other"


def bounded(text: str, limit: int = RAW_LIMIT) -> str:
    """The tail of ``text`` within ``limit`` bytes of UTF-8 (what is kept as the raw artifact)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return "[...truncated...]\n" + data[-(limit - 20) :].decode(errors="ignore")


def _events(progress: str) -> Iterable[dict[str, Any]]:
    for line in progress.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def llama_benchy(progress: str, result_json: str) -> dict[str, Any]:
    """Figures of one llama-benchy run from its progress stream and its saved result."""
    starts: dict[int, float] = {}
    ttft: list[float] = []
    itl: list[float] = []
    e2e: list[float] = []
    errors: Counter[str] = Counter()
    tokens = 0
    first = last = None
    for event in _events(progress):
        kind, rid, ts = event.get("type"), event.get("request_id"), float(event.get("ts") or 0)
        if kind == "request_start" and isinstance(rid, int):
            starts[rid] = ts
            first = ts if first is None else min(first, ts)
        elif kind == "request_first_token" and event.get("ttft_s") is not None:
            ttft.append(float(event["ttft_s"]) * 1000)
        elif kind == "request_end" and isinstance(rid, int):
            last = ts if last is None else max(last, ts)
            if event.get("error"):
                errors[error_kind(str(event["error"]))] += 1
                continue
            if rid in starts:
                e2e.append((ts - starts[rid]) * 1000)
            count = int(event.get("total_tokens") or 0)
            tokens += count
            decode = float(event.get("decode_seconds") or 0)
            if count > 1 and decode > 0:
                itl.append(decode / (count - 1) * 1000)
    span = (last - first) if first is not None and last is not None else 0.0
    completed = len(e2e)
    result: dict[str, Any] = _figures(completed, errors, ttft, itl, e2e, tokens, span)
    result["frameworkFigures"] = _llama_suite_figures(result_json)
    return result


def _figures(
    completed: int,
    errors: Mapping[str, int],
    ttft: Sequence[float],
    itl: Sequence[float],
    e2e: Sequence[float],
    tokens: int,
    span: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requests": completed,
        "errors": sum(errors.values()),
        "errorsByKind": dict(sorted(errors.items())),
        "samples": {"ttft": len(ttft), "itl": len(itl), "e2e": len(e2e)},
        "outputTokens": tokens,
        "durationSeconds": round(span, 3),
    }
    for key, values in (("ttft", ttft), ("itl", itl), ("e2e", e2e)):
        summary = percentiles(values)
        if summary is not None:
            out[key] = summary
    if span > 0 and completed:
        out["outputTokensPerSecond"] = round(tokens / span, 3)
        out["requestsPerSecond"] = round(completed / span, 3)
    return out


def _llama_suite_figures(result_json: str) -> dict[str, float]:
    """llama-benchy's own means over the non-prefill rows (tokens/s, ms)."""
    try:
        data = json.loads(result_json) if result_json.strip() else {}
    except ValueError:
        return {}
    rows = [
        r
        for r in data.get("benchmarks") or []
        if isinstance(r, dict) and not r.get("is_context_prefill_phase")
    ]
    out: dict[str, float] = {}
    for name, key in (
        ("tgThroughput", "tg_throughput"),
        ("ppThroughput", "pp_throughput"),
        ("ttfrMs", "ttfr"),
    ):
        means = [float(r[key]["mean"]) for r in rows if isinstance(r.get(key), dict)]
        if means:
            out[name] = round(sum(means) / len(means), 3)
    return out


def tool_eval_bench(result_json: str) -> dict[str, Any]:
    """Figures of one tool-eval-bench run from its JSON envelope (schema 1)."""
    data = json.loads(result_json) if result_json.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("tool-eval-bench result is not a JSON object")
    schema = data.get("schema_version")
    if schema is not None and str(schema) != "1":
        raise ValueError(f"unsupported tool-eval-bench result schema {schema!r}")
    raw_scores = data.get("scores")
    scores: dict[str, Any] = raw_scores if isinstance(raw_scores, dict) else {}
    rows = [r for r in scores.get("scenario_results") or [] if isinstance(r, dict)]
    errors: Counter[str] = Counter()
    ttft: list[float] = []
    e2e: list[float] = []
    tokens = 0
    span = 0.0
    completed = 0
    passed = 0
    for row in rows:
        failure = row.get("failure_kind")
        if failure in _INFRA:
            errors[str(failure)] += 1
            continue
        completed += 1
        passed += row.get("status") == "pass"
        if isinstance(row.get("ttft_ms"), int | float):
            ttft.append(float(row["ttft_ms"]))
        if isinstance(row.get("duration_seconds"), int | float):
            e2e.append(float(row["duration_seconds"]) * 1000)
            span += float(row["duration_seconds"])
        tokens += int(row.get("completion_tokens") or 0)
    out = _figures(completed, errors, ttft, [], e2e, tokens, span)
    figures: dict[str, float] = {"passed": float(passed), "scenarios": float(len(rows))}
    for key in ("final_score", "total_points", "max_points"):
        if isinstance(scores.get(key), int | float):
            figures[_camel(key)] = float(scores[key])
    out["frameworkFigures"] = figures
    if "finalScore" in figures:
        out["score"] = figures["finalScore"]
    return out


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)
