"""Start Kueue on a running testbed, and take it away again.

:func:`start` installs Kueue's CRDs (conversion by webhook, as upstream), runs the controller
manager as a daemon of the testbed (``kueue`` in its state: ``testbed status`` probes it and
``Testbed.stop`` stops it), registers its webhooks by loopback URL and routes its visibility API
(``visibility.kueue.x-k8s.io``, an aggregated API) through kube-apiserver. :meth:`Kueue.stop`
undoes all of it (``uninstall=True``, the default: webhooks, APIServices, CRDs and every Kueue
object), so the testbed is as it was: the fixture that starts Kueue on the shared session
testbed leaves no webhook or finalizer behind for the tests that follow.

Why root: the binary reads certificates from fixed absolute paths (``/visibility`` and
``/etc/kueue/metrics/certs``), so it runs under ``chroot`` in ``<run_dir>/kueue/root`` (a static
binary: the root holds only it, its configuration, the kubeconfig and the certificates); and
kube-apiserver refuses loopback endpoints, so the visibility server listens on an address of
its own in ``198.18.0.0/15`` (RFC 2544, never routed) on a veth pair in the host's namespace,
recorded in ``<run_dir>/kueue/link`` so that ``Testbed.stop`` removes it even after a crash.
:func:`unavailable` says why Kueue cannot start here (None when it can).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from . import daemons, kueue
from .binaries import BinariesMissing
from .daemons import Daemon
from .kubeapi import ApiError, KubeApi
from .ports import LOOPBACK, free_ports

if TYPE_CHECKING:
    from .plane import Testbed

HEALTH_PORT = "kueue-health"
_ADDRESS_RANGE = ("198.18.0.0", 1 << 17)  # 198.18.0.0/15
_LOG_TAIL_LINES = 40


class KueueError(RuntimeError):
    """Kueue did not start or become ready; the message carries its log tail."""


def unavailable(binary: Path | None = None) -> str | None:
    """Why Kueue cannot run on this machine (None when it can)."""
    if os.geteuid() != 0:
        return "Kueue on the testbed needs root (chroot, and a veth pair for its visibility API)"
    for tool in ("ip", "chroot"):
        if shutil.which(tool) is None:
            return f"Kueue on the testbed needs `{tool}` (iproute2, coreutils)"
    try:
        path = binary or kueue.locate()
    except BinariesMissing as e:
        return str(e)
    if not os.access(path, os.X_OK):
        return f"Kueue is not built ({path}): run `make kueue-bin` (hack/kueue-bin.sh)"
    return None


@dataclass
class Kueue:
    """A Kueue controller running against one testbed."""

    testbed: Testbed
    daemon: Daemon
    address: str
    webhooks: list[tuple[str, str]]  # (kind, name) of the webhook configurations registered
    crd_names: list[str]

    def api_path(self, namespace: str, local_queue: str, version: str = "v1beta2") -> str:
        """The visibility API's pending workloads of a LocalQueue, through kube-apiserver."""
        return (
            f"/apis/{kueue.VISIBILITY_GROUP}/{version}/namespaces/{namespace}"
            f"/localqueues/{local_queue}/pendingworkloads"
        )

    def stop(self, *, uninstall: bool = True, grace: float = 10.0) -> None:
        """Stop the controller; with ``uninstall`` also remove everything :func:`start` added."""
        with self.testbed.api() as api:
            # Webhooks first: with Kueue gone, failurePolicy Fail would refuse every Job.
            for kind, name in self.webhooks:
                api.delete("admissionregistration.k8s.io/v1", kind, name)
            for version in kueue.VISIBILITY_VERSIONS:
                api.delete("apiregistration.k8s.io/v1", "APIService", f"{version}.{kueue.VISIBILITY_GROUP}")
            daemons.stop_all([self.daemon], grace=grace)
            state = self.testbed.state
            state.daemons = [d for d in state.daemons if d.pid != self.daemon.pid]
            state.ports.pop(HEALTH_PORT, None)
            state.save()
            if uninstall:
                _uninstall(api, self.crd_names)
        cleanup(self.testbed.run_dir)


