"""The engine dashboard and vLLM's metric list, read for tests/metrics/test_engine_*."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "helm" / "sparkrun-operator" / "dashboards"
BOARD = DASHBOARDS / "engines.json"
VLLM_METRICS = DASHBOARDS / "vllm-metrics.yaml"
#: A metric name in one of our own queries (the board is ours, not tenant text).
_METRIC = re.compile(r"\bvllm:[a-z0-9_:]+")


def board() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(BOARD.read_text())
    return doc


def vllm_metrics() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(VLLM_METRICS.read_text())
    return doc


def panels() -> list[dict[str, Any]]:
    return [p for p in board()["panels"] if p["type"] != "row"]


def exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def used_series() -> set[str]:
    """Every series name the dashboard's panels and variables query."""
    texts = exprs() + [v["definition"] for v in board()["templating"]["list"] if v["type"] == "query"]
    return {m for text in texts for m in _METRIC.findall(text)}


def series_of_vllm() -> dict[str, dict[str, Any]]:
    """Each series vLLM stores (``_total``, ``_bucket``...) -> its metric entry."""
    return {s: m for m in vllm_metrics()["metrics"] for s in m["series"]}
