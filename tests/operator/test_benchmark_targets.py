"""InferenceBenchmark through the controller with the other framework and the other way in: the
real tool-eval-bench against the engine stand-in (its tool calls scored), and llama-benchy
through the real inference gateway (``target.via: Gateway``, the operator's ``--gateway-url``).

The gateway runs as a process on the testbed host, listening on the process nodes' address so
that the benchmark pod (in its network namespace) reaches it; it routes by the workload's
served name to the leader pods from the Service's EndpointSlices (kube-controller-manager makes
them; pod addresses are reachable from the host), so no cluster DNS or kube-proxy is involved.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_testbed import plane
from sparkrun_testbed.hfhub import Hub
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.ports import free_ports
from tests.operator.conftest import API, OperatorProcess
from tests.operator.test_benchmark import _engine, _serve, benchmark, pod_hub, wait_phase  # noqa: F401
from tests.operator.test_modelcache import ON_PROCESS_NODES, TOLERATE, _node_ip

Factory = Callable[..., OperatorProcess]


def test_tool_eval_bench_runs_through_the_controller(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    pod_hub: Hub,  # noqa: F811
) -> None:
    operator_factory(namespace)
    # tool-eval-bench asks for 16384 output tokens: the context must hold them
    _serve(kube, namespace, "tiny", _engine(0.01, 0.0, max_len=32768))
    kube.apply(
        {
            "apiVersion": API,
            "kind": "InferenceBenchmark",
            "metadata": {"name": "tools", "namespace": namespace},
            "spec": {
                "target": {"workloadRef": {"name": "tiny"}, "via": "Endpoint"},
                "framework": "tool-eval-bench",
                "benchArgs": {"scenarios": ["TC-01", "TC-02"]},
                "scenarios": [{"name": "calls", "concurrency": 1}],
                "runner": {"nodeSelector": ON_PROCESS_NODES["nodeSelector"], "tolerations": TOLERATE},
            },
        }
    )
    done = wait_phase(kube, namespace, "tools", ("Succeeded", "Failed"), timeout=180)
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    (result,) = status["results"]
    assert result["name"] == "calls"
    assert result["framework"] == "tool-eval-bench"
    assert result["frameworkVersion"] == "3.0.0"
    assert result["requests"] == 2
    assert result["frameworkFigures"]["scenarios"] == 2
    assert 0 <= result["score"] <= 100
    assert result["e2e"]["p50"] >= 10  # at least the stand-in's first-token delay
    assert status["provenance"]["framework"] == "tool-eval-bench"
    assert status["provenance"]["frameworkVersion"] == "3.0.0"
    raw = kube.get("v1", "ConfigMap", result["rawOutput"]["configMap"], namespace=namespace)
    assert raw is not None
    assert raw["data"]["calls"]


@pytest.fixture
def node_gateway(testbed: plane.Testbed, kube: KubeApi, namespace: str, tmp_path: Path) -> Iterator[str]:
    """The inference gateway, watching ``namespace``, on the process nodes' address; its URL."""
    host = _node_ip(kube)
    (port,) = free_ports(1)
    env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "sparkrun_operator.cli.main", "gateway", "--kubernetes",
            "--namespace", namespace, "--host", host, "--port", str(port),
            "--log-level", "warning", "--inference-pools", "off"]  # fmt: skip
    proc = OperatorProcess(argv, env=env, log=tmp_path / "gateway.log").start()
    url = f"http://{host}:{port}"

    def up() -> bool:
        assert proc.alive(), proc.output()[-4000:]
        try:
            return httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        kube.wait(up, timeout=60, what="the gateway listening")
        yield url
    finally:
        proc.stop()


def test_via_gateway_measures_through_the_gateway(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    pod_hub: Hub,  # noqa: F811
    node_gateway: str,
) -> None:
    operator_factory(namespace, "--gateway-url", node_gateway)
    _serve(kube, namespace, "tiny", _engine(0.03, 0.005))

    def routed() -> bool:
        models = httpx.get(f"{node_gateway}/v1/models", timeout=5.0).json()
        return "tiny" in {m.get("id") for m in models.get("data") or []}

    kube.wait(routed, timeout=60, what="the gateway routing 'tiny'")
    scenario: dict[str, Any] = {
        "name": "single",
        "concurrency": 1,
        "requests": 2,
        "inputTokens": 64,
        "outputTokens": 8,
    }
    body = benchmark("gw", namespace, pod_hub, [scenario])
    body["spec"]["target"] = {"workloadRef": {"name": "tiny"}, "via": "Gateway"}
    kube.apply(body)
    done = wait_phase(kube, namespace, "gw", ("Succeeded", "Failed"), timeout=180)
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["provenance"]["url"] == node_gateway
    (result,) = status["results"]
    assert result["requests"] == 2
    assert result["errors"] == 0
    assert result["ttft"]["p50"] >= 30
