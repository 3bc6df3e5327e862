"""The reference endpoint picker picks our pods (issue 30, item 2), end to end.

On the session testbed with the InferencePool CRD (v1, Gateway API Inference Extension v1.5.0)
installed, the real operator keeps a pool and a Managed picker for an InferenceWorkload of two
replicas on process nodes; the picker (the real ``cmd/epp`` binary, run by the process runtime
for its image) discovers the two leader pods through the apiserver and scrapes their
``/metrics`` (the engine stand-in's vLLM gauges). Then a real gRPC client speaks ext-proc to it
as a gateway would (``tests/inferencepool/extproc.py``) and shows:

(a) its answers name the workload's leader pods, ``IP:8000``, both of them over a few picks;
(b) its own ``/metrics`` counts both pods with fresh metrics and, once one pod queues requests,
    that queue;
(c) with one pod busy (``--max-num-seqs 1`` and slow tokens, three held requests: one running,
    two waiting) every pick goes to the other pod, and the other way round.

Why every pick and not most: the operator's picker profile scores ``2 x queue + 2 x KV-cache +
3 x prefix`` and takes the highest score (ties at random). Queue: ``(max - q) / (max - min)``,
so 1 for the idle pod and 0 for the busy one; KV-cache: ``1 - usage``, 1 for the idle pod (no
running request) and at most 1 for the busy one; prefix: 0 for both, since every probe's prompt
is new. So the idle pod scores 4 and the busy one at most 2: no tie, no randomness.

The workload's name differs from its model and served name, and it lives in its own namespace:
the pool is the workload's, the model name is only in the request body.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_operator.render.inferencepool import picker_selector
from sparkrun_testbed import epp, topology
from sparkrun_testbed.kubeapi import KubeApi
from tests.inferencepool import extproc
from tests.operator.conftest import API, OperatorProcess, condition, wait_condition, workload
from tests.process.helpers import TOLERATION, ready, wait_for

pytestmark = pytest.mark.testbed

POOL_API = "inference.networking.k8s.io/v1"
WORKLOAD = "team-chat"
SERVED = "assistant"
ENGINE_PORT = 8000
TOKEN_SECONDS = 20  # a held request (max_tokens 32) outlives the test; the probes never reach an engine
PICKS = 10
ON_PROCESS_NODES: dict[str, Any] = {
    "nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"},
    "tolerations": [TOLERATION],
}
READ = ["get", "list", "watch"]


def _cluster_role(name: str) -> dict[str, Any]:
    """The chart's picker ClusterRole (``<release>-endpoint-picker``)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": READ},
            {
                "apiGroups": ["inference.networking.x-k8s.io"],
                "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                "verbs": READ,
            },
        ],
    }


@pytest.fixture
def picker_role(kube: KubeApi) -> Iterator[str]:
    name = f"sparkrun-endpoint-picker-{secrets.token_hex(3)}"
    kube.apply(_cluster_role(name))
    yield name
    kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", name)


def _pool_gauges(metrics_url: str) -> dict[str, float]:
    """The picker's gauges of our pool (``inference_pool_*{name=WORKLOAD}``), by short name."""
    try:
        response = httpx.get(metrics_url, timeout=3, trust_env=False)
    except httpx.TransportError:
        return {}
    found: dict[str, float] = {}
    for line in response.text[: 1 << 20].splitlines():
        if line.startswith("inference_pool_") and f'name="{WORKLOAD}"' in line:
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            found[name.removeprefix("inference_pool_")] = float(value)
    return found


def _hold(stack: ExitStack, pod_ip: str, requests: int) -> None:
    """Send ``requests`` streaming completions to one engine and keep them open (never read)."""
    for n in range(requests):
        body = json.dumps(
            {"model": SERVED, "prompt": f"hold {n} one two three", "max_tokens": 32, "stream": True}
        )
        sock = stack.enter_context(closing(socket.create_connection((pod_ip, ENGINE_PORT), timeout=5)))
        sock.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: {pod_ip}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )


def _picks(target: str, count: int) -> list[str]:
    """``count`` picks for new prompts (no prefix in common with anything before)."""
    found = []
    for _ in range(count):
        prompt = f"{secrets.token_hex(12)} tell me about pools"
        answer = extproc.pick(target, extproc.chat(SERVED, prompt), timeout=10)
        assert answer.status is None, f"the picker refused: {answer.status} {answer.detail}"
        assert answer.endpoint is not None, answer
        assert answer.endpoint == answer.metadata_endpoint, answer
        found.append(answer.endpoint)
    return found


