"""Single pods on process nodes run for real: status, init order, probes, restarts, deletion, logs.

Every pod is scheduled by kube-scheduler onto a process node (node selector plus the process
taint's toleration) and run by the testbed's process runtime; assertions read what the runtime
wrote to the API, the processes on this machine, and ``kubectl logs`` through kube-apiserver.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.process.helpers import (
    ENGINE_IMAGE,
    condition,
    container,
    marked_pids,
    phase,
    pod,
    pod_spec,
    ready,
    routable_pod_ip,
    shell,
    wait_for,
    wait_pod,
)

pytestmark = pytest.mark.testbed


def test_a_pod_runs_its_commands_and_reports_exit_codes_like_a_kubelet(
    kube: KubeApi, namespace: str, process_nodes: list[str], pod_network: str
) -> None:
    spec = pod_spec([shell("ok", "echo fine"), shell("bad", "echo broken >&2; exit 3")])
    kube.create(pod("exits", spec), namespace=namespace)
    kube.create(pod("succeeds", pod_spec([shell("only", "true")])), namespace=namespace)

    failed = wait_pod(kube, namespace, "exits", lambda p: phase(p) == "Failed", what="pod exits Failed")
    succeeded = wait_pod(kube, namespace, "succeeds", lambda p: phase(p) == "Succeeded")

    status = failed["status"]
    ok, bad = container(failed, "ok")["state"]["terminated"], container(failed, "bad")["state"]["terminated"]
    assert (ok["exitCode"], ok["reason"]) == (0, "Completed")
    assert (bad["exitCode"], bad["reason"]) == (3, "Error")
    assert bad["startedAt"] <= bad["finishedAt"]
    assert container(failed, "bad")["containerID"].startswith("process://")
    assert container(failed, "bad")["ready"] is False
    assert condition(failed, "Ready")["reason"] == "PodCompleted"
    assert condition(failed, "Initialized")["status"] == "True"
    assert condition(failed, "PodScheduled")["status"] == "True"  # the scheduler's, kept
    assert status["startTime"]
    assert status["podIPs"] == [{"ip": status["podIP"]}]
    node = kube.get("v1", "Node", failed["spec"]["nodeName"])
    assert node is not None
    assert failed["spec"]["nodeName"] in process_nodes
    assert status["hostIP"] == next(
        a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
    )
    if pod_network == "netns":
        assert routable_pod_ip(status["podIP"]), status["podIP"]
        assert status["podIP"] != succeeded["status"]["podIP"]
    assert container(succeeded, "only")["state"]["terminated"]["exitCode"] == 0


def test_a_host_network_pod_shares_its_nodes_address(
    kube: KubeApi, kubectl: Any, namespace: str, process_nodes: list[str]
) -> None:
    spec = pod_spec(
        [
            shell(
                "c",
                'echo "ip=$MY_IP"',
                env=[{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            )
        ]
    )
    spec["hostNetwork"] = True
    kube.create(pod("on-host", spec), namespace=namespace)
    done = wait_pod(kube, namespace, "on-host", lambda p: phase(p) == "Succeeded")
    assert done["status"]["podIP"] == done["status"]["hostIP"]
    assert kubectl("logs", "-n", namespace, "on-host").stdout == f"ip={done['status']['hostIP']}\n"


def test_init_containers_run_one_after_the_other_before_the_containers(
    kube: KubeApi, namespace: str, tmp_path: Path, process_nodes: list[str]
) -> None:
    order = tmp_path / "order"
    env = [{"name": "OUT", "value": str(order)}]
    spec = pod_spec(
        [shell("main", 'echo main >> "$OUT"', env=env)],
        init=[
            shell("first", 'sleep 0.5; echo first >> "$OUT"', env=env),
            shell("second", 'echo second >> "$OUT"', env=env),
        ],
    )
    kube.create(pod("ordered", spec), namespace=namespace)
    done = wait_pod(kube, namespace, "ordered", lambda p: phase(p) == "Succeeded")
    assert order.read_text() == "first\nsecond\nmain\n"
    first = container(done, "first", init=True)["state"]["terminated"]
    second = container(done, "second", init=True)["state"]["terminated"]
    main = container(done, "main")["state"]["terminated"]
    assert first["finishedAt"] <= second["startedAt"] <= second["finishedAt"] <= main["startedAt"]

    never = tmp_path / "never"
    failing = pod_spec(
        [shell("main", f"echo ran > {never}")],
        init=[shell("gate", "exit 7")],
    )
    kube.create(pod("blocked", failing), namespace=namespace)
    blocked = wait_pod(kube, namespace, "blocked", lambda p: phase(p) == "Failed")
    assert container(blocked, "gate", init=True)["state"]["terminated"]["exitCode"] == 7
    assert container(blocked, "main")["state"]["waiting"]["reason"] == "PodInitializing"
    assert condition(blocked, "Initialized")["status"] == "False"
    assert not never.exists()


def test_a_sidecar_runs_beside_the_containers_and_stops_after_them(
    kube: KubeApi, namespace: str, tmp_path: Path, process_nodes: list[str]
) -> None:
    seen = tmp_path / "seen"
    sidecar = shell(
        "helper",
        f"echo up > {tmp_path / 'helper'}; exec sleep 600",
        restartPolicy="Always",
        startupProbe={"exec": {"command": ["test", "-f", str(tmp_path / "helper")]}, "periodSeconds": 1},
    )
    main = shell("main", f"cat {tmp_path / 'helper'} > {seen}; sleep 1")
    kube.create(pod("with-sidecar", pod_spec([main], init=[sidecar])), namespace=namespace)
    done = wait_pod(kube, namespace, "with-sidecar", lambda p: phase(p) == "Succeeded", timeout=60)
    assert seen.read_text() == "up\n"  # the sidecar had started before the main container
    helper = container(done, "helper", init=True)
    assert "terminated" in helper["state"]
    assert helper["restartCount"] == 0  # stopped with the pod, not restarted
    assert container(done, "main")["state"]["terminated"]["exitCode"] == 0


def test_probes_drive_readiness(kube: KubeApi, namespace: str, process_nodes: list[str]) -> None:
    engine = {
        "name": "engine",
        "image": ENGINE_IMAGE,
        "args": ["org/tiny", "--served-model-name", "tiny", "--port", "8000"],
        "env": [{"name": "SPARKRUN_ENGINE_LOAD_SECONDS", "value": "5"}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "startupProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1, "failureThreshold": 30},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    flag = shell(
        "flag",
        "sleep 2; touch ready-flag; exec sleep 600",
        readinessProbe={"exec": {"command": ["test", "-f", "ready-flag"]}, "periodSeconds": 1},
    )
    kube.create(pod("probed", pod_spec([engine, flag], restart="Always")), namespace=namespace)

    started = wait_pod(
        kube,
        namespace,
        "probed",
        lambda p: container(p, "engine").get("started") is True,
        what="startup probe",
    )
    # The engine listens at once but answers /health 503 while it "loads" (5 s).
    assert not ready(started)
    assert container(started, "engine")["ready"] is False
    up = wait_pod(kube, namespace, "probed", ready, timeout=60, what="pod Ready")
    assert container(up, "engine")["ready"]
    assert container(up, "flag")["ready"]
    ip = up["status"]["podIP"]
    with httpx.Client(trust_env=False, timeout=5) as client:
        assert client.get(f"http://{ip}:8000/health").status_code == 200
    became_ready = condition(up, "Ready")["lastTransitionTime"]
    assert became_ready >= container(up, "engine")["state"]["running"]["startedAt"]


def test_a_failing_liveness_probe_restarts_the_container(
    kube: KubeApi, namespace: str, process_nodes: list[str]
) -> None:
    spec = pod_spec(
        [
            shell(
                "doomed",
                "exec sleep 600",
                livenessProbe={"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2},
            )
        ],
        restart="Always",
        grace=1,
    )
    kube.create(pod("unlive", spec), namespace=namespace)
    restarted = wait_pod(
        kube,
        namespace,
        "unlive",
        lambda p: container(p, "doomed").get("restartCount", 0) >= 2,
        timeout=90,
        what="two liveness restarts",
    )
    last = container(restarted, "doomed")["lastState"]["terminated"]
    assert last["exitCode"] in (137, 143)  # killed: SIGTERM, or SIGKILL after the grace period
    assert phase(restarted) == "Running"
    events = [
        e
        for e in kube.list_items("v1", "Event", namespace=namespace)
        if e["involvedObject"]["name"] == "unlive"
    ]
    reasons = {e["reason"] for e in events}
    assert {"Unhealthy", "Killing", "Started"} <= reasons
    unhealthy = next(e for e in events if e["reason"] == "Unhealthy")
    assert unhealthy["message"].startswith("Liveness probe failed: dial tcp")
    assert unhealthy["involvedObject"]["fieldPath"] == "spec.containers{doomed}"


def test_restart_policies_restart_failed_containers_with_back_off(
    kube: KubeApi, kubectl: Any, namespace: str, process_nodes: list[str]
) -> None:
    kube.create(
        pod("crashy", pod_spec([shell("c", 'echo "run at $(date +%s)"; exit 1')], restart="OnFailure")),
        namespace=namespace,
    )
    kube.create(pod("oneshot", pod_spec([shell("c", "exit 0")], restart="OnFailure")), namespace=namespace)
    looping = wait_pod(
        kube,
        namespace,
        "crashy",
        lambda p: container(p, "c").get("restartCount", 0) >= 3,
        timeout=60,
        what="three restarts",
    )
    status = container(looping, "c")
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert phase(looping) == "Running"  # OnFailure: a failed container is about to restart
    seen_backoff = wait_pod(
        kube,
        namespace,
        "crashy",
        lambda p: container(p, "c").get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff",
        timeout=60,
        what="CrashLoopBackOff",
    )
    assert "back-off" in container(seen_backoff, "c")["state"]["waiting"]["message"]
    assert "run at" in kubectl("logs", "-n", namespace, "crashy", "--previous").stdout
    finished = wait_pod(kube, namespace, "oneshot", lambda p: phase(p) == "Succeeded")
    assert container(finished, "c")["restartCount"] == 0


def test_an_image_without_a_local_command_waits_with_image_not_mapped(
    kube: KubeApi, namespace: str, process_nodes: list[str]
) -> None:
    spec = pod_spec([{"name": "x", "image": "registry.invalid/unknown:1", "command": ["serve"]}])
    kube.create(pod("unmapped", spec), namespace=namespace)
    waiting = wait_pod(
        kube,
        namespace,
        "unmapped",
        lambda p: container(p, "x").get("state", {}).get("waiting", {}).get("reason") == "ImageNotMapped",
    )
    assert "registry.invalid/unknown:1" in container(waiting, "x")["state"]["waiting"]["message"]
    time.sleep(1.5)
    still = kube.get("v1", "Pod", "unmapped", namespace=namespace)
    assert still is not None
    assert phase(still) == "Pending"
    kube.delete("v1", "Pod", "unmapped", namespace=namespace)
    wait_for(
        lambda: kube.get("v1", "Pod", "unmapped", namespace=namespace) is None,
        timeout=30,
        what="the unmapped pod to be deleted",
    )


def test_deleting_a_pod_terminates_gracefully_and_leaves_no_process(
    kube: KubeApi, namespace: str, tmp_path: Path, process_nodes: list[str], pod_network: str
) -> None:
    mark = secrets.token_hex(8)
    term = tmp_path / "term"
    graceful = shell("graceful", f'trap "echo TERM > {term}; exit 0" TERM; while true; do sleep 0.1; done')
    # `setsid` puts the grandchild in a session and process group of its own: only the pod's
    # network namespace still ties it to the pod.
    stubborn = shell("stubborn", "setsid sleep 600 & trap '' TERM; sleep 600 & wait")
    kube.create(pod("doomed", pod_spec([graceful, stubborn], mark=mark, grace=2)), namespace=namespace)
    wait_pod(kube, namespace, "doomed", ready, what="pod Ready")
    # Two shells, two sleeps (one of them in a session of its own), and the loop's short sleeps.
    wait_for(lambda: len(marked_pids(mark)) >= 4, timeout=10, what="the pod's processes")

    began = time.monotonic()
    kube.delete("v1", "Pod", "doomed", namespace=namespace)
    wait_for(
        lambda: kube.get("v1", "Pod", "doomed", namespace=namespace) is None, timeout=30, what="pod gone"
    )
    took = time.monotonic() - began
    assert term.read_text() == "TERM\n"  # SIGTERM first
    assert took >= 1.5  # the stubborn container ignored SIGTERM: it got the 2 s grace period
    if pod_network == "netns":
        assert marked_pids(mark) == []
    else:
        leftover = marked_pids(mark)
        # Loopback mode finds processes by process group only; a setsid escapee survives.
        assert all("sleep" in Path(f"/proc/{pid}/cmdline").read_bytes().decode() for pid in leftover)
        for pid in leftover:
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_kubectl_logs_reads_and_follows_container_output(
    kube: KubeApi, kubectl: Any, namespace: str, process_nodes: list[str]
) -> None:
    script = "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done"
    kube.create(pod("talker", pod_spec([shell("talk", script)])), namespace=namespace)
    wait_pod(kube, namespace, "talker", lambda p: "running" in container(p, "talk").get("state", {}))
    follow = subprocess.run(
        [kubectl.exe, "logs", "-f", "-n", namespace, "talker"],
        capture_output=True,
        text=True,
        env=kubectl.env,
        timeout=30,
        check=True,
    )
    # `-f` returns once the container exits, with everything it wrote.
    assert follow.stdout == "".join(f"line {i}\n" for i in range(1, 6))
    wait_pod(kube, namespace, "talker", lambda p: phase(p) == "Succeeded")
    assert kubectl("logs", "-n", namespace, "talker", "--tail=2").stdout == "line 4\nline 5\n"
    refused = kubectl("logs", "-n", namespace, "talker", "-c", "nope", check=False)
    assert refused.returncode != 0
    assert "nope" in refused.stderr
