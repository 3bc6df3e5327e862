"""``workloads.plan`` through the daemon API over HTTP (the shim, with the chart's RBAC): its
``placement`` and ``hardware_assessment`` over a pool of 24 GiB GPUs, for the example Recipe
(Qwen3-8B) with a Ready ModelCache of the model in the namespace, checked against the reference
daemon's result schema (``spec/daemon-api/reference-daemon-ops.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sparkrun_operator.ops import catalog
from tests.scaling.test_placement import pool as pool  # the fixture
from tests.scaling.test_placement import ready_cache
from tests.shim.conftest import Daemon
from tests.shim.conftest import daemon as daemon  # the fixture

pytestmark = pytest.mark.testbed

#: the module's ``daemon`` (tests/shim/conftest.py) runs with the chart's RBAC
CHART_RBAC = True
REPO = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    ops = json.loads((REPO / "spec" / "daemon-api" / "reference-daemon-ops.json").read_text())
    found: dict[str, Any] = next(op for op in ops if op["name"] == "workloads.plan")["result_schema"]
    return found


def _plan(daemon: Daemon, arguments: dict[str, Any]) -> dict[str, Any]:
    op = catalog.load().get("workloads.plan")
    with daemon.http("reader") as client:
        answer = client.post(op.http_path or "/v1/ops/workloads.plan", json=arguments)
    if op.kind == "query":
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
    else:
        assert answer.status_code == 202, answer.text
        job = daemon.wait_job(answer.json()["job_id"], "reader", timeout=120)
        assert job["state"] == "succeeded", job
        result = job["result"]
    jsonschema.validate(result, _schema())
    return result


def test_plan_previews_placement_and_assesses_gpu_memory(daemon: Daemon, pool: tuple[str, list[str]]) -> None:
    cluster, names = pool
    # no cache yet: the weights are unknown, so nothing is blocked and the assumption is said
    unknown = _plan(daemon, {"recipe": "qwen3-8b-vllm", "cluster": cluster})
    assessment = unknown["hardware_assessment"]
    assert any("weights size unknown" in a for a in assessment["assumed"])
    assert assessment["errors"] == []
    assert unknown["placement"]["hosts_used"] == [names[0]]

    ready_cache(daemon.kube, daemon.namespace, "qwen3-8b", operator_running=True)
    # the recipe's maxModelLen 32768: 15.3 GiB weights + 4.5 GiB KV + 1 GiB = 20.8 GiB <= 21.6 GiB
    fits = _plan(daemon, {"recipe": "qwen3-8b-vllm", "cluster": cluster})
    placement = fits["placement"]
    assert placement["hosts_used"] == [names[0]]
    assert placement["by_rank"] == [
        {"host": names[0], "local_gpu": 0, "util_fraction": 0.9, "memory_gb": 21.6, "need_gb": 20.76}
    ]
    assessment = fits["hardware_assessment"]
    assert assessment["hosts"][names[1]] == {
        "gpu_product": "NVIDIA-A10",
        "gpu_memory_gb": 24.0,
        "gpu_count": 2,
        "allocatable_gpus": 2,
        "fits": True,
    }
    assert assessment["detected"][0] == "ModelCache qwen3-8b: a Ready cache of Qwen/Qwen3-8B in the namespace"
    assert f"{names[0]}: 2 x NVIDIA-A10 with 24.0 GiB (nvidia.com/gpu.memory label)" in assessment["detected"]
    assert (assessment["errors"], assessment["warnings"]) == ([], [])
    assert any("the Kubernetes scheduler binds" in note for note in fits["notes"])

    # the model's full context (40960 tokens) does not fit: no placement, the reason in errors
    full = _plan(
        daemon, {"recipe": "qwen3-8b-vllm", "cluster": cluster, "overrides": {"max_model_len": 40960}}
    )
    assert full["placement"] is None
    (error,) = full["hardware_assessment"]["errors"]
    assert error.startswith("needs 21.9 GiB per GPU with TP 1"), error
    assert f"nodes of InferenceCluster '{cluster}' have 24 GiB per GPU (0 of 2 fit)" in error
    assert {h["fits"] for h in full["hardware_assessment"]["hosts"].values()} == {False}
