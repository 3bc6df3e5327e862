"""The reference endpoint picker (Gateway API Inference Extension v1.5.0, ``cmd/epp``) on the
testbed, pointed at an InferencePool of engine pods on process nodes.

The picker is the real binary (``hack/epp-bin.sh``), with the plugin configuration the operator
deploys (``render/inferencepool.PICKER_CONFIG``). It discovers the pool's pods through
kube-apiserver and scrapes each one's ``/metrics`` (the engine stand-in's vLLM gauges); its own
``/metrics`` reports per pool how many pods have fresh metrics and their average queue, running
requests and KV-cache use, which is what these tests read. First the picker runs as a host
process (admin kubeconfig); then as a pod on a process node, as the operator runs it: its image
maps to the binary, it uses in-cluster config with a ServiceAccount that may only read pods and
pools, and the gRPC readiness probe (``grpc.health.v1``) decides its readiness. Picking over
ext-proc is ``tests/inferencepool``'s. A missing binary skips these tests, and fails them under
``CI=true`` after an attempt to build it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_operator.render.inferencepool import PICKER_CONFIG
from sparkrun_testbed import epp, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.ports import free_ports
from sparkrun_testbed.process_probes import grpc_health_check
from sparkrun_testbed.topology import Topology
from tests.gobinary import picker
from tests.process.helpers import ENGINE_IMAGE, pod, pod_spec, ready, wait_for, wait_pod

pytestmark = pytest.mark.testbed

POOL_API = "inference.networking.k8s.io/v1"
MODEL = "tiny"
ENGINE_PORT = 8000


@pytest.fixture(scope="module")
def process_nodes(testbed: plane.Testbed) -> list[str]:
    """The session testbed's process nodes, where the engine (and picker) pods run."""
    names = Topology.from_dict(testbed.state.topology).process_node_names()
    assert names, "the session testbed has no process nodes (tests/conftest.py SESSION_TOPOLOGY)"
    return names


@pytest.fixture(scope="module")
def picker_binary(testbed: plane.Testbed) -> Path:
    return picker(testbed)


def engine_pod(name: str, pool: str, *, busy: bool = False) -> dict[str, Any]:
    """A one-rank engine pod labelled into ``pool``; ``busy``: one request at a time, slowly."""
    args = [f"org/{MODEL}", "--served-model-name", MODEL, "--port", str(ENGINE_PORT)]
    env = []
    if busy:
        args += ["--max-num-seqs", "1", "--max-model-len", "256"]
        env = [{"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": "30"}]
    container = {
        "name": "vllm",
        "image": ENGINE_IMAGE,
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": ENGINE_PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    return pod(name, pod_spec([container], restart="Always"), labels={"app": pool})


def inference_pool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": POOL_API,
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "targetPorts": [{"number": ENGINE_PORT}],
            # Required by the v1.5 CRD; the gateway's side of it is not exercised here.
            "endpointPickerRef": {"kind": "Service", "name": f"{name}-epp", "port": {"number": 9002}},
        },
    }


def picker_args(pool: str, namespace: str) -> list[str]:
    """The flags the operator renders for a Managed picker (docs/install.md)."""
    return [
        *("--pool-name", pool, "--pool-namespace", namespace),
        *("--pool-group", "inference.networking.k8s.io"),
        *("--config-text", PICKER_CONFIG),
        "--tracing=false",
        "--metrics-endpoint-auth=false",
        *("--zap-encoder", "json"),
    ]


def pool_gauges(metrics_url: str, pool: str) -> dict[str, float]:
    """The picker's per-pool gauges (``inference_pool_*{name=pool}``), by short name."""
    try:
        text = httpx.get(metrics_url, timeout=2, trust_env=False).text
    except httpx.TransportError:
        return {}
    found = {}
    for line in text.splitlines():
        if line.startswith("inference_pool_") and f'name="{pool}"' in line:
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            found[name.removeprefix("inference_pool_")] = float(value)
    return found


def start_pool(kube: KubeApi, namespace: str, pool: str) -> list[dict[str, Any]]:
    """The pool and its two engine pods (``<pool>-busy`` and ``<pool>-idle``), Ready."""
    kube.create(inference_pool(pool), namespace=namespace)
    for name, busy in ((f"{pool}-busy", True), (f"{pool}-idle", False)):
        kube.create(engine_pod(name, pool, busy=busy), namespace=namespace)
    return [
        wait_pod(kube, namespace, name, ready, timeout=90, what=f"engine pod {name} Ready")
        for name in (f"{pool}-busy", f"{pool}-idle")
    ]


def load(stack: ExitStack, pod_ip: str, requests: int) -> None:
    """Send ``requests`` completions to an engine and keep the connections open (never read)."""
    body = json.dumps({"model": MODEL, "prompt": "one two three four five six seven", "max_tokens": 8})
    for _ in range(requests):
        sock = stack.enter_context(closing(socket.create_connection((pod_ip, ENGINE_PORT), timeout=5)))
        sock.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: {pod_ip}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )


