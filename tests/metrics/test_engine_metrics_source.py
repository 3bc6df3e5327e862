"""vLLM's metric list (dashboards/vllm-metrics.yaml) against the engine pin, the dashboard and the
testbed's engine stand-in: the dashboard names only metrics the pinned vLLM exports, with the label
names it groups by, and the stand-in exports them with the same buckets."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE
from sparkrun_testbed.engine import _metrics
from tests.metrics import engine_board


def test_the_metric_list_names_the_pinned_engine_version() -> None:
    doc = engine_board.vllm_metrics()
    tag = DEFAULT_ENGINE_IMAGE.rpartition(":")[2]
    assert doc["package"] == "vllm"
    assert f"v{doc['version']}" == tag, "rerun hack/vllm-metrics.py with the pinned release's wheel"
    assert doc["wheel"].startswith(f"vllm-{doc['version']}-")
    assert doc["wheel"].endswith(".whl")
    assert re.fullmatch(r"[0-9a-f]{64}", doc["sha256"])
    assert "vllm/v1/metrics/loggers.py" in doc["files"]


def test_the_list_has_what_a_stat_logger_reader_must_find() -> None:
    by_name = {m["name"]: m for m in engine_board.vllm_metrics()["metrics"]}
    assert by_name["vllm:num_requests_waiting"]["type"] == "gauge"
    assert by_name["vllm:request_success"]["labels"] == ["model_name", "engine", "finished_reason"]
    assert by_name["vllm:prompt_tokens"]["series"] == ["vllm:prompt_tokens_total"]
    ttft = by_name["vllm:time_to_first_token_seconds"]
    assert ttft["series"][0] == "vllm:time_to_first_token_seconds_bucket"
    assert ttft["buckets"][0] == 0.001
    assert ttft["buckets"][-1] == 2560.0
    for entry in by_name.values():
        assert entry["help"], entry
        assert entry["type"] in {"gauge", "counter", "histogram"}, entry


def test_every_series_the_dashboard_queries_is_exported_by_the_pinned_vllm() -> None:
    known = engine_board.series_of_vllm()
    used = engine_board.used_series()
    assert used, "the dashboard queries vLLM's metrics"
    assert used <= set(known), sorted(used - set(known))
    for series in used:
        assert "when" not in known[series], f"{series} exists only {known[series]['when']}"
        assert {"model_name", "engine"} <= set(known[series]["labels"]), series
    for expr in engine_board.exprs():
        for label in re.findall(r"by \(([^)]*)\)", expr):
            grouped = {g.strip() for g in label.split(",")}
            assert grouped <= {"namespace", "workload", "replica", "le", "finished_reason"}, expr


def test_the_dashboard_has_the_panels_it_promises() -> None:
    by_title = {p["title"]: p for p in engine_board.panels()}
    ttft = " ".join(t["expr"] for t in by_title["Time to first token"]["targets"])
    for q in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({q}, " in ttft
    itl = by_title["Inter-token latency"]["targets"][0]["expr"]
    assert "vllm:inter_token_latency_seconds_bucket" in itl
    variables = [v["name"] for v in engine_board.board()["templating"]["list"]]
    assert variables == ["datasource", "namespace", "workload"]
    for expr in engine_board.exprs():
        assert 'namespace=~"$namespace", workload=~"$workload"' in expr, expr
    ids = [p["id"] for p in engine_board.board()["panels"]]
    assert len(ids) == len(set(ids))


def test_the_stand_in_exports_the_dashboards_series_with_vllms_buckets() -> None:
    known = engine_board.series_of_vllm()
    stats = _metrics.Stats()
    for name, histogram in (
        ("vllm:time_to_first_token_seconds", stats.ttft),
        ("vllm:inter_token_latency_seconds", stats.itl),
        ("vllm:e2e_request_latency_seconds", stats.e2e),
        ("vllm:request_queue_time_seconds", stats.queue),
    ):
        assert list(histogram.buckets) == known[f"{name}_bucket"]["buckets"], name
    histogram = _metrics.Histogram(_metrics.ITL_BUCKETS)
    for value in (0.02, 0.02, 0.3):
        histogram.observe(value)
    lines = histogram.render("vllm:inter_token_latency_seconds", 'engine="0"')
    text = "\n".join(["# TYPE vllm:inter_token_latency_seconds histogram", *lines]) + "\n"
    (family,) = text_string_to_metric_families(text)
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert (buckets["0.01"], buckets["0.025"], buckets["0.3"], buckets["+Inf"]) == (0, 2, 3, 3)
