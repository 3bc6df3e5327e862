"""A running stand-in engine pod on the testbed's process nodes, labelled as the operator labels a
leader, scraped on its pod address as the PodMonitor does (:8000/metrics): every series the engine
dashboard queries is there, and the latency histograms counted the requests it served."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparkrun_operator.render import keys
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import Topology
from tests.conftest import Require
from tests.metrics import engine_board
from tests.process import helpers


def _leader(name: str) -> dict[str, object]:
    engine = {
        "name": keys.CONTAINER_ENGINE,
        "image": helpers.ENGINE_IMAGE,
        "command": ["vllm", "serve"],
        "args": ["org/model", "--served-model-name", "chat", "--port", "8000"],
        "env": [{"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": "0.01"}],
        "ports": [{"name": keys.PORT_NAME, "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": keys.PORT_NAME}, "periodSeconds": 1},
    }
    labels = {
        keys.LABEL_MANAGED_BY: keys.MANAGED_BY,
        keys.LABEL_WORKLOAD: "chat",
        keys.LABEL_REPLICA: "0",
        keys.LABEL_ROLE: keys.ROLE_LEADER,
    }
    return helpers.pod(name, helpers.pod_spec([engine]), labels=labels)


def test_a_leader_pod_exports_every_series_the_dashboard_uses(
    testbed: plane.Testbed, kube: KubeApi, namespace: str, require: Require
) -> None:
    assert Topology.from_dict(testbed.state.topology).process_node_names(), "no process nodes"
    require(
        helpers.network_mode(testbed.run_dir) == "netns",
        "pods run with loopback addresses here (docs/decisions/0004-testbed-pod-network.md)",
    )
    kube.create(_leader("chat-0-leader"), namespace=namespace)
    pod = helpers.wait_pod(kube, namespace, "chat-0-leader", helpers.ready, timeout=90, what="a Ready leader")
    url = f"http://{pod['status']['podIP']}:8000"
    with httpx.Client(timeout=30) as http:
        for _ in range(3):
            body = {"model": "chat", "prompt": "one two three", "max_tokens": 4}
            assert http.post(f"{url}/v1/completions", json=body).status_code == 200
        text = http.get(f"{url}/metrics").text
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    used = engine_board.used_series()
    assert used <= set(samples), sorted(used - set(samples))
    count = {
        f.name: next(s.value for s in f.samples if s.name.endswith("_count"))
        for f in text_string_to_metric_families(text)
        if f.type == "histogram"
    }
    assert count["vllm:time_to_first_token_seconds"] == 3
    assert count["vllm:e2e_request_latency_seconds"] == 3
    assert count["vllm:request_queue_time_seconds"] == 3
    assert count["vllm:inter_token_latency_seconds"] == 9  # 4 tokens each: 3 gaps
    assert samples["vllm:generation_tokens_total"].value == 12
