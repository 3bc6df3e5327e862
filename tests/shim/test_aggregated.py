"""The shim as the aggregated API ``v1alpha1.daemon.sparkrun.dev`` on the testbed (ADR 0003).

``sparkrun-k8s shim serve --aggregated-port`` runs on the host; its aggregated listener is bound
to a non-loopback address of a dummy interface this test creates (EndpointSlices refuse
loopback addresses), behind the Service, EndpointSlice and APIService the project ships (the
APIService of ``manifests/shim/apiservice.yaml`` with the testbed CA). Needs root and iproute2.

Tested: the APIService becomes Available (discovery documents); ``kubectl get --raw`` reaches
the daemon routes with the identity kube-apiserver authenticated (admin, and a ServiceAccount
whose RBAC then applies: a reader sees only read operations, a principal without a role is
refused); POST works through ``kubectl create --raw``; the aggregated listener refuses TLS
clients without a front-proxy certificate; identity headers sent to the daemon listener are
ignored.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import random
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkrun_operator.api.pluginops import OPERATIONS
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.harness import DaemonEnv, free_port, retry

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
APISERVICE = REPO / "manifests" / "shim" / "apiservice.yaml"
# RFC 2544 benchmarking range: never routed, unlikely to be in use on the host.
BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")


@contextmanager
def host_address() -> Iterator[str]:
    """A non-loopback address on the host (one end of a veth pair), removed afterwards.

    NB: a veth pair rather than a dummy interface: some kernels (gVisor) have no dummy links.
    """
    used = subprocess.run(["ip", "-o", "addr"], check=True, capture_output=True, text=True).stdout
    address = str(BENCHMARK_RANGE[random.randrange(256, BENCHMARK_RANGE.num_addresses - 256)])
    while address in used:
        address = str(BENCHMARK_RANGE[random.randrange(256, BENCHMARK_RANGE.num_addresses - 256)])
    tag = secrets.token_hex(3)
    name, peer = "srs" + tag, "srp" + tag
    subprocess.run(
        ["ip", "link", "add", name, "type", "veth", "peer", "name", peer], check=True, capture_output=True
    )
    try:
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", name], check=True, capture_output=True)
        for link in (name, peer):
            subprocess.run(["ip", "link", "set", link, "up"], check=True, capture_output=True)
        yield address
    finally:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def _available(kube: KubeApi, name: str) -> bool:
    found = kube.get("apiregistration.k8s.io/v1", "APIService", name)
    conditions = (found or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def _raw(kubectl: Any, path: str, *extra: str) -> Any:
    return json.loads(kubectl("get", "--raw", path, *extra).stdout)


def test_the_daemon_api_through_the_aggregation_layer(
    testbed: Testbed, crds: list[str], kube: KubeApi, kubectl: Any, require: Any, tmp_path: Path
) -> None:
    require(
        os.geteuid() == 0 and shutil.which("ip") is not None,
        "needs root and iproute2 to give the shim a non-loopback endpoint address",
    )
    env = DaemonEnv(kube, "shim-agg-" + secrets.token_hex(3)).setup()
    transport = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{env.namespace}-transport"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "sparkrun-daemon-transport",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": who, "namespace": env.namespace}
            for who in ("reader", "nobody")
        ],
    }
    kube.create(transport)
    apiservice = yaml.safe_load(APISERVICE.read_text())
    name = apiservice["metadata"]["name"]
    port, aggregated_port = free_port(), free_port()
    process: subprocess.Popen[bytes] | None = None
    try:
        with host_address() as address:
            pair = testbed.issue_serving_cert(f"sparkrun-shim.{env.namespace}.svc", "127.0.0.1", address)
            pair.write(tmp_path / "tls.crt", tmp_path / "tls.key")
            log = tmp_path / "shim.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable, "-m", "sparkrun_operator.cli.main", "shim", "serve",
                        "--namespace", env.namespace, "--kubeconfig", str(testbed.kubeconfig),
                        "--host", "127.0.0.1", "--port", str(port),
                        "--aggregated-host", address, "--aggregated-port", str(aggregated_port),
                        "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            _wait_for(address, aggregated_port, process, log)
            kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "sparkrun-shim"},
                    "spec": {"ports": [{"name": "aggregated", "port": 443, "targetPort": aggregated_port}]},
                },
                namespace=env.namespace,
            )
            kube.create(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "sparkrun-shim-1",
                        "labels": {"kubernetes.io/service-name": "sparkrun-shim"},
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                    "ports": [{"name": "aggregated", "port": aggregated_port, "protocol": "TCP"}],
                },
                namespace=env.namespace,
            )
            apiservice["spec"]["service"]["namespace"] = env.namespace
            apiservice["spec"]["caBundle"] = base64.b64encode(testbed.ca_pem).decode()
            kube.apply(apiservice)
            kube.wait(lambda: _available(kube, name), timeout=60, what=f"APIService {name} Available")

            prefix = "/apis/daemon.sparkrun.dev/v1alpha1"
            discovery = _raw(kubectl, prefix)
            assert discovery["groupVersion"] == "daemon.sparkrun.dev/v1alpha1"
            info = _raw(kubectl, prefix + "/v1/info")
            assert info["protocol"] == 1
            assert info["runtime"]["identity"] == "front-proxy"
            assert info["runtime"]["principal"] == "sparkrun-admin"
            # NB: the reference's enabled 76 and the project's (ADR 0048)
            assert len(_raw(kubectl, prefix + "/v1/ops")) == 76 + len(OPERATIONS)
            reader_ops = _raw(kubectl, prefix + "/v1/ops", "--token", env.tokens["reader"])
            assert {op["scope"] for op in reader_ops} == {"read"}
            denied = kubectl(
                "get", "--raw", prefix + "/v1/info", "--token", env.tokens["nobody"], check=False
            )
            assert denied.returncode != 0
            assert "Forbidden" in denied.stderr or "403" in denied.stderr
            body = tmp_path / "args.json"
            body.write_text("{}")
            listed = kubectl("create", "--raw", prefix + "/v1/ops/workloads.list", "-f", str(body))
            assert json.loads(listed.stdout) == []

            # Only a client certificate of the request-header CA opens the aggregated listener.
            anonymous = ssl.create_default_context(cafile=str(testbed.run_dir / "pki" / "ca.crt"))
            anonymous.check_hostname = False
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.get(
                    f"https://{address}:{aggregated_port}{prefix}/v1/info",
                    headers={"X-Remote-User": "sparkrun-admin"},
                    verify=anonymous,
                    timeout=5,
                ).raise_for_status()
            # The daemon listener ignores identity headers: only a bearer token counts.
            daemon_api = ssl.create_default_context(cafile=str(testbed.run_dir / "pki" / "ca.crt"))
            forged = httpx.get(
                f"https://127.0.0.1:{port}/v1/info",
                headers={"X-Remote-User": "sparkrun-admin", "X-Remote-Group": "system:masters"},
                verify=daemon_api,
                timeout=5,
            )
            assert forged.status_code == 401
    finally:
        retry(lambda: kube.delete("apiregistration.k8s.io/v1", "APIService", name))
        retry(
            lambda: kube.delete(
                "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", transport["metadata"]["name"]
            )
        )
        if process is not None and process.poll() is None:
            os.killpg(process.pid, 15)
            process.wait(20)
        env.teardown()


def _wait_for(host: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the shim exited {process.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the shim is not listening on {host}:{port}:\n{log.read_text()}")
