"""The benchmark runner (``python -m sparkrun_operator.runtime.bench``) driving the real frameworks
from PyPI (llama-benchy 0.4, tool-eval-bench 3.0) against the engine stand-in on loopback, with
the tokenizer and the prompt corpus served by the local Hub (generated with ``tokenizers``).

Tolerance of the measured figures against the stand-in's configured delays: TTFT p50 within
[delay, 3 x delay + 50 ms] and ITL p50 within [delay, 2 x delay + 10 ms]: sleeps only overshoot,
so the lower bound is exact; the upper one is wide because the runner, the framework and the
stand-in share two CPUs with other jobs (TTFT p50 was seen at 1.2x and at 2.1x the delay).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import CORPUS_FILE, TOKENIZER
from tests.engine.conftest import StartEngine

MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    with Hub(default_repos(lfs_mib=0.01)) as running:
        yield running


def _run(plan: dict[str, Any], tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.runtime.bench", "--plan", json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr
    return proc.returncode, lines


def _plan(url: str, hub: Hub, framework: str = "llama-benchy", **over: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "framework": framework,
        "benchArgs": {
            "book_url": f"{hub.url}/{TOKENIZER}/resolve/main/{CORPUS_FILE}",
            "skip_coherence": True,
        },
        "scenario": {"name": "c2", "concurrency": 2, "requests": 6, "inputTokens": 64, "outputTokens": 16},
        "baseUrl": f"{url}/v1",
        "model": "tiny",
        "modelId": MODEL,
        "tokenizer": TOKENIZER,
        "hfEndpoint": hub.url,
    }
    plan.update(over)
    return plan


def test_llama_benchy_figures_match_the_engine_delays(
    start_engine: StartEngine, hub: Hub, tmp_path: Path
) -> None:
    ttft_s, token_s = 0.05, 0.01
    engine = start_engine(
        MODEL,
        "--served-model-name",
        "tiny",
        env={"SPARKRUN_ENGINE_TTFT_SECONDS": str(ttft_s), "SPARKRUN_ENGINE_TOKEN_SECONDS": str(token_s)},
    )
    code, lines = _run(_plan(engine.url, hub), tmp_path)
    assert code == 0, lines
    started, last = lines[0], lines[-1]
    assert started["args"]["runs"] == 3  # 6 requests at concurrency 2
    assert started["args"]["pp"] == [64]
    assert last["event"] == "result"
    assert last["framework"] == "llama-benchy"
    assert last["frameworkVersion"] == "0.4.0"
    result = last["result"]
    assert result["requests"] == 6
    assert result["errors"] == 0
    assert result["samples"] == {"ttft": 6, "itl": 6, "e2e": 6}
    assert result["outputTokens"] == 6 * 16
    assert ttft_s * 1000 <= result["ttft"]["p50"] <= ttft_s * 3000 + 50
    assert token_s * 1000 <= result["itl"]["p50"] <= token_s * 2000 + 10
    # e2e >= ttft + 15 inter-token delays
    assert result["e2e"]["p50"] >= (ttft_s + 15 * token_s) * 1000
    assert result["ttft"]["p50"] <= result["ttft"]["p90"] <= result["ttft"]["p99"]
    assert result["outputTokensPerSecond"] > 0
    assert result["requestsPerSecond"] > 0
    assert result["frameworkFigures"]["tgThroughput"] > 0
    assert "Running test: pp=64, tg=16" in last["raw"]
    assert len(last["raw"].encode()) <= 16 * 1024


def test_tool_eval_bench_scores_tool_calls(start_engine: StartEngine, hub: Hub, tmp_path: Path) -> None:
    engine = start_engine(MODEL, "--served-model-name", "tiny", "--max-model-len", "32768")
    plan = _plan(engine.url, hub, "tool-eval-bench", benchArgs={"scenarios": ["TC-01", "TC-02"]})
    plan["scenario"] = {"name": "tools", "concurrency": 1}
    code, lines = _run(plan, tmp_path)
    assert code == 0, lines
    assert lines[0]["args"]["scenarios"] == ["TC-01", "TC-02"]
    last = lines[-1]
    assert last["event"] == "result"
    assert last["frameworkVersion"] == "3.0.0"
    result = last["result"]
    assert result["requests"] == 2
    assert result["frameworkFigures"]["scenarios"] == 2
    assert 0 <= result["score"] <= 100
    assert result["e2e"]["p50"] > 0


def test_server_errors_are_counted_by_kind(start_engine: StartEngine, hub: Hub, tmp_path: Path) -> None:
    # tool-eval-bench asks for 16384 tokens: over a 4096-token context the stand-in answers 400
    engine = start_engine(MODEL, "--served-model-name", "tiny", "--max-model-len", "4096")
    plan = _plan(engine.url, hub, "tool-eval-bench", benchArgs={"scenarios": ["TC-01"]})
    code, lines = _run(plan, tmp_path)
    assert code == 2
    last = lines[-1]
    assert last["event"] == "error"
    assert last["reason"] == "NothingMeasured"
    assert last["result"]["errorsByKind"] == {"server_error": 1}


def test_unknown_framework_names_the_known_ones(tmp_path: Path, hub: Hub) -> None:
    code, lines = _run(_plan("http://127.0.0.1:9", hub, "locust"), tmp_path)
    assert code == 3
    assert lines[-1]["reason"] == "InvalidPlan"
    assert "known: llama-benchy, tool-eval-bench" in lines[-1]["message"]


def test_a_missing_tokenizer_fails_before_any_request(tmp_path: Path, hub: Hub) -> None:
    code, lines = _run(_plan("http://127.0.0.1:9", hub, tokenizer="sparkrun-test/no-such-repo"), tmp_path)
    assert code == 2
    assert lines[-1]["reason"] == "TokenizerUnavailable"
    assert "sparkrun-test/no-such-repo" in lines[-1]["message"]
