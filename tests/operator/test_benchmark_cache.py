"""An InferenceBenchmark offline (issue 31): the target workload serves a ModelCache, and no Hub
is reachable from the pods once the cache is Ready (the local Hub is stopped; the pod network
reaches nothing else). The benchmark's runner Job mounts the cache read-only, takes the
tokenizer from the model's snapshot there and the prompt text it ships, and succeeds with the
real llama-benchy; the runner's log says where the tokenizer came from. Every name differs (the
workload, its served name, the ModelCache, its existing claim, the model), so the runner cannot
find the cache by a name that merely coincides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import TOKENIZER
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, wait_condition, workload
from tests.operator.test_benchmark import _jobs, wait_phase
from tests.operator.test_modelcache import (
    MOUNT,
    ON_PROCESS_NODES,
    TOLERATE,
    _cache,
    _node_ip,
    _wait_phase,
    bound_claim,
    volumes,
)

Factory = Callable[..., OperatorProcess]
__all__ = ["volumes"]  # the fixture
#: The benchmark's target, the ModelCache it serves and the existing claim that holds it.
TARGET, CACHE, CLAIM = "bench-target", "tokenizer-cache", "weights"


def test_a_benchmark_of_a_cached_model_needs_no_hub(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    netns_network: None,
    tmp_path: Path,
    volumes: list[str],
) -> None:
    operator_factory(namespace, "--cache-mount-path", MOUNT)
    volumes.append(bound_claim(kube, tmp_path / "pv-weights", namespace, CLAIM))
    with Hub(default_repos(lfs_mib=0.01), host=_node_ip(kube)) as hub:
        cache = _cache(CACHE, namespace, hub, TOKENIZER, "main")
        cache["spec"]["storage"] = {"claimName": CLAIM}
        kube.apply(cache)
        ready = _wait_phase(kube, namespace, CACHE, "Ready", timeout=120)
    commit = ready["status"]["resolvedRevision"]
    # the Hub is gone: nothing the pods could ask for a tokenizer or a book
    kube.apply(
        workload(
            TARGET,
            namespace,
            model={"name": TOKENIZER, "servedName": "tiny-chat", "cacheRef": {"name": CACHE}},
            scheduling=ON_PROCESS_NODES,
        )
    )
    wait_condition(kube, namespace, TARGET, "Ready", timeout=120)
    kube.apply(
        {
            "apiVersion": API,
            "kind": "InferenceBenchmark",
            "metadata": {"name": "offline", "namespace": namespace},
            "spec": {
                "target": {"workloadRef": {"name": TARGET}, "via": "Endpoint"},
                "benchArgs": {"skip_coherence": True},  # the stand-in knows no capital of France
                "scenarios": [{"name": "one", "requests": 2, "inputTokens": 64, "outputTokens": 8}],
                "runner": {"nodeSelector": ON_PROCESS_NODES["nodeSelector"], "tolerations": TOLERATE},
            },
        }
    )
    done = wait_phase(kube, namespace, "offline", ("Succeeded", "Failed"), timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert condition(done, "Complete")["status"] == "True"  # type: ignore[index]
    assert done["status"]["results"][0]["requests"] == 2

    [job] = _jobs(kube, namespace, "offline")
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["volumes"] == [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}}
    ]
    assert pod_spec["containers"][0]["volumeMounts"] == [
        {"name": "model-cache", "mountPath": MOUNT, "readOnly": True}
    ]
    [pod] = kube.list_items(
        "v1", "Pod", namespace=namespace, label_selector=f"job-name={job['metadata']['name']}"
    )
    log = kube.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/log",
        params={"container": "benchmark"},
    ).text
    started = next(json.loads(line) for line in log.splitlines() if line.startswith('{"event":"started"'))
    snapshot = f"{MOUNT}/hub/models--{TOKENIZER.replace('/', '--')}/snapshots/{commit}"
    where = f"ModelCache {CACHE} ({TOKENIZER}) at {snapshot}"
    assert started["tokenizer"] == {"path": snapshot, "from": where}
    assert started["args"]["book_url"].startswith("file:///")
