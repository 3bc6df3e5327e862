"""``benchmarks.run`` and ``benchmarks.resume`` end to end: the daemon API shim and the operator
(its DaemonJob executor and the InferenceBenchmark controller) on the testbed. ``benchmarks.run``
launches the example recipe's workload on the process nodes (``--workload-scheduling``), where
the engine stand-in serves it, measures it with the real llama-benchy (tokenizer and corpus from
the local Hub) and stops it; ``benchmarks.resume`` of a finished benchmark answers it complete;
an unknown framework is refused (422) naming the known ones. The shim and the operator run with
exactly the chart's RBAC (``tests/shim/chart_rbac.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import CORPUS_FILE, TOKENIZER
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.conftest import Require
from tests.operator.conftest import API
from tests.operator.test_modelcache import ON_PROCESS_NODES, _node_ip
from tests.process.helpers import network_mode
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

RECIPE = "qwen3-8b-vllm"  # examples/recipe.yaml, created by start_daemon


@pytest.fixture(scope="module")
def env(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Daemon, Hub]]:
    Require()(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
    workdir: Path = tmp_path_factory.mktemp("bench-ops")
    with Hub(default_repos(lfs_mib=0.01), host=_node_ip(kube)) as hub:
        extra = (
            "--workload-scheduling",
            json.dumps(ON_PROCESS_NODES),
            "--benchmark-scheduling",
            json.dumps(ON_PROCESS_NODES),
            "--benchmark-via",
            "Endpoint",
            "--benchmark-hf-endpoint",
            hub.url,
        )
        daemon = start_daemon(testbed, kube, workdir, extra_operator_args=extra, chart_rbac=True)
        try:
            yield daemon, hub
        except BaseException:
            print(daemon.runner.logs())
            raise
        finally:
            stop_daemon(daemon)


def _call(daemon: Daemon, op: str, args: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    job_id = daemon.submit("operator", op, args)
    job: dict[str, Any] = daemon.wait_job(job_id, "operator", timeout=timeout)
    return job


def _bench_args(hub: Hub) -> dict[str, Any]:
    """llama-benchy's arguments against the local Hub's tokenizer and corpus (no download)."""
    return {
        "book_url": f"{hub.url}/{TOKENIZER}/resolve/main/{CORPUS_FILE}",
        "skip_coherence": True,
        "tokenizer": TOKENIZER,
        "pp": [64],
        "tg": [16],
    }


def test_run_launches_measures_and_stops_then_resume_is_complete(
    env: tuple[Daemon, Hub], kube: KubeApi
) -> None:
    daemon, hub = env
    bench_args = {**_bench_args(hub), "runs": 1, "concurrency": [1, 2]}
    job = _call(daemon, "benchmarks.run", {"recipe": RECIPE, "bench_args": bench_args, "export_files": True})
    assert job["state"] == "succeeded", json.dumps(job)[:4000]
    result = job["result"]
    assert result["success"] is True
    assert result["framework"] == "llama-benchy"
    assert result["category"] == "performance"
    bench_id = result["benchmark_id"]
    assert bench_id.startswith("bench-")
    assert bench_id != job["id"]
    assert set(result["results"]) == {"d0-c1", "d0-c2"}
    assert result["results"]["d0-c2"]["requests"] == 2
    assert result["results"]["d0-c1"]["ttft"]["p50"] > 0
    assert result["run_result"]["workload_id"] == result["workload_id"]
    assert result["container_image"] == "vllm/vllm-openai:v0.33.0"
    assert result["metadata"]["provenance"]["frameworkVersion"] == "0.4.0"
    assert result["outputs"]["d0-c1"].startswith("configmap/")
    # the workload it launched is stopped afterwards
    kube.wait(
        lambda: not kube.list_items(API, "InferenceWorkload", namespace=daemon.namespace),
        timeout=60,
        what="the launched workload stopped",
    )
    bench = kube.get(API, "InferenceBenchmark", bench_id, namespace=daemon.namespace)
    assert bench is not None
    assert bench["status"]["phase"] == "Succeeded"

    again = _call(daemon, "benchmarks.resume", {"benchmark_id": bench_id})
    assert again["state"] == "succeeded", again
    assert again["result"]["already_complete"] is True
    assert again["result"]["results"] == result["results"]


def test_unknown_framework_and_missing_benchmark(env: tuple[Daemon, Hub]) -> None:
    daemon, _ = env
    # refused at submission: 422 naming the known frameworks, no job
    detail = daemon.refused_at_submission(
        "operator", "benchmarks.run", {"recipe": RECIPE, "framework": "locust"}
    )
    assert detail == "unknown benchmark framework 'locust'; known: llama-benchy, tool-eval-bench"
    resume = daemon.refused_at_submission("operator", "benchmarks.resume", {"benchmark_id": "Bench_Nope"})
    assert "benchmark_id name 'Bench_Nope' is not a valid Kubernetes object name" in resume
    missing = _call(daemon, "benchmarks.resume", {"benchmark_id": "bench-nope"}, timeout=60)
    assert missing["state"] == "failed"
    assert "no benchmark bench-nope" in json.dumps(missing["error"])


def test_cancelling_the_daemon_job_deletes_the_benchmark_and_stops_the_workload(
    env: tuple[Daemon, Hub], kube: KubeApi
) -> None:
    daemon, hub = env
    bench_args = {**_bench_args(hub), "runs": 100000}  # far longer than this test waits
    job_id = daemon.submit("operator", "benchmarks.run", {"recipe": RECIPE, "bench_args": bench_args})

    def running() -> dict[str, Any] | None:
        items = kube.list_items(API, "InferenceBenchmark", namespace=daemon.namespace)
        return next((b for b in items if (b.get("status") or {}).get("phase") == "Running"), None)

    bench = kube.wait(running, timeout=180, what="the benchmark running")
    with daemon.http("operator") as client:
        answer = client.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    job = daemon.wait_job(job_id, "operator", timeout=60)
    assert job["state"] == "cancelled", job
    name = bench["metadata"]["name"]
    kube.wait(
        lambda: (
            kube.get(API, "InferenceBenchmark", name, namespace=daemon.namespace) is None
            and not kube.list_items(
                "batch/v1", "Job", namespace=daemon.namespace, label_selector=f"sparkrun.dev/benchmark={name}"
            )
            and not kube.list_items(API, "InferenceWorkload", namespace=daemon.namespace)
        ),
        timeout=90,
        what="the benchmark, its Job and the launched workload gone",
    )


def test_an_operator_restart_mid_run_adopts_the_benchmark_and_the_workload(
    env: tuple[Daemon, Hub], kube: KubeApi
) -> None:
    """benchmarks.run is resumable (ADR 0025): killed mid-run, the next operator runs the job
    again and adopts the benchmark and the workload the first run made (the same objects, no
    second launch); cancelling the job then removes both, as the first run would have."""
    daemon, hub = env
    bench_args = {**_bench_args(hub), "runs": 100000}  # far longer than this test waits
    job_id = daemon.submit("operator", "benchmarks.run", {"recipe": RECIPE, "bench_args": bench_args})

    def running() -> dict[str, Any] | None:
        items = kube.list_items(API, "InferenceBenchmark", namespace=daemon.namespace)
        return next((b for b in items if (b.get("status") or {}).get("phase") == "Running"), None)

    bench = kube.wait(running, timeout=180, what="the benchmark running")
    (workload,) = kube.list_items(API, "InferenceWorkload", namespace=daemon.namespace)
    daemon.runner.restart_operator(kill=True)

    def resumed() -> dict[str, Any] | None:
        status = daemon.job_object(job_id).get("status") or {}
        adopted = "exists (this job's); adopting it" in json.dumps(status.get("events") or [])
        return status if status.get("attempts") == 2 and adopted else None

    try:
        status = kube.wait(resumed, timeout=180, what="the job resumed and the benchmark adopted")
    except Exception:
        print(json.dumps(daemon.job_object(job_id).get("status"), indent=1)[:6000])
        print(daemon.runner.operator.tail(200))
        raise
    assert status["state"] == "running"
    events = json.dumps(status["events"])
    assert f"InferenceWorkload {workload['metadata']['name']} already exists; adopting it" in events

    # the same objects: nothing was launched or created twice (this job's, by its annotation:
    # earlier tests of the module leave their finished benchmarks behind)
    def this_jobs(kind: str) -> list[str]:
        items = kube.list_items(API, kind, namespace=daemon.namespace)
        return [
            i["metadata"]["uid"]
            for i in items
            if (i["metadata"].get("annotations") or {}).get("sparkrun.dev/daemonjob") == job_id
        ]

    assert this_jobs("InferenceBenchmark") == [bench["metadata"]["uid"]]
    assert this_jobs("InferenceWorkload") == [workload["metadata"]["uid"]]

    with daemon.http("operator") as client:
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 200
    assert daemon.wait_job(job_id, "operator", timeout=60)["state"] == "cancelled"
    name = bench["metadata"]["name"]
    kube.wait(
        lambda: (
            kube.get(API, "InferenceBenchmark", name, namespace=daemon.namespace) is None
            and not kube.list_items(API, "InferenceWorkload", namespace=daemon.namespace)
        ),
        timeout=90,
        what="the adopted benchmark and workload gone",
    )