def start(
    testbed: Testbed,
    binary: Path | None = None,
    *,
    frameworks: Sequence[str] = kueue.FRAMEWORKS,
    timeout: float = 180.0,
) -> Kueue:
    """Start Kueue on ``testbed`` and return once its webhooks answer and its visibility API is
    Available. Raises :class:`~sparkrun_testbed.binaries.BinariesMissing` (not built) or
    :class:`KueueError` (after undoing what it started)."""
    binary = binary or kueue.locate()
    if reason := unavailable(binary):
        raise BinariesMissing(reason)
    deadline = time.monotonic() + timeout
    work = testbed.run_dir / "kueue"
    cleanup(testbed.run_dir)
    shutil.rmtree(work, ignore_errors=True)
    webhook_port, health_port, visibility_port = free_ports(3)
    address = _add_host_address(work)
    root = _prepare_root(testbed, binary, work / "root", address)
    config = kueue.controller_config(
        webhook_port=webhook_port,
        health_port=health_port,
        visibility_address=address,
        visibility_port=visibility_port,
        frameworks=frameworks,
    )
    (root / kueue.ROOT_CONFIG.lstrip("/")).write_text(yaml.safe_dump(config))
    base_url = f"https://{LOOPBACK}:{webhook_port}"
    with testbed.api() as api:
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kueue.NAMESPACE}})
        crds = kueue.crds(kueue.upstream_crds(binary), base_url=base_url, ca_pem=testbed.ca_pem)
        names = testbed.apply_crds(crds, timeout=_left(deadline))
        # NB: Established is not yet in discovery: right after an earlier module uninstalled
        # these CRDs and this one installed them again, Kueue started, found no
        # kueue.x-k8s.io/v1beta2 Workload and exited ("Unable to setup indexes")
        api.wait(
            functools.partial(_discovered, api, crds),
            timeout=_left(deadline),
            what="Kueue's resources in the apiserver's discovery",
        )
        daemon = daemons.start(
            kueue.NAME,
            [
                shutil.which("chroot") or "chroot",
                str(root),
                kueue.ROOT_BINARY,
                f"--config={kueue.ROOT_CONFIG}",
                f"--kubeconfig={kueue.ROOT_KUBECONFIG}",
                f"--visibility-server-port={visibility_port}",
            ],
            log=testbed.run_dir / "logs" / "kueue.log",
            env={"PATH": "/", "HOME": "/"},
        )
        testbed.state.daemons.append(daemon)
        testbed.state.ports[HEALTH_PORT] = health_port
        testbed.state.save()
        handle = Kueue(testbed, daemon, address, [], names)
        try:
            _wait_ready(daemon, f"http://{LOOPBACK}:{health_port}/readyz", deadline)
            for doc in kueue.webhook_configurations(
                kueue.upstream_webhooks(binary),
                base_url=base_url,
                ca_pem=testbed.ca_pem,
                frameworks=frameworks,
            ):
                api.apply(doc)
                handle.webhooks.append((doc["kind"], doc["metadata"]["name"]))
            for doc in kueue.visibility_objects(address=address, port=visibility_port, ca_pem=testbed.ca_pem):
                api.apply(doc)
            for version in kueue.VISIBILITY_VERSIONS:
                name = f"{version}.{kueue.VISIBILITY_GROUP}"
                api.wait(
                    functools.partial(_available, api, name),
                    timeout=_left(deadline),
                    what=f"APIService {name} Available",
                )
        except BaseException as e:
            handle.stop()
            if isinstance(e, Exception):
                raise KueueError(f"Kueue did not become ready: {e}\n{_tail(daemon)}") from e
            raise
    return handle


def cleanup(run_dir: Path) -> None:
    """Delete the veth pair a Kueue of this testbed added, and its root directory (idempotent;
    for ``Testbed.stop``; the log stays in ``logs/``)."""
    shutil.rmtree(run_dir / "kueue" / "root", ignore_errors=True)
    record = run_dir / "kueue" / "link"
    with contextlib.suppress(FileNotFoundError):
        link = record.read_text().strip()
        if link:
            subprocess.run(["ip", "link", "del", link], check=False, capture_output=True, timeout=30)
        record.unlink()


# -- steps ----------------------------------------------------------------------------------------


def _prepare_root(testbed: Testbed, binary: Path, root: Path, address: str) -> Path:
    """``root``: the binary, the kubeconfig and the certificates where the binary looks."""
    for sub in ("tmp", kueue.ROOT_WEBHOOK_CERTS, kueue.ROOT_VISIBILITY_CERTS, kueue.ROOT_METRICS_CERTS):
        (root / sub.lstrip("/")).mkdir(parents=True, exist_ok=True)
    target = root / kueue.ROOT_BINARY.lstrip("/")
    try:
        os.link(binary, target)
    except OSError:  # another filesystem
        shutil.copy2(binary, target)
    shutil.copy2(testbed.kubeconfig, root / kueue.ROOT_KUBECONFIG.lstrip("/"))
    pairs = (
        (kueue.ROOT_WEBHOOK_CERTS, (LOOPBACK, "localhost")),
        (kueue.ROOT_VISIBILITY_CERTS, kueue.visibility_hosts(address)),
        (kueue.ROOT_METRICS_CERTS, (LOOPBACK,)),
    )
    for directory, hosts in pairs:
        pair = testbed.issue_serving_cert(*hosts)
        pair.write(root / directory.lstrip("/") / "tls.crt", root / directory.lstrip("/") / "tls.key")
    return root


