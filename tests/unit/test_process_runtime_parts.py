"""The process runtime's pure parts, without a testbed.

Covered: ``$(VAR)`` expansion and env sources (fieldRef, resourceFieldRef, ConfigMap/Secret refs,
envFrom), image -> command mapping (entrypoint/cmd semantics, ``vllm serve`` translation, refusals,
user rules), pod phase and conditions by the kubelet's rules, the restart back-off, hosts files
(names per namespace, in-place rewrites), log tails, address plans and the ``nc`` shim.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed import (
    netns,
    process_dns,
    process_env,
    process_images,
    process_nc,
    process_volumes,
)
from sparkrun_testbed.process_kubelet import tail_bytes
from sparkrun_testbed.process_pod import Backoff, exit_code_of, should_restart
from sparkrun_testbed.process_status import (
    ContainerState,
    PodView,
    conditions,
    phase,
    pod_status,
    stamp,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "grp-worker-0-1-abcde",
        "namespace": "ns1",
        "uid": "u-1",
        "labels": {"app": "x"},
        "annotations": {"batch.kubernetes.io/job-completion-index": "1"},
    },
    "spec": {"nodeName": "proc-0", "serviceAccountName": "default"},
    "status": {"podIP": "172.30.1.9", "podIPs": [{"ip": "172.30.1.9"}], "hostIP": "172.30.0.2"},
}


# -- env ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("$(A)-$(B)", "1-two"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("$((JOB_COMPLETION_INDEX+1))", "$((JOB_COMPLETION_INDEX+1))"),
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("cost $5", "cost $5"),
    ],
)
def test_expansion_follows_kubernetes_rules(raw: str, expected: str) -> None:
    assert process_env.expand(raw, {"A": "1", "B": "two"}) == expected


async def test_env_resolves_field_refs_configmaps_secrets_and_order() -> None:
    objects: dict[tuple[str, str], Mapping[str, Any]] = {
        ("ConfigMap", "cm"): {"data": {"K1": "v1", "bad key": "x"}},
        ("Secret", "sec"): {"data": {"PASS": base64.b64encode(b"s3cret").decode()}},
    }

    async def lookup(kind: str, name: str) -> Mapping[str, Any] | None:
        return objects.get((kind, name))

    container = {
        "name": "c",
        "resources": {"limits": {"memory": "2Gi", "cpu": "1500m"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {
                "name": "IDX",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            },
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {
                "name": "MEM_MI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "GPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASS"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            {"name": "URL", "value": "http://$(IP):8000/$(CM_K1)"},
            {"name": "CM_K1", "value": "overridden"},
        ],
    }
    env = await process_env.container_env(POD, container, lookup=lookup, allocatable={"nvidia.com/gpu": "8"})
    assert env["IDX"] == "1"
    assert env["IP"] == "172.30.1.9"
    assert env["NODE"] == "proc-0"
    assert env["APP"] == "x"
    assert env["MEM_MI"] == "2048"
    assert env["CPU"] == "2"  # rounded up, as the kubelet does
    assert env["GPUS"] == "8"  # unset limit: the node's allocatable
    assert env["PASS"] == "s3cret"
    assert "OPT" not in env
    assert env["URL"] == "http://172.30.1.9:8000/v1"
    assert env["CM_K1"] == "overridden"
    assert "CM_bad key" not in env


async def test_a_missing_required_configmap_is_a_config_error() -> None:
    async def lookup(kind: str, name: str) -> Mapping[str, Any] | None:
        return None

    container = {
        "name": "c",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
    }
    with pytest.raises(process_env.ConfigError, match='configmap "cm" not found'):
        await process_env.container_env(POD, container, lookup=lookup, allocatable={})


def test_command_and_args_expand_against_the_environment() -> None:
    container = {"command": ["sh", "-c"], "args": ["echo $(NAME) $$(NAME) $((X+1))"]}
    assert process_env.command_line(container, {"NAME": "n"})["args"] == ["echo n $(NAME) $((X+1))"]


def test_unsupported_field_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        process_env.field_value(POD, "spec.containers[0]")


@pytest.mark.parametrize(
    ("raw", "value"),
    [("500m", "0.5"), ("2Gi", str(2 * 2**30)), ("1k", "1000"), ("3", "3"), ("1.5", "1.5")],
)
def test_quantities(raw: str, value: str) -> None:
    assert process_env.parse_quantity(raw) == process_env.parse_quantity(value)


# -- images ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai"),
        ("docker.io/vllm/vllm-openai@sha256:abc", "vllm/vllm-openai"),
        ("docker.io/library/busybox:1.36", "busybox"),
        ("localhost:5000/sparkrun/operator:dev", "localhost:5000/sparkrun/operator"),
        ("ghcr.io/org/sparkrun-runtime", "ghcr.io/org/sparkrun-runtime"),
    ],
)
def test_repository_drops_tag_digest_and_docker_hub(image: str, repository: str) -> None:
    assert process_images.repository(image) == repository


def _path(tmp_path: Path) -> str:
    shims = tmp_path / "shims"
    process_images.write_shims(shims)
    return process_images.pod_path(shims)


def test_vllm_images_run_the_engine_stand_in(tmp_path: Path) -> None:
    path = _path(tmp_path)
    rules = process_images.DEFAULT_RULES
    by_entrypoint = process_images.resolve(
        {"image": "vllm/vllm-openai:v0.11.0", "args": ["m", "--port", "8000"]}, rules, path=path
    )
    assert isinstance(by_entrypoint, process_images.Launch)
    assert by_entrypoint.argv == (
        sys.executable,
        "-m",
        process_images.ENGINE_MODULE,
        "serve",
        "m",
        "--port",
        "8000",
    )
    by_command = process_images.resolve(
        {"image": "vllm/vllm-openai:latest", "command": ["vllm", "serve"], "args": ["m"]}, rules, path=path
    )
    assert isinstance(by_command, process_images.Launch)
    assert by_command.argv[1:] == ("-m", process_images.ENGINE_MODULE, "serve", "m")
    old_style = process_images.resolve(
        {
            "image": "vllm/vllm-openai:v0.5",
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--model", "m"],
        },
        rules,
        path=path,
    )
    assert isinstance(old_style, process_images.Launch)
    assert old_style.argv[3:] == ("serve", "--model", "m")
    shell = process_images.resolve(
        {"image": "vllm/vllm-openai:v1", "command": ["sh", "-c"], "args": ["exec vllm serve m --headless"]},
        rules,
        path=path,
    )
    assert isinstance(shell, process_images.Launch)
    assert Path(shell.argv[0]).name == "sh"
    assert shell.image_env["PYTHONUNBUFFERED"] == "1"


def test_entrypoint_cmd_and_args_combine_like_a_container_runtime(tmp_path: Path) -> None:
    path = _path(tmp_path)
    rules = (process_images.ImageRule("tool", entrypoint=("echo", "E"), cmd=("C",)),)

    def argv(container: dict[str, Any]) -> tuple[str, ...]:
        launch = process_images.resolve({"image": "tool:1", **container}, rules, path=path)
        assert isinstance(launch, process_images.Launch)
        return launch.argv[1:]

    assert argv({}) == ("E", "C")
    assert argv({"args": ["A"]}) == ("E", "A")
    assert argv({"command": ["true"]}) == ()
    assert argv({"command": ["echo"], "args": ["A"]}) == ("A",)


def test_unknown_images_and_missing_executables_are_refused(tmp_path: Path) -> None:
    path = _path(tmp_path)
    unknown = process_images.resolve(
        {"image": "registry.invalid/none:0", "command": ["true"]}, process_images.DEFAULT_RULES, path=path
    )
    assert isinstance(unknown, process_images.Refusal)
    assert unknown.reason == process_images.IMAGE_NOT_MAPPED
    assert not unknown.terminated
    missing = process_images.resolve(
        {"image": "busybox", "command": ["no-such-tool-xyz"]}, process_images.DEFAULT_RULES, path=path
    )
    assert isinstance(missing, process_images.Refusal)
    assert missing.reason == process_images.START_ERROR
    assert missing.terminated
    empty = process_images.resolve({"image": "x"}, (process_images.ImageRule("x"),), path=path)
    assert isinstance(empty, process_images.Refusal)
    assert empty.reason == process_images.CREATE_ERROR


def test_user_rules_come_first_and_are_validated(tmp_path: Path) -> None:
    rules_file = tmp_path / "images.yaml"
    rules_file.write_text("images:\n- image: 'vllm/*'\n  entrypoint: [echo]\n  env: {A: '1'}\n")
    rules = process_images.load_rules(rules_file)
    assert rules[0] == process_images.ImageRule("vllm/*", entrypoint=("echo",), env={"A": "1"})
    # then the endpoint picker's rule when its binary is built (tests/testbed/test_epp_parts.py)
    assert rules[-len(process_images.DEFAULT_RULES) :] == process_images.DEFAULT_RULES
    with pytest.raises(ValueError, match=r"images\[0\]: unknown field"):
        process_images.parse_rules({"images": [{"image": "x", "entrypint": ["a"]}]})
    with pytest.raises(ValueError, match="needs an `image`"):
        process_images.parse_rules({"images": [{"entrypoint": ["a"]}]})


def test_the_shims_run_this_interpreter(tmp_path: Path) -> None:
    shims = tmp_path / "shims"
    process_images.write_shims(shims)
    for name in ("vllm", "python", "python3", "nc"):
        text = (shims / name).read_text()
        assert sys.executable in text
        assert (shims / name).stat().st_mode & 0o111


# -- status ---------------------------------------------------------------------------------------


def _done(name: str, code: int) -> ContainerState:
    state = ContainerState(name=name, image="busybox")
    state.run("process://1")
    state.finish(code)
    return state


def _running(name: str, *, ready: bool = False) -> ContainerState:
    state = ContainerState(name=name, image="busybox")
    state.run("process://2")
    state.started = True
    state.ready = ready
    return state


@pytest.mark.parametrize(
    ("policy", "codes", "expected"),
    [
        ("Never", [0, 0], "Succeeded"),
        ("Never", [0, 3], "Failed"),
        ("OnFailure", [0, 0], "Succeeded"),
        ("OnFailure", [0, 1], "Running"),  # the failed one is about to restart
        ("Always", [0, 0], "Running"),
    ],
)
def test_phase_of_stopped_containers(policy: str, codes: list[int], expected: str) -> None:
    view = PodView(
        restart_policy=policy, init=[], containers=[_done(f"c{i}", c) for i, c in enumerate(codes)]
    )
    assert phase(view) == expected


def test_phase_while_starting_and_running() -> None:
    waiting = ContainerState(name="c", image="i", waiting_reason="ContainerCreating")
    assert phase(PodView(restart_policy="Always", init=[], containers=[waiting])) == "Pending"
    assert phase(PodView(restart_policy="Always", init=[], containers=[_running("c")])) == "Running"
    # A container that never started keeps the pod Pending even if another runs (kubelet rule).
    assert phase(PodView(restart_policy="Always", init=[], containers=[_running("a"), waiting])) == "Pending"
    crashed = _done("c", 1)
    crashed.wait("CrashLoopBackOff", "back-off")
    assert phase(PodView(restart_policy="Always", init=[], containers=[crashed])) == "Running"


def test_init_containers_gate_the_phase() -> None:
    main = ContainerState(name="main", image="i", waiting_reason="PodInitializing")
    running_init = _running("init")
    running_init.kind = "init"
    failed_init = _done("init", 2)
    failed_init.kind = "init"
    assert phase(PodView(restart_policy="Never", init=[running_init], containers=[main])) == "Pending"
    assert phase(PodView(restart_policy="Never", init=[failed_init], containers=[main])) == "Failed"
    assert phase(PodView(restart_policy="OnFailure", init=[failed_init], containers=[main])) == "Pending"
    view = PodView(restart_policy="Never", init=[failed_init], containers=[main])
    initialized = next(c for c in conditions(view, "Pending") if c["type"] == "Initialized")
    assert initialized["status"] == "False"
    assert initialized["message"] == "containers with incomplete status: [init]"


def test_ready_needs_every_container_ready_and_the_readiness_gates() -> None:
    view = PodView(
        restart_policy="Always",
        init=[],
        containers=[_running("a", ready=True), _running("b")],
        sandbox_ready=True,
    )
    by_type = {c["type"]: c for c in conditions(view, "Running")}
    assert by_type["ContainersReady"]["status"] == "False"
    assert by_type["Ready"]["message"] == "containers with unready status: [b]"
    assert by_type["PodReadyToStartContainers"]["status"] == "True"
    view.containers = [_running("a", ready=True)]
    assert {c["type"]: c["status"] for c in conditions(view, "Running")}["Ready"] == "True"
    view.readiness_gates = {"example.com/gate": False}
    gated = {c["type"]: c for c in conditions(view, "Running")}
    assert gated["ContainersReady"]["status"] == "True"
    assert gated["Ready"]["status"] == "False"
    assert gated["Ready"]["reason"] == "ReadinessGatesNotReady"


def test_true_conditions_clear_reason_and_message_for_strategic_merge() -> None:
    view = PodView(
        restart_policy="Always", init=[], containers=[_running("a", ready=True)], sandbox_ready=True
    )
    ready = next(c for c in conditions(view, "Running") if c["type"] == "Ready")
    assert ready == {"type": "Ready", "status": "True", "reason": None, "message": None}


def test_transition_times_change_only_with_the_status() -> None:
    import datetime

    first = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    later = first + datetime.timedelta(minutes=1)
    old = stamp([{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}], [], first)
    new = stamp([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}], old, later)
    times = {c["type"]: c["lastTransitionTime"] for c in new}
    assert times == {"Ready": "2026-01-01T00:01:00Z", "Initialized": "2026-01-01T00:00:00Z"}


def test_status_body_carries_addresses_and_container_states() -> None:
    restarted = _done("c", 137)
    restarted.wait("CrashLoopBackOff", "back-off 1s")
    restarted.restart_count = 1
    view = PodView(
        restart_policy="Always",
        init=[],
        containers=[restarted],
        pod_ip="172.30.1.5",
        host_ip="172.30.0.2",
        sandbox_ready=True,
    )
    status = pod_status(view)
    assert status["podIPs"] == [{"ip": "172.30.1.5"}]
    assert status["hostIP"] == "172.30.0.2"
    (container,) = status["containerStatuses"]
    assert container["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1s"}}
    assert container["lastState"]["terminated"]["exitCode"] == 137
    assert container["lastState"]["terminated"]["reason"] == "Error"
    assert container["restartCount"] == 1


# -- restarts -------------------------------------------------------------------------------------


def test_backoff_is_immediate_then_doubles_to_the_cap_and_resets_after_a_long_run() -> None:
    backoff = Backoff(1.0, 8.0)
    assert [backoff.next(0.1) for _ in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff.next(17.0) == 0.0


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [("Always", 0, True), ("OnFailure", 0, False), ("OnFailure", 1, True), ("Never", 1, False)],
)
def test_restart_policy(policy: str, code: int, restart: bool) -> None:
    assert should_restart(policy, code) is restart


def test_signals_become_128_plus_the_signal() -> None:
    assert exit_code_of(-9) == 137
    assert exit_code_of(-15) == 143
    assert exit_code_of(3) == 3


# -- DNS ------------------------------------------------------------------------------------------


def test_hosts_files_resolve_pod_names_per_namespace(tmp_path: Path) -> None:
    registry = process_dns.Registry()
    leader = tmp_path / "leader"
    other = tmp_path / "other"
    registry.add("u1", process_dns.Record("ns1", "grp-leader-0-0", "grp", "172.30.1.1"), leader)
    registry.add("u2", process_dns.Record("ns2", "solo", "", "172.30.1.2"), other)
    registry.add("u3", process_dns.Record("ns1", "grp-worker-0-0", "grp", "172.30.1.3"), tmp_path / "worker")
    worker_hosts = (tmp_path / "worker").read_text()
    leader_names = " ".join(
        f"grp-leader-0-0.grp{suffix}" for suffix in (".ns1.svc.cluster.local", ".ns1.svc", ".ns1", "")
    )
    assert f"172.30.1.1\t{leader_names}\n" in worker_hosts
    assert "172.30.1.3\tgrp-worker-0-0.grp.ns1.svc.cluster.local grp-worker-0-0\n" in worker_hosts
    assert "solo" not in worker_hosts  # no subdomain: no DNS record, as in a cluster
    other_hosts = other.read_text()
    assert "grp-leader-0-0.grp.ns1.svc.cluster.local" in other_hosts
    assert " grp-leader-0-0.grp\n" not in other_hosts  # short names only within the namespace
    inode = leader.stat().st_ino
    size = leader.stat().st_size
    registry.remove("u3")
    assert leader.stat().st_ino == inode  # rewritten in place: bind mounts pin the inode
    assert leader.stat().st_size == size  # never truncated, padded instead
    assert "grp-worker-0-0" not in leader.read_text()


# -- logs, addresses, nc --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "lines", "tail"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 5, b"a\nb\n"),
        (b"a\nb\n", 0, b""),
        (b"", 3, b""),
    ],
)
def test_log_tails(data: bytes, lines: int, tail: bytes) -> None:
    assert tail_bytes(data, lines) == tail


def test_the_address_plan_keeps_host_nodes_and_pods_apart() -> None:
    plan = netns.AddressPlan(ipaddress.IPv4Network("172.30.16.0/20"))
    assert plan.host_ip == "172.30.16.1"
    assert plan.node_ip(0) == "172.30.16.2"
    pods = list(plan.pod_ips())
    assert pods[0] == "172.30.17.1"
    assert pods[-1] == "172.30.31.254"
    assert not any(ip.endswith((".0", ".255")) for ip in pods)
    assert all(ipaddress.ip_address(ip) in plan.subnet for ip in pods)
    with pytest.raises(ValueError, match="out of range"):
        plan.node_ip(netns.MAX_NODES)


def test_the_ip_pool_reuses_addresses_released_longest_ago_only_when_fresh_ones_run_out() -> None:
    pool = netns.IpPool(iter(["a", "b", "c"]))
    taken = [pool.take(), pool.take()]
    pool.give_back("a")
    assert pool.take() == "c"
    pool.give_back("b")
    assert [pool.take(), pool.take()] == ["a", "b"]
    with pytest.raises(netns.NetworkError, match="exhausted"):
        pool.take()
    assert taken == ["a", "b"]


def test_the_nc_shim_checks_ports(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert process_nc.main(["-z", "-v", "-w", "2", "127.0.0.1", str(port)]) == 0
    assert process_nc.main(["-z", "-w", "1", "127.0.0.1", str(port)]) == 1
    assert process_nc.main(["127.0.0.1", str(port)]) == 2
    assert "succeeded" in capsys.readouterr().err


# -- volumes --------------------------------------------------------------------------------------


async def test_volumes_are_prepared_from_their_sources(tmp_path: Path) -> None:
    import datetime

    objects: dict[tuple[str, str], Mapping[str, Any]] = {
        ("ConfigMap", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}},
        ("Secret", "creds"): {
            "data": {"user": base64.b64encode(b"u").decode(), "pass": base64.b64encode(b"p").decode()}
        },
        ("PersistentVolumeClaim", "bound"): {"spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}},
        ("PersistentVolumeClaim", "waiting"): {"spec": {}, "status": {"phase": "Pending"}},
        ("PersistentVolume", "pv1"): {
            "spec": {"hostPath": {"path": str(tmp_path / "pv1"), "type": "DirectoryOrCreate"}}
        },
    }
    issued: list[tuple[str, str | None, int]] = []

    async def lookup(kind: str, name: str) -> Mapping[str, Any] | None:
        return objects.get((kind, name))

    async def issue(account: str, audience: str | None, seconds: int) -> tuple[str, datetime.datetime]:
        issued.append((account, audience, seconds))
        return f"token-{len(issued)}", datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)

    pod = {
        **POD,
        "spec": {
            **POD["spec"],
            "serviceAccountName": "runner",
            "volumes": [
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {
                    "name": "secret",
                    "secret": {"secretName": "creds", "items": [{"key": "user", "path": "u/name"}]},
                },
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                                    ]
                                }
                            },
                        ]
                    },
                },
                {"name": "missing", "configMap": {"name": "nope"}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "bound", "persistentVolumeClaim": {"claimName": "bound", "readOnly": True}},
                {"name": "waiting", "persistentVolumeClaim": {"claimName": "waiting"}},
            ],
        },
    }
    volumes = await process_volumes.prepare(pod, tmp_path, lookup=lookup, issue_token=issue, allocatable={})
    assert volumes["scratch"].memory
    assert volumes["scratch"].size_limit == "1Gi"
    assert (tmp_path / "volumes/secret/u/name").read_bytes() == b"u"
    assert not (tmp_path / "volumes/secret/pass").exists()  # only the listed items
    api = tmp_path / "volumes/kube-api-access"
    assert (api / "token").read_text() == "token-1"
    assert (api / "ca.crt").read_text() == "CA"
    assert (api / "namespace").read_text() == "ns1"
    assert issued == [("runner", None, 3607)]
    assert volumes["missing"].problem == "volume 'missing': configmap \"nope\" not found"
    assert volumes["claim"].problem == 'persistentvolumeclaim "c" not found'
    # a bound claim is its PersistentVolume's hostPath (created: DirectoryOrCreate), read-only as asked
    assert volumes["bound"].path == tmp_path / "pv1"
    assert (tmp_path / "pv1").is_dir()
    assert volumes["bound"].readonly
    assert volumes["waiting"].problem == 'persistentvolumeclaim "waiting" is not bound'
    # Missing sources keep the pod waiting (as a kubelet does); the rest are ready.
    assert process_volumes.waiting(volumes) == {
        "missing": volumes["missing"].problem,
        "claim": volumes["claim"].problem,
        "waiting": volumes["waiting"].problem,
    }
    # Tokens are renewed after 80 % of their life.
    token = volumes["kube-api-access"].tokens[0]
    assert (
        process_volumes.refresh_due(volumes, datetime.datetime(2029, 12, 31, 23, 0, tzinfo=datetime.UTC))
        == []
    )
    assert process_volumes.refresh_due(
        volumes, datetime.datetime(2029, 12, 31, 23, 50, tzinfo=datetime.UTC)
    ) == [token]
    await process_volumes.refresh_token(token, issue)
    assert (api / "token").read_text() == "token-2"


def test_mounts_need_an_existing_mount_point_or_one_under_run(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "file.conf").write_text("x")
    volumes = {
        "shared": process_volumes.Volume("shared", path=shared),
        "shm": process_volumes.Volume("shm", path=tmp_path / "shm", memory=True, size_limit="64Mi"),
        "broken": process_volumes.Volume("broken", problem="volume 'broken': gone"),
    }
    container = {
        "volumeMounts": [
            {"name": "shared", "mountPath": str(tmp_path)},
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "shared", "mountPath": "/var/run/app/conf", "subPath": "file.conf", "readOnly": True},
            {"name": "shared", "mountPath": "/definitely/not/here"},
            {"name": "broken", "mountPath": "/tmp"},
            {"name": "absent", "mountPath": "/tmp"},
        ]
    }
    mounts, problems = process_volumes.mounts_for(container, volumes)
    assert mounts == [
        process_volumes.Mount(target=str(tmp_path), source=str(shared)),
        process_volumes.Mount(target="/dev/shm", source=None, tmpfs_size="64Mi"),
        process_volumes.Mount(
            target="/run/app/conf", source=str(shared / "file.conf"), readonly=True, file=True
        ),
    ]
    assert len(problems) == 3
    assert "/definitely/not/here does not exist" in problems[0]
    assert problems[1] == "volume 'broken': gone"
    assert "no such volume" in problems[2]
    script = process_volumes.mount_script(mounts)
    assert script[0] == "mount -t tmpfs -o mode=0755 sparkrun-run /run"  # /run/app/conf needs it
    assert f"mount --bind {shared} {tmp_path}" in script[1]
    assert (
        script[2]
        == "mkdir -p /dev/shm && mount -t tmpfs -o mode=1777,size=67108864 sparkrun-emptydir /dev/shm"
    )
    assert "touch /run/app/conf" in script[3]
    assert script[4] == "mount -o remount,bind,ro /run/app/conf"
    assert process_volumes.mount_script(mounts[:2])[0].startswith("mount --bind") is False
