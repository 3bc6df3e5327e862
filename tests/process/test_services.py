"""Services for process-node pods: a ClusterIP answers on the Service's port and relays to a Ready
endpoint's target port, and the Service's DNS names resolve in every pod (process_services.py).

A web pod serves HTTP on 8080 behind a Service on port 80; a client pod, started before the
Service exists, asks ``http://web.<ns>.svc/`` and ``http://web/`` until both answer; a pod
that is not Ready gets no traffic; a deleted Service stops resolving and answering.
"""

from __future__ import annotations

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.process.helpers import pod, pod_spec, ready, wait_for, wait_pod

pytestmark = pytest.mark.testbed

# Keeps asking one URL and prints each answer (or the error), one line a second.
CLIENT = """
import sys, time, urllib.request
while True:
    for url in sys.argv[1:]:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                print(url, answer.status, answer.read().decode().strip(), flush=True)
        except Exception as error:
            print(url, "error", type(error).__name__, flush=True)
    time.sleep(0.5)
"""
SERVER = """
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["HOSTNAME"].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""


def _python(name: str, script: str, *args: str, **extra: object) -> dict[str, object]:
    return {"name": name, "image": "python:3.12", "command": ["python3", "-c", script, *args], **extra}


def _log(kube: KubeApi, namespace: str, name: str) -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    return kube.request("GET", path, params={"tailLines": "20"}).text


def test_a_cluster_ip_relays_to_ready_endpoints_and_its_names_resolve(
    kube: KubeApi, namespace: str, netns_network: None
) -> None:
    urls = [f"http://web.{namespace}.svc/", "http://web/"]
    kube.create(pod("client", pod_spec([_python("client", CLIENT, *urls)], grace=1)), namespace=namespace)
    probe = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    web = _python(
        "web", SERVER, "8080", ports=[{"name": "http", "containerPort": 8080}], readinessProbe=probe
    )
    kube.create(pod("web-0", pod_spec([web], grace=1), labels={"app": "web"}), namespace=namespace)
    # Never Ready: the Service must not send it anything.
    never = {"exec": {"command": ["false"]}, "periodSeconds": 1}
    idle = _python(
        "web", SERVER, "8080", ports=[{"name": "http", "containerPort": 8080}], readinessProbe=never
    )
    kube.create(pod("web-idle", pod_spec([idle], grace=1), labels={"app": "web"}), namespace=namespace)
    wait_pod(kube, namespace, "web-0", ready, timeout=60)
    wait_pod(kube, namespace, "client", ready, timeout=60)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    kube.create(service, namespace=namespace)

    def answered() -> bool:
        lines = _log(kube, namespace, "client").splitlines()
        return all(any(line == f"{url} 200 web-0" for line in lines[-6:]) for url in urls)

    wait_for(answered, timeout=30, what="the client reaching web-0 through the Service, by both names")
    assert "web-idle" not in _log(kube, namespace, "client")

    kube.delete("v1", "Service", "web", namespace=namespace)

    def refused() -> bool:
        last = _log(kube, namespace, "client").splitlines()[-2:]
        return len(last) == 2 and all(" error " in line for line in last)

    wait_for(refused, timeout=30, what="the client failing once the Service is gone")
