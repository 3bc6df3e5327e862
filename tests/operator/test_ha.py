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

from sparkrun_testbed.kubeapi import KubeApi
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


def _wait_log(proc: OperatorProcess, text: str, timeout: float = 90) -> None:
    # NB: generous: on a freshly started apiserver kopf's first lists are refused for a while.
    deadline = time.monotonic() + timeout
    while text not in proc.output():
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{proc.output()[-3000:]}"
        time.sleep(0.2)


def test_one_active_replica_and_takeover(
    kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None
) -> None:
    # The active replica first, as after any rollout: replicas starting at the same instant may
    # both run for a moment until each has seen the other's keep-alive (kopf peering).
    active, active_metrics, active_live = _replica(operator_factory, namespace, priority=200)
    _wait_http(f"http://127.0.0.1:{active_live}/healthz")
    _wait_log(active, "Resuming operations")
    standby, standby_metrics, standby_live = _replica(operator_factory, namespace, priority=100)
    _wait_http(f"http://127.0.0.1:{standby_live}/healthz")

    # both replicas keep their keep-alives in the namespace's peering object
    def peers() -> int | None:
        obj = kube.get("kopf.dev/v1", "KopfPeering", "sparkrun-operator", namespace=namespace) or {}
        alive = [p for p in (obj.get("status") or {}).values() if isinstance(p, dict)]
        return len(alive) if len(alive) == 2 else None

    kube.wait(peers, timeout=90, what="both replicas in the peering object")
    # NB: a replica starts paused and logs only when it resumes, so the log proves who works.
    time.sleep(2)
    assert "Resuming operations" not in standby.output()

    # NB: both replicas may have written once before kopf started: creating the peering object.
    active_before, standby_before = _writes(active_metrics), _writes(standby_metrics)
    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    assert _writes(active_metrics) > active_before
    assert _writes(standby_metrics) == standby_before

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
    assert _writes(standby_metrics) > standby_before
    assert "Resuming operations after the pause" in standby.output()
