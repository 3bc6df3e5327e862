"""``sparkrun-k8s demo``'s install step: the chart, its components running as pods.

``helm install`` of ``helm/sparkrun-operator`` with ``hack/testbed-values.yaml`` (the values the
chart's own e2e uses, ``e2e/test_helm_pods.py``) and the demo's few additions, into the demo's
namespace: the operator (two replicas, one active), the daemon API shim and the gateway run as
pods on the testbed's process nodes, each with its ServiceAccount token and the chart's RBAC.

This machine does not route ClusterIPs (the testbed has no kube-proxy), so the demo reaches the
components the way ``kubectl`` users reach them without a load balancer, through kube-apiserver,
authenticated with the testbed admin's token and verified with the testbed CA:

- the gateway through the apiserver's Service proxy
  (``/api/v1/namespaces/<ns>/services/<release>-gateway:http/proxy``): the apiserver takes the
  bearer token and forwards the request (streams too) to a Ready gateway pod;
- the daemon API through its APIService (``/apis/daemon.sparkrun.dev/v1alpha1``): the apiserver
  authenticates the caller and forwards to the shim with front-proxy headers.

It needs pods with their own network namespaces (root and iproute2; the process runtime says
which it got); without them :func:`supported` says why and the demo runs the three components
as local processes instead.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from sparkrun_operator.api.meta import DAEMON_API_PREFIX
from sparkrun_testbed import binaries, plane
from sparkrun_testbed.kubeapi import KubeApi

RELEASE = "sparkrun"
COMPONENTS = ("operator", "shim", "gateway")
DAEMON_API = DAEMON_API_PREFIX
INSTALL_TIMEOUT = 240.0


class ChartStepError(RuntimeError):
    """The install did not come up; the message says what was missing."""


@dataclass
class Installed:
    """How the demo reaches the installed components (see the module docs)."""

    gateway_url: str
    daemon_url: str
    token: str
    ca_file: Path
    seconds: float


def chart_dir(repo: Path) -> Path:
    return repo / "helm" / "sparkrun-operator"


def admin_token(kubeconfig: Path) -> str:
    """The bearer token of the testbed's admin kubeconfig (the demo's credentials)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    token = str(doc["users"][0]["user"].get("token") or "")
    if not token:
        raise ChartStepError(f"{kubeconfig} carries no bearer token")
    return token


def values_file(run_dir: Path, *, cache_mount_path: str) -> Path:
    """The demo's additions to ``hack/testbed-values.yaml``: where the ModelCache step's caches
    are mounted in engine pods."""
    path = run_dir / "demo-values.yaml"
    doc = {"operator": {"extraArgs": [f"--cache-mount-path={cache_mount_path}"]}}
    path.write_text(
        "# Written by sparkrun-k8s demo: its additions to hack/testbed-values.yaml.\n" + yaml.safe_dump(doc)
    )
    return path


def install(
    testbed: plane.Testbed, console: Console, *, repo: Path, namespace: str, cache_mount_path: str
) -> Installed:
    """``helm install`` and wait until every component answers through kube-apiserver."""
    helm = binaries.locate(repo).bin_dir / "helm"
    if not helm.is_file():
        raise ChartStepError(f"no helm in {helm.parent} (make testbed-bin builds it)")
    values = values_file(testbed.run_dir, cache_mount_path=cache_mount_path)
    argv = [str(helm), "install", RELEASE, str(chart_dir(repo)), "--namespace", namespace,
            "--values", str(repo / "hack" / "testbed-values.yaml"), "--values", str(values),
            "--wait", "--timeout", f"{INSTALL_TIMEOUT:.0f}s"]  # fmt: skip
    console.print("$ helm install sparkrun helm/sparkrun-operator --values hack/testbed-values.yaml ...")
    started = time.monotonic()
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, **testbed.env()},
        timeout=INSTALL_TIMEOUT + 30,
        check=False,
    )
    if done.returncode != 0:
        with testbed.api() as api:
            pods = pod_table(api, namespace)
        console.print(pods)
        raise ChartStepError(f"helm install exited {done.returncode}:\n{done.stderr or done.stdout}")
    token = admin_token(testbed.kubeconfig)
    base = testbed.server
    installed = Installed(
        gateway_url=f"{base}/api/v1/namespaces/{namespace}/services/{RELEASE}-gateway:http/proxy",
        daemon_url=f"{base}{DAEMON_API}",
        token=token,
        ca_file=testbed.ca_file(),
        seconds=0.0,
    )
    _answering(installed, f"{installed.gateway_url}/v1/models", "the gateway (through its Service)")
    _answering(installed, f"{installed.daemon_url}/v1/health", "the daemon API (through its APIService)")
    installed.seconds = time.monotonic() - started
    with testbed.api() as api:
        console.print(pod_table(api, namespace))
    console.print(f"helm install -> every component answering: {installed.seconds:.1f} s")
    return installed


def _answering(installed: Installed, url: str, what: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers below 500 (the APIService turns Available a little after the
    shim pod is Ready)."""
    headers = {"Authorization": f"Bearer {installed.token}"}
    deadline = time.monotonic() + timeout
    last = ""
    trust = ssl.create_default_context(cafile=str(installed.ca_file))
    with httpx.Client(verify=trust, headers=headers, timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                answer = client.get(url)
                if answer.status_code < 500:
                    return
                last = f"HTTP {answer.status_code}: {answer.text[:200]}"
            except httpx.HTTPError as error:
                last = repr(error)
            time.sleep(0.5)
    raise ChartStepError(f"{what} did not answer {url} within {timeout:.0f} s ({last})")


def _pods(api: KubeApi, namespace: str) -> list[dict[str, Any]]:
    return api.list_items(
        "v1", "Pod", namespace=namespace, label_selector=f"app.kubernetes.io/instance={RELEASE}"
    )


def pod_table(api: KubeApi, namespace: str) -> Table:
    """The release's pods: component, name, node, phase, Ready, restarts."""
    table = Table("component", "pod", "node", "phase", "Ready", "restarts", title=f"helm release {RELEASE}")
    for pod in sorted(_pods(api, namespace), key=lambda p: str(p["metadata"]["name"])):
        status = pod.get("status") or {}
        labels = pod["metadata"].get("labels") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
        table.add_row(
            labels.get("app.kubernetes.io/component", "?"),
            pod["metadata"]["name"],
            str(pod["spec"].get("nodeName") or ""),
            str(status.get("phase") or ""),
            str(ready),
            str(restarts),
        )
    return table
