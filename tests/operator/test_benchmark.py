"""The InferenceBenchmark controller end to end: the testbed, the real operator, workloads served
by the engine stand-in on process nodes, and benchmark Jobs whose pods run the real llama-benchy
(through ``sparkrun_operator.runtime.bench``) with the tokenizer and prompt corpus from the local
Hub on the process nodes' address.

The testbed has no cluster DNS and no kube-proxy, so the benchmarks measure a replica's endpoint
(``target.via: Endpoint``) rather than the Service. Tolerance of the measured figures against the
stand-in's delays: TTFT p50 within [delay, 3 x delay + 50 ms], ITL p50 within [delay, 2 x delay
+ 10 ms] (sleeps only overshoot, so the lower bound is exact; two CPUs shared with other jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import CORPUS_FILE, TOKENIZER
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, wait_condition, workload
from tests.operator.test_modelcache import ON_PROCESS_NODES, TOLERATE, _node_ip

Factory = Callable[..., OperatorProcess]
LABEL = "sparkrun.dev/benchmark"


@pytest.fixture
def pod_hub(kube: KubeApi, netns_network: None) -> Iterator[Hub]:
    with Hub(default_repos(lfs_mib=0.01), host=_node_ip(kube)) as hub:
        yield hub


def _engine(ttft: float, token: float, max_len: int = 8192) -> dict[str, Any]:
    return {
        "maxModelLen": max_len,
        "env": [
            {"name": "SPARKRUN_ENGINE_TTFT_SECONDS", "value": str(ttft)},
            {"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": str(token)},
        ],
    }


def _serve(kube: KubeApi, namespace: str, name: str, engine: dict[str, Any]) -> dict[str, Any]:
    kube.apply(
        workload(
            name,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": name},
            engine=engine,
            scheduling=ON_PROCESS_NODES,
        )
    )
    return wait_condition(kube, namespace, name, "Ready", timeout=120)


def benchmark(
    name: str, namespace: str, hub: Hub, scenarios: list[dict[str, Any]], **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "target": {"workloadRef": {"name": "tiny"}, "via": "Endpoint"},
        "framework": "llama-benchy",
        "benchArgs": {
            "book_url": f"{hub.url}/{TOKENIZER}/resolve/main/{CORPUS_FILE}",
            "skip_coherence": True,  # the stand-in knows no capital of France
        },
        "tokenizer": TOKENIZER,
        "hfEndpoint": hub.url,
        "scenarios": scenarios,
        "runner": {"nodeSelector": ON_PROCESS_NODES["nodeSelector"], "tolerations": TOLERATE},
    }
    body.update(spec)
    return {
        "apiVersion": API,
        "kind": "InferenceBenchmark",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def _get(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API, "InferenceBenchmark", name, namespace=namespace)


def wait_phase(
    kube: KubeApi, namespace: str, name: str, phases: tuple[str, ...], timeout: float
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = _get(kube, namespace, name)
        return obj if obj and (obj.get("status") or {}).get("phase") in phases else None

    return kube.wait(probe, timeout=timeout, what=f"benchmark {name} {phases}: {_get(kube, namespace, name)}")


def _roll(kube: KubeApi, namespace: str, served: dict[str, Any], engine: dict[str, Any]) -> None:
    """Change the engine and wait until the new revision's replica alone serves."""
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="tiny"),
        json={"spec": {"engine": engine}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    revision = served["status"]["revision"]
    old_url = served["status"]["endpoints"][0]["url"]

    def rolled() -> bool:
        w = kube.get(API, "InferenceWorkload", "tiny", namespace=namespace)
        if w is None or w["status"].get("revision") == revision:
            return False
        endpoints = w["status"].get("endpoints") or []
        return [e["ready"] for e in endpoints] == [True] and endpoints[0]["url"] != old_url

    kube.wait(rolled, timeout=120, what="the new revision serving alone")


def _jobs(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.list_items("batch/v1", "Job", namespace=namespace, label_selector=f"{LABEL}={name}")


SCENARIOS = [
    {"name": "single", "concurrency": 1, "requests": 2, "inputTokens": 64, "outputTokens": 16},
    {"name": "pair", "concurrency": 2, "requests": 4, "inputTokens": 64, "outputTokens": 16},
]


def test_results_provenance_and_comparison(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    operator_factory(namespace)
    ttft, token = 0.05, 0.01
    served = _serve(kube, namespace, "tiny", _engine(ttft, token))
    kube.apply(benchmark("first", namespace, pod_hub, SCENARIOS))
    done = wait_phase(kube, namespace, "first", ("Succeeded", "Failed"), timeout=180)
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert condition(done, "Complete")["status"] == "True"  # type: ignore[index]
    assert condition(done, "TargetReady")["status"] == "True"  # type: ignore[index]
    assert status["observedGeneration"] == done["metadata"]["generation"]
    single, pair = status["results"]
    assert [single["name"], pair["name"]] == ["single", "pair"]
    assert single["requests"] == 2
    assert pair["requests"] == 4
    assert pair["samples"] == {"ttft": 4, "itl": 4, "e2e": 4}
    assert single["errors"] == 0
    assert single["framework"] == "llama-benchy"
    assert single["frameworkVersion"] == "0.4.0"
    for result in (single, pair):
        assert ttft * 1000 <= result["ttft"]["p50"] <= ttft * 3000 + 50, result
        assert token * 1000 <= result["itl"]["p50"] <= token * 2000 + 10, result
        assert result["e2e"]["p50"] >= (ttft + 15 * token) * 1000
        assert result["outputTokensPerSecond"] > 0
    prov = status["provenance"]
    assert prov["workloadRevision"] == served["status"]["revision"]
    assert prov["engineImage"] == served["spec"]["engine"]["image"]
    assert prov["model"] == "Qwen/Qwen3-0.6B"
    assert prov["gpuCount"] == 1
    assert prov["framework"] == "llama-benchy"
    assert prov["frameworkVersion"] == "0.4.0"
    assert prov["url"] == served["status"]["endpoints"][0]["url"]
    raw_ref = single["rawOutput"]
    raw = kube.get("v1", "ConfigMap", raw_ref["configMap"], namespace=namespace)
    assert raw is not None
    assert "Running test: pp=64, tg=16, depth=0, concurrency=1" in raw["data"]["single"]
    assert 0 < raw_ref["bytes"] <= 16 * 1024
    assert status["headline"]["ttftP50Ms"] == single["ttft"]["p50"]
    assert "comparison" not in status  # the first run has no baseline
    assert len(_jobs(kube, namespace, "first")) == 2

    # the engine gets five times slower to its first token: a second run shows it
    revision = served["status"]["revision"]
    _roll(kube, namespace, served, _engine(5 * ttft, token))
    kube.apply(benchmark("second", namespace, pod_hub, SCENARIOS))
    second = wait_phase(kube, namespace, "second", ("Succeeded", "Failed"), timeout=180)["status"]
    assert second["phase"] == "Succeeded", second
    assert second["provenance"]["workloadRevision"] != revision
    comparison = second["comparison"]
    assert comparison["baseline"] == "first"
    ratios = {s["name"]: s["ratios"] for s in comparison["scenarios"]}
    assert set(ratios) == {"single", "pair"}
    assert ratios["single"]["ttftP50"] > 1.8, ratios
    assert 0.5 < ratios["single"]["itlP50"] < 2.0, ratios
    assert second["headline"]["ttftRatio"] == ratios["single"]["ttftP50"]


def test_a_target_that_never_becomes_ready_fails_with_the_reason(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    operator_factory(namespace)
    kube.apply(benchmark("orphan", namespace, pod_hub, SCENARIOS[:1], targetReadySeconds=3))
    pending = wait_phase(kube, namespace, "orphan", ("Pending", "Failed"), timeout=30)
    assert condition(pending, "TargetReady")["reason"] == "WorkloadNotFound"  # type: ignore[index]
    failed = wait_phase(kube, namespace, "orphan", ("Failed",), timeout=60)
    cond = condition(failed, "Failed")
    assert cond is not None
    assert cond["reason"] == "TargetNotReady"
    assert "workload/tiny not Ready after 3s: WorkloadNotFound" in cond["message"]
    assert _jobs(kube, namespace, "orphan") == []


def test_resume_runs_only_the_unfinished_scenarios(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    operator_factory(namespace)
    served = _serve(kube, namespace, "tiny", _engine(0.0, 0.0, max_len=1024))
    scenarios = [
        {"name": "short", "concurrency": 1, "requests": 1, "inputTokens": 64, "outputTokens": 8},
        {"name": "long", "concurrency": 1, "requests": 1, "inputTokens": 1500, "outputTokens": 8},
    ]
    kube.apply(benchmark("resumable", namespace, pod_hub, scenarios))
    failed = wait_phase(kube, namespace, "resumable", ("Failed", "Succeeded"), timeout=180)
    assert failed["status"]["phase"] == "Failed", failed["status"]
    assert [r["name"] for r in failed["status"]["results"]] == ["short"]
    cond = condition(failed, "Failed")
    assert cond is not None
    assert "scenario long" in cond["message"]
    # a longer context fixes it; resume (a new sparkrun.dev/resume value) reruns "long" only
    _roll(kube, namespace, served, _engine(0.0, 0.0, max_len=8192))
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceBenchmark", namespace=namespace, name="resumable"),
        json={"metadata": {"annotations": {"sparkrun.dev/resume": "1"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    done = kube.wait(
        lambda: (
            (b := _get(kube, namespace, "resumable"))
            and b["status"].get("attempt") == 1
            and b["status"].get("phase") in ("Succeeded", "Failed")
            and b
        ),
        timeout=180,
        what="the resumed benchmark finished",
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["attempt"] == 1
    assert [r["name"] for r in done["status"]["results"]] == ["short", "long"]
    runs = sorted(
        (
            j["metadata"]["labels"]["sparkrun.dev/benchmark-scenario"],
            j["metadata"]["labels"]["sparkrun.dev/benchmark-attempt"],
        )
        for j in _jobs(kube, namespace, "resumable")
    )
    assert runs == [("long", "0"), ("long", "1"), ("short", "0")]


def test_deleting_a_running_benchmark_cancels_its_job(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    operator_factory(namespace)
    _serve(kube, namespace, "tiny", _engine(0.0, 0.2))
    slow = [{"name": "slow", "concurrency": 1, "requests": 50, "inputTokens": 64, "outputTokens": 64}]
    kube.apply(benchmark("cancelled", namespace, pod_hub, slow))
    wait_phase(kube, namespace, "cancelled", ("Running",), timeout=60)
    kube.wait(
        lambda: [
            p
            for p in kube.list_items("v1", "Pod", namespace=namespace, label_selector=f"{LABEL}=cancelled")
            if (p.get("status") or {}).get("phase") == "Running"
        ],
        timeout=60,
        what="the benchmark pod running",
    )
    kube.delete(API, "InferenceBenchmark", "cancelled", namespace=namespace)
    kube.wait(
        lambda: (
            not _jobs(kube, namespace, "cancelled")
            and not kube.list_items("v1", "Pod", namespace=namespace, label_selector=f"{LABEL}=cancelled")
        ),
        timeout=90,
        what="the benchmark's Job and pod gone",
    )


def test_a_killed_benchmark_pod_reruns_only_its_scenario(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub
) -> None:
    operator_factory(namespace)
    _serve(kube, namespace, "tiny", _engine(0.0, 0.05))
    scenarios = [
        {"name": "first", "concurrency": 1, "requests": 1, "inputTokens": 64, "outputTokens": 8},
        {"name": "second", "concurrency": 1, "requests": 30, "inputTokens": 64, "outputTokens": 16},
    ]
    kube.apply(benchmark("killed", namespace, pod_hub, scenarios))
    selector = f"{LABEL}=killed,sparkrun.dev/benchmark-scenario=second"

    def running() -> dict[str, Any] | None:
        pods = kube.list_items("v1", "Pod", namespace=namespace, label_selector=selector)
        return next((p for p in pods if (p.get("status") or {}).get("phase") == "Running"), None)

    pod = kube.wait(running, timeout=120, what="the second scenario's pod running")
    first = _get(kube, namespace, "killed")
    assert first is not None
    assert [r["name"] for r in first["status"]["results"]] == ["first"]
    kube.request(
        "DELETE",
        kube.resource_path("v1", "Pod", namespace=namespace, name=pod["metadata"]["name"]),
        json={"gracePeriodSeconds": 0},
    )
    done = wait_phase(kube, namespace, "killed", ("Succeeded", "Failed"), timeout=240)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    results = {r["name"]: r for r in done["status"]["results"]}
    assert results["first"] == first["status"]["results"][0]  # kept, not measured again
    assert results["second"]["requests"] == 30
    jobs = {
        j["metadata"]["labels"]["sparkrun.dev/benchmark-scenario"]: j
        for j in _jobs(kube, namespace, "killed")
    }
    assert set(jobs) == {"first", "second"}
    assert jobs["first"]["status"].get("failed", 0) == 0
    assert jobs["second"]["status"].get("failed", 0) >= 1  # the killed pod
    assert jobs["second"]["status"]["succeeded"] == 1
