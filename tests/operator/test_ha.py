"""Two operator replicas with kopf peering: exactly one works, the other takes over when it dies.

Also checked: the liveness endpoint answers on both replicas and the Prometheus endpoint counts
the active replica's API writes (and none of the paused one's).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable

import httpx

from sparkrun_operator.testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, wait_condition, workload

Factory = Callable[..., OperatorProcess]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _writes(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^sparkrun_operator_api_writes_total\{[^}]*\} (\S+)$", text, re.M)
    )


def _replica(factory: Factory, namespace: str, *, priority: int) -> tuple[OperatorProcess, int, int]:
    metrics, live = _free_port(), _free_port()
    proc = factory(
        namespace,
        "--priority",
        str(priority),
        "--peering-lifetime",
        "8",
        "--metrics-port",
        str(metrics),
        "--metrics-host",
        "127.0.0.1",
        "--liveness",
        f"http://127.0.0.1:{live}/healthz",
        standalone=False,
    )
    return proc, metrics, live


def _wait_http(url: str, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {timeout} s")
        time.sleep(0.2)


def test_one_active_replica_and_takeover(
    kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None
) -> None:
    active, active_metrics, active_live = _replica(operator_factory, namespace, priority=200)
    standby, standby_metrics, standby_live = _replica(operator_factory, namespace, priority=100)
    _wait_http(f"http://127.0.0.1:{active_live}/healthz")
    _wait_http(f"http://127.0.0.1:{standby_live}/healthz")
    deadline = time.monotonic() + 30
    while "Pausing operations in favour of" not in standby.output():
        assert time.monotonic() < deadline, f"the standby never paused:\n{standby.output()[-3000:]}"
        time.sleep(0.2)

    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    assert _writes(active_metrics) > 0
    assert _writes(standby_metrics) == 0

    active.kill()
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="qwen"),
        json={"spec": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    wait_condition(
        kube, namespace, "qwen", "Ready", timeout=120, extra=lambda o: o["status"]["readyReplicas"] == 2
    )
    assert _writes(standby_metrics) > 0
    assert "Resuming operations after the pause" in standby.output()
