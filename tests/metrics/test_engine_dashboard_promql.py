"""Every query of the engine dashboard (dashboards/engines.json), its variables substituted, run by
promtool (`promtool test rules`, Debian's prometheus package: hack/promtool.sh) against synthetic
engine series carrying the PodMonitor's labels (namespace, workload, replica, pod) and vLLM's own
(model_name, engine): each panel computes what its title says, for the chosen namespace and workload
only, over all the workload's replicas."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Require
from tests.metrics import engine_board

PROMTOOL = engine_board.REPO / "hack" / "promtool.sh"
NS, WL = "team-a", "chat"
#: (namespace, workload, replica): the one the board shows, a second replica of it, and two it
#: must leave out (another workload of the namespace; the same workload name elsewhere).
SHOWN = ((NS, WL, "0"), (NS, WL, "1"))
HIDDEN = ((NS, "code", "0"), ("team-b", WL, "0"))
#: Per histogram: the bucket (lower, upper] all observations of replica 0 fall in, then replica 1's
#: (one a second each); the hidden ones observe only above the largest finite bucket.
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": ((0.25, 0.5), (0.5, 0.75)),
    "vllm:inter_token_latency_seconds": ((0.05, 0.075), (0.075, 0.1)),
    "vllm:e2e_request_latency_seconds": ((2.5, 5.0), (5.0, 10.0)),
    "vllm:request_queue_time_seconds": ((0.3, 0.5), (0.5, 0.8)),
}
#: Counters: increase a minute per replica 0, 1 (and the hidden ones: 6000).
COUNTERS = {
    ("vllm:prompt_tokens_total", ()): (600, 1200),
    ("vllm:generation_tokens_total", ()): (60, 120),
    ("vllm:request_success_total", (("finished_reason", "stop"),)): (60, 60),
    ("vllm:request_success_total", (("finished_reason", "length"),)): (30, 0),
    ("vllm:num_preemptions_total", ()): (6, 0),
}
#: Gauges per replica 0, 1 (hidden ones: 99).
GAUGES = {
    "vllm:num_requests_waiting": (3, 4),
    "vllm:num_requests_running": (2, 6),
    "vllm:kv_cache_usage_perc": (0.25, 0.75),
}
WHOLE = f'{{namespace="{NS}", workload="{WL}"}}'
#: What each panel's targets must compute at 10m, in order.
EXPECTED: dict[str, list[list[tuple[str, float]]]] = {
    # replica 0 in (lo, mid], replica 1 in (mid, hi]: p50 = mid, p95/p99 interpolate in (mid, hi]
    "Time to first token": [[(WHOLE, 0.5)], [(WHOLE, 0.725)], [(WHOLE, 0.745)]],
    "Inter-token latency": [[(WHOLE, 0.075)], [(WHOLE, 0.0975)], [(WHOLE, 0.0995)]],
    "End-to-end request latency": [[(WHOLE, 5.0)], [(WHOLE, 9.5)], [(WHOLE, 9.9)]],
    "Time waiting in the queue": [[(WHOLE, 0.5)], [(WHOLE, 0.77)], [(WHOLE, 0.794)]],
    "Queue depth": [[(WHOLE, 7)], [(WHOLE, 8)]],
    "KV-cache usage": [
        [
            (f'{{namespace="{NS}", workload="{WL}", replica="0"}}', 0.25),
            (f'{{namespace="{NS}", workload="{WL}", replica="1"}}', 0.75),
        ]
    ],
    "Tokens per second": [[(WHOLE, 30)], [(WHOLE, 3)]],
    "Finished requests per second by reason": [
        [
            (f'{{namespace="{NS}", workload="{WL}", finished_reason="length"}}', 0.5),
            (f'{{namespace="{NS}", workload="{WL}", finished_reason="stop"}}', 2),
        ]
    ],
    "Preemptions per second": [[(WHOLE, 0.1)]],
}


def _labels(ns: str, wl: str, replica: str, extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = [("namespace", ns), ("workload", wl), ("replica", replica), ("pod", f"{wl}-{replica}-leader-0-0")]
    pairs += [("model_name", wl), ("engine", "0"), ("job", "sparkrun-system/sparkrun-engines"), *extra]
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


def _series() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    known = engine_board.series_of_vllm()
    for name, ranges in HISTOGRAMS.items():
        bounds = [*known[f"{name}_bucket"]["buckets"], "+Inf"]
        for i, (ns, wl, replica) in enumerate(SHOWN + HIDDEN):
            upper = ranges[i][1] if i < len(ranges) else None  # hidden: above every finite bucket
            for bound in bounds:
                inside = bound == "+Inf" or (upper is not None and float(bound) >= upper)
                le = (("le", bound if bound == "+Inf" else str(bound)),)
                out.append(
                    {
                        "series": f"{name}_bucket{_labels(ns, wl, replica, le)}",
                        "values": f"0+{60 if inside else 0}x10",
                    }
                )
    for (name, extra), per in COUNTERS.items():
        for i, key in enumerate(SHOWN + HIDDEN):
            step = per[i] if i < len(per) else 6000
            out.append({"series": f"{name}{_labels(*key, extra)}", "values": f"0+{step}x10"})
    for name, values in GAUGES.items():
        for i, key in enumerate(SHOWN + HIDDEN):
            value = values[i] if i < len(values) else 99
            out.append({"series": f"{name}{_labels(*key)}", "values": f"{value}x10"})
    return out


def _substituted(expr: str) -> str:
    return expr.replace("$namespace", NS).replace("$workload", WL).replace("$__rate_interval", "5m")


def _tests() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = []
    by_title = {p["title"]: p for p in engine_board.panels()}
    assert set(by_title) == set(EXPECTED), "every panel has its expected values here"
    for title, targets in EXPECTED.items():
        exprs = [t["expr"] for t in by_title[title]["targets"]]
        assert len(exprs) == len(targets), title
        for expr, samples in zip(exprs, targets, strict=True):
            exp = [{"labels": labels, "value": value} for labels, value in samples]
            tests.append({"expr": _substituted(expr), "eval_time": "10m", "exp_samples": exp})
    return tests


@pytest.fixture(scope="module")
def promtool() -> str:
    out = subprocess.run([str(PROMTOOL), "--print"], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip().splitlines()[-1]


def test_every_panel_query_computes_what_its_title_says(
    promtool: str, require: Require, tmp_path: Path
) -> None:
    require(Path(promtool).is_file(), "no promtool: run `make promtool` (hack/promtool.sh)")
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": _series(), "promql_expr_test": _tests()}],
    }
    path = tmp_path / "engines-test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_a_wrong_expectation_fails_so_the_check_is_real(
    promtool: str, require: Require, tmp_path: Path
) -> None:
    require(Path(promtool).is_file(), "no promtool: run `make promtool` (hack/promtool.sh)")
    (first, *_) = _tests()
    first["exp_samples"][0]["value"] += 1
    spec = {
        "rule_files": [],
        "tests": [{"interval": "1m", "input_series": _series(), "promql_expr_test": [first]}],
    }
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=1000))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "FAILED" in run.stdout + run.stderr
