"""``make demo``'s flow, run for real: ``sparkrun-k8s demo`` in its own testbed.

The session's local target (``conftest.py``) runs the demo once: a testbed with process nodes,
the chart installed (the operator, the shim and the gateway as pods), the examples applied, a
ModelCache downloaded from the local Hub and a workload started from it, Ready workloads, chats
through the gateway with the openai client and a daemon API call. These tests check its exit
status, the steps it reports and what its cache step left in the cluster; the other flows then
run against what it started, and the fixture stops it (and checks that nothing of its testbed,
the Hub included, is left running).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import httpx
import pytest

from e2e.target import Target
from sparkrun_operator.render import keys

pytestmark = pytest.mark.testbed  # a whole testbed (or a real cluster) behind every flow

IN_CI = os.environ.get("CI", "").lower() == "true"
COMMIT = re.compile(r"[0-9a-f]{40}")


def _local(target: Target) -> tuple[str, dict[str, Any]]:
    if target.demo_output is None or target.run_dir is None:
        pytest.skip("the demo runs only on the local testbed target (SPARKRUN_E2E_KUBECONFIG is set)")
    assert target.demo_returncode == 0, target.demo_output[-6000:]
    endpoints: dict[str, Any] = json.loads((target.run_dir / "endpoints.json").read_text())
    return target.demo_output, endpoints


def test_demo_runs_end_to_end(target: Target) -> None:
    output, endpoints = _local(target)
    for step in ("1. Check the examples", "2. Start the testbed", "5. Cache a model from the local Hub",
                 "6. Wait until every workload is Ready", "7. Chat through the gateway",
                 "8. Call the daemon API", "demo complete"):  # fmt: skip
        assert step in output
    assert "llama-405b (4 nodes) streamed" in output
    examples = 3 if endpoints["model_cache"]["skipped"] else 4  # + the workload from the cache
    assert f"workloads.list -> {examples} workloads" in output


def test_demo_installs_the_chart_and_its_components_run_as_pods(target: Target) -> None:
    output, endpoints = _local(target)
    if endpoints["install"] != "helm":
        reason = f"the demo ran the components as processes ({endpoints['install']}): no netns here"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    assert "helm install -> every component answering" in output
    # reached through kube-apiserver: the gateway's Service proxy and the daemon API's APIService
    assert "/services/sparkrun-gateway:http/proxy" in endpoints["gateway_url"]
    assert endpoints["daemon_url"].endswith("/apis/daemon.sparkrun.dev/v1alpha1")
    assert endpoints["gateway_token_from_kubeconfig"] is True
    pods = json.loads(
        target.kubectl(
            "get", "pods", "-n", target.namespace, "-l", "app.kubernetes.io/instance=sparkrun", "-o", "json"
        )
    )["items"]
    components = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
    assert components == ["gateway", "operator", "operator", "shim"], components
    for pod in pods:
        ready = [c["status"] for c in pod["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == ["True"], pod["status"]
        node = json.loads(target.kubectl("get", "node", pod["spec"]["nodeName"], "-o", "json"))
        assert node["metadata"]["labels"].get("sparkrun.dev/testbed-runtime") == "process"
    # the demo's own addition to the testbed values reached the operator
    (operator_deployment,) = json.loads(
        target.kubectl(
            "get",
            "deployments",
            "-n",
            target.namespace,
            "-l",
            "app.kubernetes.io/component=operator",
            "-o",
            "json",
        )
    )["items"]
    args = operator_deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--cache-mount-path={endpoints['model_cache']['mount_path']}" in args


def _get(target: Target, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        target.kubectl("get", "-n", target.namespace, kind, name, "-o", "json")
    )
    return found


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def test_demo_caches_a_model_and_serves_it_from_the_cache(target: Target) -> None:
    output, endpoints = _local(target)
    cache_step = endpoints["model_cache"]
    if cache_step["skipped"]:
        reason = f"the demo skipped its ModelCache step: {cache_step['skipped']}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    name, workload, hub = cache_step["name"], cache_step["workload"], endpoints["hub_url"]
    phases = re.search(r"phases seen: (.+)", output)
    assert phases is not None, output[-4000:]
    seen = phases.group(1).split(" -> ")
    assert seen[0] == "Pending", seen
    assert seen[-1] == "Ready", seen
    assert "Downloading" in seen, seen  # the Hub paces the blob so the phase shows

    # the cache: Ready, at the commit the Hub says the tag points to, with every file of it
    revision = httpx.get(
        f"{hub}/api/models/{cache_step['repo']}/revision/{cache_step['revision']}",
        params={"blobs": "true"},
        timeout=10,
    ).json()
    cache = _get(target, "modelcache", name)
    status = cache["status"]
    assert _ready(cache), status
    assert status["phase"] == "Ready"
    assert COMMIT.fullmatch(status["resolvedRevision"]), status
    assert status["resolvedRevision"] == revision["sha"]
    assert status["manifest"] == {
        "files": len(revision["siblings"]),
        "totalBytes": sum(s["size"] for s in revision["siblings"]),
    }
    assert status["manifest"]["totalBytes"] > 2**20  # the LFS blob came along
    assert workload in status["claims"]
    claim = status["claimName"]
    assert _get(target, "pvc", claim)["status"]["phase"] == "Bound"

    # the workload: Ready, every pod mounts the cache's claim read-only, offline at the commit
    iw = _get(target, "iw", workload)
    assert _ready(iw), iw.get("status")
    assert iw["spec"]["model"]["cacheRef"] == {"name": name}
    pods = json.loads(
        target.kubectl(
            "get", "pods", "-n", target.namespace, "-l", f"{keys.LABEL_WORKLOAD}={workload}", "-o", "json"
        )
    )["items"]
    assert pods, f"no pods of {workload}"
    for pod in pods:
        assert pod["status"]["phase"] == "Running", pod["status"]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        cached = [
            n for n, v in volumes.items() if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
        ]
        assert cached, f"pod {pod['metadata']['name']} does not mount claim {claim}: {list(volumes)}"
        engine = pod["spec"]["containers"][0]
        mount = next(m for m in engine["volumeMounts"] if m["name"] in cached)
        assert mount["mountPath"] == cache_step["mount_path"]
        assert mount.get("readOnly") is True
        env = {e["name"]: e.get("value") for e in engine.get("env") or []}
        assert env.get("HF_HUB_OFFLINE") == "1"
        assert env.get("HF_HOME") == cache_step["mount_path"]
        assert engine["args"][engine["args"].index("--revision") + 1] == revision["sha"]
    assert f"{cache_step['served_name']} (from ModelCache {name}) answered" in output
