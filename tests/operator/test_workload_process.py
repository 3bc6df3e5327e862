"""The workload controller with pods run as real processes (the testbed's process nodes and the
vLLM engine stand-in): the whole path from ``kubectl apply`` to a chat completion, sleep and
wake through the engine's own endpoints, and a killed worker restarting its group.

The workloads tolerate the process nodes' taint and select them; everything else is what a
user writes.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable
from typing import Any

import httpx

from sparkrun_testbed import topology
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload
from tests.process.helpers import MARK_ENV, cmdline_of, environ_of, marked_pids, wait_for

Factory = Callable[..., OperatorProcess]

ON_PROCESS_NODES: dict[str, Any] = {
    "nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"},
    "tolerations": [
        {
            "key": topology.PROCESS_TAINT["key"],
            "operator": "Equal",
            "value": topology.PROCESS_TAINT["value"],
            "effect": topology.PROCESS_TAINT["effect"],
        }
    ],
}


def _patch(kube: KubeApi, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _chat(url: str, model: str) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_apply_to_a_chat_completion(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None
) -> None:
    operator_factory(namespace)
    kube.apply(
        workload(
            "tiny",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "tiny"},
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(kube, namespace, "tiny", "Ready", timeout=120)
    endpoint = obj["status"]["endpoints"][0]
    assert endpoint["ready"] is True
    answer = _chat(endpoint["url"], "tiny")
    assert answer["model"] == "tiny"
    assert answer["choices"][0]["message"]["content"]
    models = httpx.get(f"{endpoint['url']}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny"]


def test_sleeping_then_running(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None
) -> None:
    operator_factory(namespace)
    kube.apply(
        workload(
            "sleepy",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "sleepy"},
            engine={"enableSleepMode": True},
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(kube, namespace, "sleepy", "Ready", timeout=120)
    url = obj["status"]["endpoints"][0]["url"]
    pods_before = {p["metadata"]["uid"] for p in kube.list_items("v1", "Pod", namespace=namespace)}
    _patch(kube, namespace, "sleepy", {"state": "Sleeping"})
    obj = wait_condition(kube, namespace, "sleepy", "Sleeping", timeout=60)
    assert obj["status"]["phase"] == "Sleeping"
    assert condition(obj, "Ready")["reason"] == "Asleep"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": True}
    # the pods (and their GPUs) are kept
    assert {p["metadata"]["uid"] for p in kube.list_items("v1", "Pod", namespace=namespace)} == pods_before
    assert [js["spec"]["suspend"] for js in jobsets(kube, namespace, "sleepy")] == [False]
    _patch(kube, namespace, "sleepy", {"state": "Running"})
    obj = wait_condition(kube, namespace, "sleepy", "Ready", timeout=60)
    assert condition(obj, "Sleeping")["status"] == "False"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": False}
    assert _chat(url, "sleepy")["choices"]


def test_killed_worker_restarts_the_group(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None
) -> None:
    operator_factory(namespace)
    mark = secrets.token_hex(8)
    kube.apply(
        workload(
            "pair",
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "pair"},
            engine={"env": [{"name": MARK_ENV, "value": mark}]},
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(kube, namespace, "pair", "Ready", timeout=150)
    assert obj["status"]["restarts"] == 0
    workers = [
        pid
        for pid in marked_pids(mark)
        if "--headless" in cmdline_of(pid) and environ_of(pid).get(MARK_ENV) == mark
    ]
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)
    wait_condition(kube, namespace, "pair", "Ready", "False", timeout=60)
    obj = wait_condition(
        kube, namespace, "pair", "Ready", timeout=180, extra=lambda o: o["status"].get("restarts", 0) >= 1
    )
    assert obj["status"]["restarts"] == 1
    assert obj["status"]["lastFailure"]["reason"]
    assert _chat(obj["status"]["endpoints"][0]["url"], "pair")["choices"]
    wait_for(
        lambda: len([p for p in marked_pids(mark) if "sparkrun_testbed.engine" in cmdline_of(p)]) == 2,
        timeout=30,
        what="exactly the two engines of the new group",
    )
