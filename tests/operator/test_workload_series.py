"""The per-workload series through the real operator on the testbed (KWOK pods): they appear
when a workload's status is written, follow its replicas and readiness, disappear with it, and
at most ``--load-metric-workloads`` workloads have them (the rest counted until a slot frees)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, wait_condition, workload

Factory = Callable[..., OperatorProcess]
Series = dict[tuple[str, str, str], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> tuple[Series, float | None]:
    """The ``sparkrun_workload_*`` state series by (name, namespace, workload), and the refused count."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read(4 << 20).decode()
    found: Series = {}
    refused = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name.startswith("sparkrun_workload_")
                and sample.name != "sparkrun_workload_load_per_replica"
            ):
                found[(sample.name, sample.labels["namespace"], sample.labels["workload"])] = sample.value
            elif sample.name == "sparkrun_operator_workload_series_refused":
                refused = sample.value
    return found, refused


def test_series_follow_workloads_under_the_cap(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    port = free_port()
    operator_factory(namespace, "--metrics-port", str(port), "--load-metric-workloads", "2")
    for name in ("a", "b"):
        kube.apply(workload(name, namespace))
        wait_condition(kube, namespace, name, "Ready", timeout=90)

    def shows(name: str, **expected: float) -> bool:
        series, _ = scrape(port)
        return all(series.get((f"sparkrun_workload_{k}", namespace, name)) == v for k, v in expected.items())

    kube.wait(
        lambda: shows("a", ready=1, replicas_desired=1, replicas=1, replicas_ready=1),
        timeout=30,
        what="a's series",
    )
    # a third workload finds both slots taken: Ready, but no series; counted
    kube.apply(workload("c", namespace, state="Stopped"))
    wait_condition(kube, namespace, "c", "Ready", status="False", reason="Stopped", timeout=90)
    kube.wait(lambda: scrape(port)[1] == 1, timeout=30, what="c refused")
    assert {key[2] for key in scrape(port)[0]} == {"a", "b"}
    # scaled up: desired moves first, then readiness
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="b"),
        json={"spec": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    kube.wait(
        lambda: shows("b", replicas_desired=2, replicas_ready=2, ready=1), timeout=90, what="b scaled to 2"
    )
    # a goes: its series go, and c takes the slot on its next pass (its spec changes here)
    kube.delete(API, "InferenceWorkload", "a", namespace=namespace)
    kube.wait(lambda: not any(key[2] == "a" for key in scrape(port)[0]), timeout=60, what="a's series gone")
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="c"),
        json={"metadata": {"labels": {"poke": "1"}}, "spec": {"replicas": 3}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    # Stopped: it wants no replica (its JobSets stay, suspended)
    kube.wait(
        lambda: shows("c", ready=0, replicas_desired=0, replicas_ready=0), timeout=60, what="c's series"
    )
    assert scrape(port)[1] == 0
    assert {key[2] for key in scrape(port)[0]} == {"b", "c"}