def _add_host_address(work: Path) -> str:
    """A /32 of 198.18.0.0/15 on one end of a new veth pair (recorded for :func:`cleanup`)."""
    used = subprocess.run(["ip", "-o", "addr"], check=True, capture_output=True, text=True).stdout
    base = ipaddress.ip_address(_ADDRESS_RANGE[0])
    address = str(base + random.randrange(256, _ADDRESS_RANGE[1] - 256))
    while address in used:
        address = str(base + random.randrange(256, _ADDRESS_RANGE[1] - 256))
    tag = secrets.token_hex(3)
    link, peer = f"srk{tag}", f"srq{tag}"
    work.mkdir(parents=True, exist_ok=True)
    _ip("link", "add", link, "type", "veth", "peer", "name", peer)
    (work / "link").write_text(link)
    _ip("addr", "add", f"{address}/32", "dev", link)
    for name in (link, peer):
        _ip("link", "set", name, "up")
    return address


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], check=False, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise KueueError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")


def _wait_ready(daemon: Daemon, url: str, deadline: float) -> None:
    with httpx.Client(timeout=2.0) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).is_success:
                    return
            if not daemon.running():
                raise KueueError(f"kueue exited with code {daemon.exit_code()} before it was ready")
            if time.monotonic() > deadline:
                raise KueueError(f"kueue was not ready at {url} in time")
            time.sleep(0.2)


def _discovered(api: KubeApi, crds: Sequence[Mapping[str, Any]]) -> bool:
    """Every served version of every CRD lists its resource in discovery (the per-version
    document and the aggregated one, which controller-runtime's mapper reads)."""
    aggregated = api.request(
        "GET",
        "/apis",
        headers={"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"},
    ).json()
    listed = {
        (group["metadata"]["name"], version["version"], resource["resource"])
        for group in aggregated.get("items") or []
        for version in group.get("versions") or []
        for resource in version.get("resources") or []
    }
    for crd in crds:
        spec = crd["spec"]
        for version in (v["name"] for v in spec["versions"] if v.get("served")):
            key = (spec["group"], version, spec["names"]["plural"])
            if key not in listed:
                return False
            try:
                document = api.get_json(f"/apis/{spec['group']}/{version}")
            except ApiError:
                return False
            if spec["names"]["plural"] not in {r.get("name") for r in document.get("resources") or []}:
                return False
    return True


def _available(api: KubeApi, name: str) -> bool:
    found = api.get("apiregistration.k8s.io/v1", "APIService", name)
    conditions = (found or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def _uninstall(api: KubeApi, crd_names: Sequence[str]) -> None:
    """Remove Kueue's CRDs and every object of them (finalizers dropped: no controller is left
    to drop them), then the visibility Service's namespace."""
    crd_api = "apiextensions.k8s.io/v1"
    for name in crd_names:
        crd = api.get(crd_api, "CustomResourceDefinition", name)
        if crd is None:
            continue
        # Nothing answers the conversion webhook any more: read and write the storage version.
        _merge_patch(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", {
            "spec": {"conversion": {"strategy": "None", "webhook": None}}
        })  # fmt: skip
        storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        # NB: right after a CRD changes, its storage answers 429 "(re)initializing" for a moment.
        listed = api.wait(
            functools.partial(api.get_json, f"/apis/{group}/{storage}/{plural}"),
            timeout=60,
            what=f"the {plural} left behind",
        )
        for item in listed.get("items", []):
            if item["metadata"].get("finalizers"):
                _merge_patch(
                    api, _item_path(group, storage, plural, item), {"metadata": {"finalizers": None}}
                )
        api.delete(crd_api, "CustomResourceDefinition", name)
    for name in crd_names:
        api.wait(
            functools.partial(_gone, api, crd_api, "CustomResourceDefinition", name),
            timeout=60,
            what=f"CRD {name} deleted",
        )
    api.delete("v1", "Namespace", kueue.NAMESPACE)
    # NB: until it is gone, a start right after (the next test module's) cannot create in it.
    api.wait(
        functools.partial(_gone, api, "v1", "Namespace", kueue.NAMESPACE),
        timeout=120,
        what=f"namespace {kueue.NAMESPACE} deleted",
    )


def _gone(api: KubeApi, api_version: str, kind: str, name: str) -> bool:
    return api.get(api_version, kind, name) is None


def _item_path(group: str, version: str, plural: str, item: dict[str, Any]) -> str:
    meta = item["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"/apis/{group}/{version}{ns}/{plural}/{meta['name']}"


def _merge_patch(api: KubeApi, path: str, body: dict[str, Any]) -> None:
    try:
        api.request(
            "PATCH", path, content=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        )
    except ApiError as e:
        if e.status != 404:
            raise


def _left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


def _tail(daemon: Daemon) -> str:
    lines = daemons.tail(daemon.log, lines=_LOG_TAIL_LINES)
    return f"--- last {_LOG_TAIL_LINES} lines of {daemon.log} ---\n{lines}"
