"""``sparkrun-k8s bench``: the benchmark ``run`` creates and the text a person reads (no cluster).

Tested: ``bench run --dry-run`` prints the InferenceBenchmark benchmarks.run's own code makes
(depth x concurrency scenarios, bench arguments as JSON, runner placement in kubectl taint
syntax) without a cluster, and refuses an unknown profile with the known ones (exit 2);
``compare`` needs two names (exit 2); ``show`` prints what ran against what, the percentiles and
the operator's comparison; ``compare`` computes changes against the first benchmark, calls lower
latencies and higher throughput better, marks the best and notes different models. Against a
cluster: tests/cli/test_bench.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from sparkrun_operator.cli import benchview

SCRIPT = Path(sys.executable).parent / "sparkrun-k8s"


def _cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "NO_COLOR": "1"}
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def _bench(name: str, ttft: float, tps: float, *, model: str = "org/m", errors: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "target": {"workloadRef": {"name": "served"}, "via": "Endpoint"},
            "framework": "llama-benchy",
            "scenarios": [{"name": "d0-c1"}],
        },
        "status": {
            "phase": "Succeeded",
            "startedAt": "2026-12-07T02:00:00Z",
            "finishedAt": "2026-12-07T02:01:00Z",
            "provenance": {
                "model": model,
                "workloadRevision": "abc123",
                "engineImage": "vllm:1",
                "url": "http://x",
            },
            "results": [
                {
                    "name": "d0-c1",
                    "requests": 4,
                    "errors": errors,
                    "ttft": {"p50": ttft, "p90": ttft * 1.5, "p99": ttft * 2},
                    "itl": {"p50": 10.0, "p90": 11.0, "p99": 12.0},
                    "e2e": {"p50": 300.0, "p90": 310.0, "p99": 320.0},
                    "outputTokensPerSecond": tps,
                    "requestsPerSecond": 2.0,
                }
            ],
            "comparison": {"baseline": "older", "scenarios": [{"name": "d0-c1", "ratios": {"ttftP50": 0.9}}]},
        },
    }


def test_dry_run_prints_the_benchmark_without_a_cluster(tmp_path: Path) -> None:
    done = _cli(
        "bench", "run", "served", "-n", "team-a", "--dry-run", "--concurrency", "1,4", "--arg", "tg=[16]",
        "--arg", "skip_coherence=true", "--via", "Endpoint", "--runner-toleration", "pool=cpu:NoSchedule",
        "--runner-node-selector", "pool=cpu", "--name", "my-bench", tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    obj = yaml.safe_load(done.stdout)
    assert obj["metadata"] == {"name": "my-bench", "namespace": "team-a"}
    spec = obj["spec"]
    assert [s["name"] for s in spec["scenarios"]] == ["d0-c1", "d0-c4"]
    assert spec["benchArgs"] == {"tg": [16], "skip_coherence": True}
    assert spec["target"] == {"workloadRef": {"name": "served"}, "via": "Endpoint"}
    assert spec["runner"] == {
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "pool", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}],
    }


def test_unknown_profile_and_one_name_are_usage_errors(tmp_path: Path) -> None:
    done = _cli("bench", "run", "served", "-n", "x", "--dry-run", "--profile", "nope", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "known: long-context, quick" in done.stderr
    done = _cli("bench", "compare", "only-one", "-n", "x", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "two or more" in done.stderr
    done = _cli(
        "bench", "run", "served", "-n", "x", "--dry-run", "--runner-toleration", "k=v", tmp_path=tmp_path
    )
    assert done.returncode == 2
    assert "KEY[=VALUE]:NoSchedule" in done.stderr


def test_show_text() -> None:
    text = benchview.show_text(benchview.show_data(_bench("b1", 52.14, 181.2)))
    lines = text.splitlines()
    assert lines[0] == "InferenceBenchmark team-a/b1: Succeeded"
    assert "InferenceWorkload served (via Endpoint)" in text
    assert "org/m, workload revision abc123" in text
    assert "d0-c1     4    0    52.1/78.2/104.3" in text
    assert "181.2" in text
    assert "Against older (this / baseline):" in text
    assert "ttftP50 0.90x" in text


def test_show_failed_and_running() -> None:
    bench = _bench("b1", 50, 100)
    bench["status"] = {
        "phase": "Failed",
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "TargetNotReady", "message": "no\x1b[31m"}
        ],
    }
    text = benchview.show_text(benchview.show_data(bench))
    assert "Failed:     TargetNotReady: no?[31m" in text
    assert "Results: none yet" in text
    bench["status"] = {"phase": "Running", "currentScenario": "d0-c1"}
    assert benchview.progress_text(benchview.show_data(bench)) == "Running: scenario d0-c1 (0/1 done)"


def test_compare_marks_changes_and_the_best() -> None:
    data = benchview.compare_data(
        [_bench("before", 50.0, 100.0), _bench("after", 40.0, 90.0, errors=1), _bench("third", 50.1, 100.0)]
    )
    assert data["baseline"] == "before"
    assert data["benchmarks"] == ["before", "after", "third"]
    [scenario] = data["scenarios"]
    rows = {r["metric"]: r for r in scenario["metrics"]}
    ttft = rows["ttft_p50_ms"]
    assert ttft["delta_percent"] == [0.0, -20.0, 0.2]
    assert ttft["verdict"][1:] == ["better", "same"]
    assert ttft["best"] == ["after"]
    tps = rows["output_tokens_per_second"]
    assert tps["verdict"][1] == "worse"
    assert tps["best"] == ["before", "third"]
    assert rows["errors"]["verdict"][1] == "worse"
    assert rows["itl_p50_ms"]["best"] == []  # all equal: none better
    assert "score" not in rows
    text = benchview.compare_text(data)
    assert "Scenario d0-c1:" in text
    assert "40.0 (-20.0% better) *" in text
    assert "90.0 (-10.0% worse)" in text
    assert data["notes"] == []
    other = benchview.compare_data([_bench("a", 1, 1), _bench("b", 1, 1, model="org/other")])
    assert other["notes"] == ["the benchmarks differ in model: org/m, org/other"]


def test_noise_is_no_winner() -> None:
    a, b = _bench("a", 50.0, 100.0), _bench("b", 50.0, 100.0)
    b["status"]["results"][0]["itl"]["p50"] = 9.9999  # -0.0001%: "same", printed +0.0%, no star
    [scenario] = benchview.compare_data([a, b])["scenarios"]
    itl = next(r for r in scenario["metrics"] if r["metric"] == "itl_p50_ms")
    assert itl["delta_percent"] == [0.0, 0.0]
    assert str(itl["delta_percent"][1]) == "0.0"
    assert itl["verdict"][1] == "same"
    assert itl["best"] == []
    text = benchview.compare_text(benchview.compare_data([a, b]))
    assert "10.0 (+0.0% same)\n" in text
