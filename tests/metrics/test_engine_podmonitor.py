"""The chart's engine PodMonitor (metrics.engines.podMonitor), rendered by the real helm: it selects
the leader pod of each replica group as the operator renders it (the JobSet goldens), on its engine
port, in the namespaces the release serves, and relabels to namespace, workload, replica and pod.
With it on, the engine NetworkPolicies let networkPolicy.metricsFrom in on the engine port (verdicts
from kube-network-policies' code, hack/netpol-eval), and nobody else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_operator.render import keys
from tests.deploy.chart import NAMESPACE, Rendered, render, require_helm
from tests.tenancy.test_network_policy import MONITORING, SOURCES, matrix, netpol_eval

__all__ = ["netpol_eval"]  # the fixture

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "render" / "golden" / "four-nodes-tp8-pp4.yaml"
PROMETHEUS = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return require_helm()


def _on(**extra: Any) -> dict[str, Any]:
    return {"metrics": {"engines": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}}}}, **extra}


def _pod_monitor(chart: Rendered) -> dict[str, Any]:
    (monitor,) = chart.of("PodMonitor")
    return monitor


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "Exists", expr
        if expr["key"] not in labels:
            return False
    return True


def _rendered_pods() -> list[dict[str, Any]]:
    """Each replicated job's pod template of a rendered multi-node JobSet (leader and workers)."""
    docs = [d for d in yaml.safe_load_all(GOLDEN.read_text()) if d and d["kind"] == "JobSet"]
    assert docs, GOLDEN
    return [rj["template"]["spec"]["template"] for d in docs for rj in d["spec"]["replicatedJobs"]]


def _meta(label: str) -> str:
    """Prometheus' service-discovery name of a pod label."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def test_off_by_default(helm_bin: str, tmp_path: Path) -> None:
    assert render(helm_bin, tmp_path).of("PodMonitor") == []


def test_it_scrapes_each_groups_leader_on_the_engine_port(helm_bin: str, tmp_path: Path) -> None:
    monitor = _pod_monitor(render(helm_bin, tmp_path, _on(watchNamespaces=["team-a", "team-b"])))
    spec = monitor["spec"]
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    assert spec["sampleLimit"] == 5000
    pods = _rendered_pods()
    chosen = [p for p in pods if _selects(spec["selector"], p["metadata"]["labels"])]
    assert [p["metadata"]["labels"][keys.LABEL_ROLE] for p in chosen] == [keys.ROLE_LEADER]
    assert len(pods) > len(chosen), "the workers are left out"
    (endpoint,) = spec["podMetricsEndpoints"]
    ports = {
        p["name"]: p["containerPort"] for c in chosen[0]["spec"]["containers"] for p in c.get("ports", [])
    }
    assert ports[endpoint["port"]] == ENGINE_PORT
    assert (endpoint["path"], endpoint["scheme"], endpoint["honorLabels"]) == ("/metrics", "http", False)
    relabel = endpoint["relabelings"]
    copied = {r["targetLabel"]: r["sourceLabels"] for r in relabel if "targetLabel" in r}
    assert copied == {"workload": [_meta(keys.LABEL_WORKLOAD)], "replica": [_meta(keys.LABEL_REPLICA)]}
    assert {"action": "labeldrop", "regex": "container|endpoint"} in relabel
    leader = chosen[0]["metadata"]["labels"]
    assert {keys.LABEL_WORKLOAD, keys.LABEL_REPLICA} <= set(leader)
    # only vLLM's own series are kept: a tenant's engine image that emits sparkrun_operator_* or
    # sparkrun_workload_* (its namespace is forced, the names are not) would otherwise mask
    # SparkrunOperatorAbsent (absent() has no selector) or raise the operator's alerts
    assert endpoint["metricRelabelings"] == [
        {"sourceLabels": ["__name__"], "regex": "vllm:.+", "action": "keep"}
    ]


def test_without_watch_namespaces_it_scrapes_every_namespace(helm_bin: str, tmp_path: Path) -> None:
    spec = _pod_monitor(render(helm_bin, tmp_path, _on()))["spec"]
    assert spec["namespaceSelector"] == {"any": True}


def test_the_engine_dashboard_ships_beside_the_other(helm_bin: str, tmp_path: Path) -> None:
    chart = render(helm_bin, tmp_path, {"metrics": {"dashboard": {"enabled": True}}})
    data = chart.get("ConfigMap", "sparkrun-dashboard")["data"]
    assert set(data) == {"sparkrun.json", "engines.json"}
    board = (
        Path(__file__).resolve().parents[2] / "helm/sparkrun-operator/dashboards/engines.json"
    ).read_text()
    assert data["engines.json"] == board.rstrip("\n")


def test_with_the_pod_monitor_metrics_from_reaches_the_engine_port(
    netpol_eval: Path, helm_bin: str, tmp_path: Path
) -> None:
    with_it = render(helm_bin, tmp_path, _on(networkPolicy={"metricsFrom": PROMETHEUS}))
    assert matrix(netpol_eval, with_it) == {**SOURCES, "prometheus": True}
    # metricsFrom without the PodMonitor: the engines stay closed to it
    without = render(helm_bin, tmp_path, {"networkPolicy": {"metricsFrom": PROMETHEUS}})
    assert matrix(netpol_eval, without) == SOURCES
    # the PodMonitor with metricsFrom empty ("anyone" on the operator's metrics port) adds nobody
    empty = render(helm_bin, tmp_path, _on())
    assert matrix(netpol_eval, empty) == SOURCES


def test_values_reused_from_a_release_before_it_still_render(helm_bin: str, tmp_path: Path) -> None:
    """`helm upgrade --reuse-values` (docs/install.md) renders the new chart with the previous
    release's values, which have no `metrics.engines` nor `metrics.prometheusRule`: the upgrade
    renders (no PodMonitor), and turning the PodMonitor on with `--set ...enabled=true` alone
    keeps the bound on what a tenant's engine may make Prometheus store."""
    reused = ("--set", "metrics.engines=null", "--set", "metrics.prometheusRule=null")
    assert render(helm_bin, tmp_path, None, *reused).of("PodMonitor") == []
    only = ("enabled=true", "interval=null", "sampleLimit=null", "labels=null")
    on = render(
        helm_bin, tmp_path, None, *(a for v in only for a in ("--set", f"metrics.engines.podMonitor.{v}"))
    )
    spec = _pod_monitor(on)["spec"]
    assert spec["sampleLimit"] == 5000
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["interval"] == "30s"
    assert endpoint["metricRelabelings"] == [
        {"sourceLabels": ["__name__"], "regex": "vllm:.+", "action": "keep"}
    ]
