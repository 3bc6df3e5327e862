"""APIService objects work on the testbed, routed to endpoints (ADR 0003).

kube-apiserver runs with ``--enable-aggregator-routing=true``: the aggregator dials an address
from the Service's EndpointSlices, not its ClusterIP (there is no kube-proxy). Endpoint
addresses may not be loopback, so the test server runs in a network namespace with a private
address reached over a veth pair, the same shape a pod of the process runtime has.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed

pytestmark = pytest.mark.testbed

SERVER = Path(__file__).with_name("aggregated_server.py")
APISERVICE = "apiregistration.k8s.io/v1"
# RFC 2544 benchmarking range: never routed on the internet, unlikely to be in use locally.
PRIVATE_RANGE = ipaddress.ip_network("198.18.0.0/15")


@dataclass(frozen=True)
class NetNs:
    name: str
    host_ip: str
    ns_ip: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def network_namespace() -> Iterator[NetNs]:
    """A network namespace joined to the host by a veth pair on a random /30 of PRIVATE_RANGE."""
    used = subprocess.run(["ip", "-o", "addr"], check=True, capture_output=True, text=True).stdout
    while True:
        subnet = random.choice(list(PRIVATE_RANGE.subnets(new_prefix=30))[:4096])
        host_ip, ns_ip = (str(a) for a in subnet.hosts())
        if host_ip not in used and ns_ip not in used:
            break
    tag = secrets.token_hex(3)
    ns = NetNs(name=f"sr-tb-{tag}", host_ip=host_ip, ns_ip=ns_ip)
    host_if, ns_if = f"srh{tag}", f"srn{tag}"
    _ip("netns", "add", ns.name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns.name)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns.name, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("-n", ns.name, "link", "set", ns_if, "up")
        _ip("-n", ns.name, "link", "set", "lo", "up")
        yield ns
    finally:
        # NB: the host end explicitly: some kernels (gVisor) release a deleted namespace, and
        # with it the peer, lazily (docs/decisions/0004-testbed-pod-network.md).
        subprocess.run(["ip", "link", "del", host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", ns.name], check=False, capture_output=True)


def _available(kube: KubeApi, name: str) -> dict[str, Any] | None:
    service = kube.get(APISERVICE, "APIService", name)
    conditions = (service or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Available"), None)


def _apiservice(group: str, version: str, namespace: str, service: str, ca_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": APISERVICE,
        "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {
            "group": group,
            "version": version,
            "service": {"namespace": namespace, "name": service, "port": 443},
            "caBundle": base64.b64encode(ca_pem).decode(),
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
        },
    }


def _wait_listening(host: str, port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"test server exited {server.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"test server not listening on {host}:{port}:\n{log.read_text()}")


def test_an_apiservice_answers_through_kubectl_get_raw(
    testbed: Testbed, kube: KubeApi, kubectl: Any, namespace: str, require: Any, tmp_path: Path
) -> None:
    require(
        os.geteuid() == 0 and shutil.which("ip") is not None,
        "needs root and iproute2 (ip netns) to give the test server a non-loopback endpoint address",
    )
    group, version, port = f"t{secrets.token_hex(3)}.testbed.sparkrun.dev", "v1alpha1", 8443
    pair = testbed.issue_serving_cert(f"hello.{namespace}.svc")
    pair.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    log = tmp_path / "server.log"
    with network_namespace() as ns, log.open("wb") as out:
        argv = [
            sys.executable,
            str(SERVER),
            ns.ns_ip,
            str(port),
            str(tmp_path / "tls.crt"),
            str(tmp_path / "tls.key"),
        ]
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, *argv, group, version],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        apiservice = _apiservice(group, version, namespace, "hello", testbed.ca_pem)
        try:
            _wait_listening(ns.ns_ip, port, server, log)
            kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "hello"},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
                },
                namespace=namespace,
            )
            kube.create(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {"name": "hello-1", "labels": {"kubernetes.io/service-name": "hello"}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [ns.ns_ip], "conditions": {"ready": True}}],
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                },
                namespace=namespace,
            )
            kube.apply(apiservice)
            kube.wait(
                lambda: (c := _available(kube, apiservice["metadata"]["name"])) and c["status"] == "True",
                timeout=60,
                what=f"APIService {apiservice['metadata']['name']} Available",
            )
            raw = kubectl("get", "--raw", f"/apis/{group}/{version}/hellos").stdout
            (hello,) = json.loads(raw)["items"]
            assert hello["metadata"]["name"] == "world"
            # The aggregator authenticated us and forwarded the identity: it really proxied.
            assert hello["remoteUser"] == "sparkrun-admin"
            # NB: the apiserver's aggregated discovery takes the new group in a moment after the
            # APIService is Available (its discovery controller fetches the remote's), so a
            # client's discovery may miss it at first (one CI run saw an empty list): poll.
            kube.wait(
                lambda: "hellos" in kubectl("api-resources", f"--api-group={group}", "-o", "name").stdout,
                timeout=30,
                what=f"{group} in kubectl api-resources",
                interval=1.0,
            )
        finally:
            kube.delete(APISERVICE, "APIService", apiservice["metadata"]["name"])
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_externalname_services_are_refused_under_endpoint_routing(
    testbed: Testbed, kube: KubeApi, namespace: str
) -> None:
    # Validation accepts an IP literal as externalName (it is a valid DNS-1123 subdomain) ...
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "external"},
            "spec": {
                "type": "ExternalName",
                "externalName": "127.0.0.1",
                "ports": [{"name": "https", "port": 443}],
            },
        },
        namespace=namespace,
    )
    group = f"t{secrets.token_hex(3)}.testbed.sparkrun.dev"
    apiservice = _apiservice(group, "v1alpha1", namespace, "external", testbed.ca_pem)
    kube.apply(apiservice)
    try:
        # ... but the endpoint resolver of --enable-aggregator-routing refuses the type.
        refused = 'unsupported service type "ExternalName"'
        condition = kube.wait(
            lambda: (c := _available(kube, apiservice["metadata"]["name"])) and refused in c["message"] and c,
            timeout=60,
            what=f"APIService condition Available saying {refused}",
        )
        assert condition["status"] == "False"
    finally:
        kube.delete(APISERVICE, "APIService", apiservice["metadata"]["name"])