def _usage(pid: int) -> tuple[int, float]:
    """(resident set in bytes, CPU seconds so far) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _picker_pid(pod_name: str) -> int:
    """The host process of the picker pod (its environment names the pod: env POD_NAME)."""
    needle = f"POD_NAME={pod_name}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            if argv0.endswith(b"/epp") and needle in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
    raise AssertionError(f"no epp process of pod {pod_name} on this machine")


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(
        ref.get("uid") == uid and ref.get("controller") for ref in obj["metadata"].get("ownerReferences", ())
    )


def test_the_reference_picker_picks_the_less_loaded_pod_of_our_pool(
    kube: KubeApi,
    namespace: str,
    picker_binary: Path,
    picker_role: str,
    operator_factory: Callable[..., OperatorProcess],
    netns_network: None,
) -> None:
    settings = {
        "nodeSelector": ON_PROCESS_NODES["nodeSelector"],
        "tolerations": [TOLERATION],
        "clusterRole": picker_role,
    }
    operator_factory(namespace, "--inference-pools", "auto", "--endpoint-picker", json.dumps(settings))
    kube.apply(
        workload(
            WORKLOAD,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": SERVED},
            replicas=2,
            engine={
                "args": ["--max-num-seqs", "1"],
                "env": [{"name": "SPARKRUN_ENGINE_TOKEN_SECONDS", "value": str(TOKEN_SECONDS)}],
            },
            scheduling=ON_PROCESS_NODES,
        )
    )
    obj = wait_condition(
        kube, namespace, WORKLOAD, "Ready", timeout=180, extra=lambda o: o["status"].get("readyReplicas") == 2
    )
    uid = obj["metadata"]["uid"]

    # The pool: the workload's, selecting its leader pods on the engine port, naming its picker.
    pool = wait_for(
        lambda: kube.get(POOL_API, "InferencePool", WORKLOAD, namespace=namespace),
        timeout=60,
        what="the workload's InferencePool",
        interval=0.5,
    )
    assert _owned_by(pool, uid), pool["metadata"]
    selector = pool["spec"]["selector"]["matchLabels"]
    assert pool["spec"]["targetPorts"] == [{"number": ENGINE_PORT}]
    assert pool["spec"]["endpointPickerRef"]["name"] == f"{WORKLOAD}-epp"
    leaders = kube.list_items(
        "v1", "Pod", namespace=namespace, label_selector=",".join(f"{k}={v}" for k, v in selector.items())
    )
    assert len(leaders) == 2, leaders
    assert all(ready(p) for p in leaders), leaders
    endpoints = sorted(f"{p['status']['podIP']}:{ENGINE_PORT}" for p in leaders)

    # The Managed picker: its pod Ready (gRPC readiness probe) on a process node.
    def picker_pod() -> dict[str, Any] | None:
        labels = ",".join(f"{k}={v}" for k, v in picker_selector(WORKLOAD).items())
        pods = kube.list_items("v1", "Pod", namespace=namespace, label_selector=labels)
        return next((p for p in pods if ready(p)), None)

    pod = wait_for(picker_pod, timeout=120, what="the managed picker's pod Ready", interval=1)
    picker_ip = pod["status"]["podIP"]
    metrics_url = f"http://{picker_ip}:{epp.METRICS_PORT}/metrics"
    obj = wait_condition(
        kube,
        namespace,
        WORKLOAD,
        "PoolAccepted",
        "Unknown",
        reason="NoParent",
        timeout=60,
        extra=lambda o: (
            ((o["status"].get("inferencePool") or {}).get("endpointPicker") or {}).get("ready") is True
        ),
    )

    # (b) both leader pods discovered, with fresh metrics (scraped)
    idle: dict[str, float] = wait_for(
        lambda: g if (g := _pool_gauges(metrics_url)).get("ready_pods") == 2 else None,
        timeout=60,
        what="the picker's ready_pods == 2 (both leader pods discovered and scraped)",
        interval=0.5,
    )
    assert idle["average_queue_size"] == 0, idle

    with extproc.TlsRelay(picker_ip, epp.GRPC_PORT) as target:
        # (a) its answers name our leader pods; idle, ties go either way: both show up
        seen: set[str] = set()
        for _ in range(20):
            seen.update(_picks(target, 1))
            if len(seen) == 2:
                break
        assert sorted(seen) == endpoints

        pid = _picker_pid(pod["metadata"]["name"])
        rss_idle, cpu_0 = _usage(pid)
        time.sleep(5)
        _, cpu_1 = _usage(pid)
        loaded_since = time.monotonic()

        for busy, other in ((leaders[0], leaders[1]), (leaders[1], leaders[0])):
            busy_ip, other_end = busy["status"]["podIP"], f"{other['status']['podIP']}:{ENGINE_PORT}"
            with ExitStack() as held:
                _hold(held, busy_ip, 3)  # one runs (max-num-seqs 1), two wait
                # (b) the queue reached the picker: (2 + 0) / 2 waiting on average
                wait_for(
                    lambda: _pool_gauges(metrics_url).get("average_queue_size") == 1.0,
                    timeout=60,
                    what=f"the busy pod's two waiting requests in the picker's pool average ({busy_ip})",
                    interval=0.5,
                )
                started = time.monotonic()
                picked = _picks(target, PICKS)
                pick_seconds = time.monotonic() - started
                # (c) every pick goes to the other pod (see the module's docstring)
                assert picked == [other_end] * PICKS, (busy_ip, picked)
            wait_for(
                lambda: _pool_gauges(metrics_url).get("average_queue_size") == 0,
                timeout=60,
                what="the queue gone once the held requests closed",
                interval=0.5,
            )
        rss, cpu_2 = _usage(pid)
        loaded = time.monotonic() - loaded_since
        print(
            f"\npicker {pod['metadata']['name']}: RSS idle {rss_idle / 2**20:.1f} MiB, after the picks "
            f"{rss / 2**20:.1f} MiB; CPU idle {(cpu_1 - cpu_0) / 5 * 1000:.0f} millicores, "
            f"{(cpu_2 - cpu_1) / loaded * 1000:.0f} millicores over {loaded:.0f} s of load and "
            f"{2 * PICKS} picks; {PICKS} picks in {pick_seconds:.2f} s"
        )
        assert rss < 512 * 2**20  # the operator's default memory limit for a picker
    ready_now = condition(kube.get(API, "InferenceWorkload", WORKLOAD, namespace=namespace), "Ready")
    assert ready_now is not None
    assert ready_now["status"] == "True", ready_now