def discovers_and_scrapes(metrics_url: str, pool: str, busy_ip: str) -> dict[str, float]:
    """Both pods found with fresh metrics; then the busy one's queue shows in the pool averages."""
    idle = wait_for(
        lambda: (g := pool_gauges(metrics_url, pool)).get("ready_pods") == 2 and g,
        timeout=60,
        what="the picker's ready_pods == 2 (both engine pods discovered and scraped)",
    )
    assert idle["average_queue_size"] == 0
    assert idle["average_running_requests"] == 0
    with ExitStack() as stack:
        load(stack, busy_ip, 3)  # one runs (max-num-seqs 1), two wait
        # Averages over the two pods: (1 + 0) / 2 running, (2 + 0) / 2 waiting, KV held by one.
        busy = wait_for(
            lambda: (
                (g := pool_gauges(metrics_url, pool)).get("average_running_requests") == 0.5
                and g.get("average_queue_size") == 1.0
                and g
            ),
            timeout=30,
            what="the busy pod's running and waiting requests in the picker's pool averages",
        )
    assert busy["ready_pods"] == 2
    assert 0 < busy["average_kv_cache_utilization"] < 0.5
    return busy


def process_usage(pid: int) -> tuple[int, float]:
    """(resident set in bytes, CPU seconds so far) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


@pytest.fixture
def host_picker(
    picker_binary: Path, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    grpc_port, health_port, metrics_port = free_ports(3)
    ports = {"grpc": grpc_port, "health": health_port, "metrics": metrics_port}
    log = tmp_path / "epp.log"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(kubeconfig),
        "NAMESPACE": namespace,
        "POD_NAME": "host-picker",
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                str(picker_binary),
                *picker_args("pool", namespace),
                *("--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port)),
                *("--metrics-port", str(metrics_port)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        yield proc, ports, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_the_picker_discovers_the_pools_pods_and_reads_their_load(
    kube: KubeApi,
    namespace: str,
    process_nodes: list[str],
    host_picker: tuple[subprocess.Popen[bytes], dict[str, int], Path],
) -> None:
    proc, ports, log = host_picker
    busy_pod, _ = start_pool(kube, namespace, "pool")

    def serving() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the picker exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        ok, _ = asyncio.run(grpc_health_check("127.0.0.1", ports["health"], epp.HEALTH_SERVICE, limit=1))
        return ok

    wait_for(serving, timeout=60, what="the picker's gRPC health SERVING", interval=0.5)
    metrics_url = f"http://127.0.0.1:{ports['metrics']}/metrics"
    discovers_and_scrapes(metrics_url, "pool", busy_pod["status"]["podIP"])

    # Its cost with one pool of two pods, idle (docs/testbed.md reports it; the operator's
    # default memory limit for a picker is 512Mi).
    time.sleep(2)
    rss, cpu_before = process_usage(proc.pid)
    time.sleep(10)
    _, cpu_after = process_usage(proc.pid)
    print(f"\nepp idle: RSS {rss / 2**20:.1f} MiB, CPU {(cpu_after - cpu_before) / 10 * 1000:.0f} millicores")
    assert rss < 512 * 2**20
    assert proc.poll() is None, log.read_text()[-4000:]
    # Every gauge the picker reads parses; the one it misses is the LoRA gauge, which vLLM (and
    # the stand-in) exports only with --enable-lora: one log line per pod, as with real vLLM.
    extract_errors = [
        entry["error"]
        for line in log.read_text().splitlines()
        if line.startswith("{") and (entry := json.loads(line)).get("msg") == "extract failed"
    ]
    assert extract_errors == ['metric family "vllm:lora_requests_info" not found'] * 2


def picker_pod(name: str, pool: str, namespace: str, account: str) -> dict[str, Any]:
    """The picker as the operator deploys it: its image, args, ports and gRPC probes."""
    probe = {"grpc": {"port": epp.HEALTH_PORT, "service": epp.HEALTH_SERVICE}, "periodSeconds": 2}
    container = {
        "name": "epp",
        "image": f"{epp.IMAGE}:{epp.VERSION}",
        "args": picker_args(pool, namespace),
        "env": [
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [
            {"name": "grpc", "containerPort": epp.GRPC_PORT},
            {"name": "grpc-health", "containerPort": epp.HEALTH_PORT},
            {"name": "metrics", "containerPort": epp.METRICS_PORT},
        ],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "initialDelaySeconds": 5, "periodSeconds": 10},
    }
    spec = pod_spec([container], restart="Always")
    spec["serviceAccountName"] = account
    return pod(name, spec, labels={"app": f"{pool}-epp"})


def picker_rbac(namespace: str, account: str) -> list[dict[str, Any]]:
    """What a picker may do: read pods and pools (and the optional objective/rewrite kinds)."""
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": read},
                {
                    "apiGroups": ["inference.networking.k8s.io"],
                    "resources": ["inferencepools"],
                    "verbs": read,
                },
                {
                    "apiGroups": ["inference.networking.x-k8s.io"],
                    "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                    "verbs": read,
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        },
    ]


def test_the_picker_runs_as_a_pod_with_grpc_probes_and_in_cluster_config(
    kube: KubeApi, namespace: str, process_nodes: list[str], picker_binary: Path
) -> None:
    busy_pod, _ = start_pool(kube, namespace, "pods")
    for manifest in picker_rbac(namespace, "pods-epp"):
        kube.create(manifest, namespace=namespace)
    kube.create(picker_pod("pods-epp", "pods", namespace, "pods-epp"), namespace=namespace)
    # Ready only through its gRPC readiness probe, which needs the picker serving.
    up = wait_pod(kube, namespace, "pods-epp", ready, timeout=90, what="the picker pod Ready (gRPC probe)")
    metrics_url = f"http://{up['status']['podIP']}:{epp.METRICS_PORT}/metrics"
    discovers_and_scrapes(metrics_url, "pods", busy_pod["status"]["podIP"])
    statuses = up["status"]["containerStatuses"]
    assert [(s["name"], s["ready"], s["restartCount"]) for s in statuses] == [("epp", True, 0)]
