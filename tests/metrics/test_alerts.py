"""The alerts (helm/sparkrun-operator/prometheus/alerts.yaml) with Prometheus' own promtool:
``promtool check rules`` and ``promtool test rules`` over tests/metrics/alerts_test.yaml, a
firing and a not-firing case for each rule against synthetic series. Also: every metric a rule
reads is one the operator, the gateway or the pinned vLLM exports; every rule carries a
severity, a summary, a description and a runbook that docs/operations.md has; the chart ships
the file as it is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.gateway.metrics import GatewayMetrics
from tests.conftest import Require
from tests.deploy.chart import render, require_helm

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "helm" / "sparkrun-operator" / "prometheus" / "alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
VLLM = REPO / "helm" / "sparkrun-operator" / "dashboards" / "vllm-metrics.yaml"
OPERATIONS = REPO / "docs" / "operations.md"
#: A metric name in a PromQL expression: ours all start so (no regex over tenant text here).
NAME = re.compile(r"\b(?:sparkrun_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


@pytest.fixture
def promtool(require: Require) -> str:
    printed = subprocess.run(
        [str(REPO / "hack" / "promtool.sh"), "--print"], capture_output=True, text=True, check=True
    ).stdout.strip()
    require(
        Path(printed).is_file(), "no promtool: run `make promtool` (Debian's prometheus package, unpacked)"
    )
    return printed


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules(promtool: str) -> None:
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    done = subprocess.run(
        [promtool, "test", "rules", UNIT_TESTS.name],
        cwd=UNIT_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_fires_and_stays_quiet_in_a_test() -> None:
    """Each alert has a case where it fires and one where it must not."""
    cases = [
        case for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]
    ]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']}: no firing case"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']}: no quiet case"


def _series_names(registry: CollectorRegistry) -> set[str]:
    """The names of the series each family of ``registry`` exports, by its type."""
    suffixes = {"counter": ("_total",), "histogram": ("_count", "_sum", "_bucket"), "gauge": ("",)}
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


def test_every_metric_a_rule_reads_is_exported() -> None:
    exported = _series_names(Metrics().registry) | _series_names(GatewayMetrics().registry)
    vllm = yaml.safe_load(VLLM.read_text())
    assert vllm["version"] == "0.33.0"
    exported |= {series for metric in vllm["metrics"] for series in metric["series"]}
    used = {name for rule in rules() for name in NAME.findall(rule["expr"])}
    assert used, "no metric names found in the rules"
    assert used <= exported, f"rules read series nobody exports: {sorted(used - exported)}"
    # the per-workload series the workload alerts read
    assert {"sparkrun_workload_ready", "sparkrun_workload_replicas_desired"} <= used


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of ``markdown`` (lower case, spaces to dashes)."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add("".join(ch for ch in title.replace(" ", "-") if ch.isalnum() or ch in "-_"))
    return found


def test_every_rule_is_documented() -> None:
    anchors = _anchors(OPERATIONS.read_text())
    for rule in rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        notes = rule["annotations"]
        assert notes["summary"], name
        assert notes["description"], name
        assert notes["runbook_url"] == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/operations.md has no runbook section {name}"


def test_the_chart_ships_the_file_as_it_is(tmp_path: Path) -> None:
    helm_bin = require_helm()
    rendered = render(
        helm_bin, tmp_path, {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kp"}}}}
    )
    rule = rendered.get("PrometheusRule", "sparkrun-alerts")
    assert rule["metadata"]["labels"]["release"] == "kp"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    base = "https://git.example.com/ops/blob/main/docs/operations.md"
    moved = render(
        helm_bin, tmp_path, {"metrics": {"prometheusRule": {"enabled": True, "runbookBaseURL": base}}}
    )
    spec = moved.get("PrometheusRule", "sparkrun-alerts")["spec"]
    urls = [r["annotations"]["runbook_url"] for g in spec["groups"] for r in g["rules"]]
    assert urls == [f"{base}#{r['alert'].lower()}" for r in rules()]
    assert render(helm_bin, tmp_path).of("PrometheusRule") == []  # opt-in
