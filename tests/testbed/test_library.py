"""The testbed library's own parts, without a control plane: topology, PKI, JobSet webhook
registration, process-group handling, state round trip and port allocation."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cryptography import x509

from sparkrun_testbed import daemons, jobset, pki
from sparkrun_testbed.ports import free_ports
from sparkrun_testbed.state import State
from sparkrun_testbed.topology import GPU_RESOURCE, NodePool, Topology, node_manifests


def test_default_topology_is_two_nodes_with_eight_gpus() -> None:
    nodes = node_manifests(Topology())
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-0", "gpu-1"]
    for node in nodes:
        assert node["status"]["capacity"][GPU_RESOURCE] == "8"
        assert node["status"]["allocatable"] == node["status"]["capacity"]
        assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_cpu_pool_has_no_gpu_resource_and_pools_must_not_collide() -> None:
    topology = Topology(
        pools=(NodePool(prefix="cpu", count=1, gpus=0), NodePool(prefix="a100", count=1, gpus=4))
    )
    cpu, gpu = node_manifests(topology)
    assert GPU_RESOURCE not in cpu["status"]["capacity"]
    assert "nvidia.com/gpu.product" not in cpu["metadata"]["labels"]
    assert gpu["status"]["capacity"][GPU_RESOURCE] == "4"
    assert topology.max_gpus_per_node() == 4
    assert Topology.from_dict(topology.to_dict()) == topology
    with pytest.raises(ValueError, match="duplicate node names"):
        Topology(pools=(NodePool(count=1), NodePool(count=2)))


def _serve_tls_once(pair: pki.KeyPair, tmp_path: Path, port: int) -> threading.Thread:
    pair.write(tmp_path / "srv.crt", tmp_path / "srv.key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    listener = socket.create_server(("127.0.0.1", port))

    def serve() -> None:
        with listener, context.wrap_socket(listener.accept()[0], server_side=True) as conn:
            conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_issued_serving_cert_verifies_against_its_ca_over_tls(tmp_path: Path) -> None:
    ca = pki.CertificateAuthority.create("test-ca")
    (port,) = free_ports(1)
    thread = _serve_tls_once(ca.issue("srv", hosts=("127.0.0.1", "localhost")), tmp_path, port)
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.recv(5) == b"hello"
    thread.join(5)


def test_client_cert_carries_groups_and_ca_round_trips(tmp_path: Path) -> None:
    ca = pki.CertificateAuthority.create("test-ca")
    ca.key_pair.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    loaded = pki.CertificateAuthority.load(tmp_path / "ca.crt", tmp_path / "ca.key")
    assert loaded.cert_pem == ca.cert_pem
    cert = x509.load_pem_x509_certificate(
        loaded.issue("alice", organizations=("system:masters",), client=True).cert_pem
    )
    orgs = cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    assert (tmp_path / "ca.key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match="needs hosts"):
        ca.issue("nothing")


UPSTREAM_WEBHOOKS = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            {
                "name": "mjobset.kb.io",
                "clientConfig": {
                    "service": {"name": "webhook-service", "namespace": "system", "path": "/mutate-js"}
                },
                "rules": [{"resources": ["jobsets"]}],
            },
            {
                "name": "mpod.kb.io",
                "clientConfig": {
                    "service": {"name": "webhook-service", "namespace": "system", "path": "/mutate--v1-pod"}
                },
                "rules": [{"resources": ["pods"]}],
            },
        ],
    }
]


def test_jobset_webhooks_are_registered_by_url_and_pod_hooks_keep_the_selector() -> None:
    (config,) = jobset.webhook_configurations(
        UPSTREAM_WEBHOOKS, base_url="https://127.0.0.1:9443", ca_pem=b"PEM"
    )
    assert config["metadata"] == {"name": "jobset-mutating-webhook-configuration"}
    js_hook, pod_hook = config["webhooks"]
    assert js_hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-js",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert "objectSelector" not in js_hook
    assert pod_hook["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
    assert "service" in UPSTREAM_WEBHOOKS[0]["webhooks"][0]["clientConfig"], "input must not be mutated"


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The leader spawns a grandchild that ignores SIGTERM: stop must still leave nothing behind.
    script = (
        "import signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    d = daemons.start("sleeper", [sys.executable, "-c", script], log=tmp_path / "sleeper.log")
    deadline = time.monotonic() + 10
    while len(d.group_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = d.group_pids()
    assert len(pids) == 2
    assert d.running()
    assert d.rss_bytes() > 0
    d.stop(grace=1.0)
    assert d.group_pids() == []
    assert not d.running()
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}").exists()
            or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
        )
    d.stop()  # idempotent


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        stranger = daemons.Daemon(name="x", pid=victim.pid, start_time=1, log=tmp_path / "x.log", argv=[])
        assert not stranger.running()
        stranger.stop(grace=0.2)
        assert victim.poll() is None, "a process with another start time must survive"
    finally:
        victim.kill()
        victim.wait()


def test_state_round_trips_through_its_file(tmp_path: Path) -> None:
    d = daemons.start("true", ["true"], log=tmp_path / "true.log")
    state = State(
        name="n",
        run_dir=tmp_path,
        bin_dir=tmp_path / "bin",
        server="https://127.0.0.1:1",
        ports={"apiserver": 1},
        topology=Topology().to_dict(),
        owner_pid=1,
        started_at=2.0,
        daemons=[d],
    )
    state.save()
    loaded = State.load(tmp_path)
    assert loaded is not None
    assert loaded.daemons == state.daemons
    assert loaded.ports == state.ports
    assert loaded.kubeconfig == tmp_path / "kubeconfig"
    assert State.load(tmp_path / "absent") is None
    d.stop()


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.create_server(("127.0.0.1", port)):
            pass
