"""``sparkrun-k8s demo``'s ModelCache step: a model downloaded once from a local Hub, then served.

1. starts the testbed's local Hugging Face-compatible Hub (:mod:`sparkrun_testbed.hfhub`) as a
   daemon the testbed owns (``testbed down`` and ``demo --down`` stop it), listening on the
   process nodes' ``InternalIP``: the host side of the pods' network, reachable from this machine
   and from pods, from nowhere else. It serves small generated repositories; the demo caches
   ``sparkrun-test/tiny-model`` at its tag ``v1.0`` (six files, one LFS blob of 1.5 MiB, served
   over about 5 s so that the Downloading phase shows);
2. makes a ``hostPath`` PersistentVolume pre-bound to the claim the cache creates (the testbed has
   no storage provisioner), applies the ModelCache, and prints each phase the operator writes
   (a watch, so none is missed) until it is Ready: the commit the tag resolved to, files, bytes;
3. applies an InferenceWorkload whose ``spec.model.cacheRef`` names the cache: its engine starts
   with ``HF_HUB_OFFLINE=1`` from the mounted claim (the demo's next step waits for it Ready and
   chats with it through the gateway).

Pods of process nodes mount volumes only with namespace networking (root or user namespaces);
with loopback pod addresses the step is skipped, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.rate import RateMeter
from sparkrun_testbed import daemons, plane, process_runtime, topology
from sparkrun_testbed.hfhub import TAG, TINY
from sparkrun_testbed.kubeapi import KubeApi

REPO = TINY
CACHE = "tiny-model"  # the ModelCache (and the claim it creates)
WORKLOAD = "tiny-model-cached"  # the InferenceWorkload that starts from it
SERVED = "tiny-cached"  # its served model name
REVISION = TAG  # a tag: the cache resolves it once to the full commit
LFS_MIB = 1.5
#: The Hub serves the LFS blob over about this many seconds (a ``slow`` fault), so that the
#: operator, which reads the downloader's progress every 2 s, has a Downloading phase to show.
DOWNLOAD_SECONDS = 5.0
#: The operator's ``--cache-mount-path`` in the demo: process-node pods create mount points
#: freely under ``/run`` (a tmpfs in their sandbox), not at the product's default ``/models``.
MOUNT_PATH = "/run/sparkrun-cache"
STORAGE_CLASS = "testbed-hostpath"
PHASE_TIMEOUT = 180.0


class CacheStepError(RuntimeError):
    """The cache step failed; the message says why."""


@dataclass
class CacheResult:
    """What the cache step made, for the summary, ``endpoints.json`` and the e2e checks."""

    hub_url: str = ""
    skipped: str = ""  # why the step did not run (loopback pod network), else empty
    phases: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def network_mode(testbed: plane.Testbed) -> str:
    """``netns`` or ``loopback``: how the process runtime runs pods (it reports at start)."""
    deadline = time.monotonic() + 30
    while (info := process_runtime.read_info(testbed.run_dir)) is None:
        if time.monotonic() > deadline:
            raise CacheStepError("the process runtime wrote no runtime.json within 30 s")
        time.sleep(0.2)
    return str(info["network"])


def run(testbed: plane.Testbed, console: Console, namespace: str) -> CacheResult:
    mode = network_mode(testbed)
    if mode != "netns":
        reason = f"process-node pods run with {mode} addresses here: they mount no volumes"
        console.print(f"[yellow]ModelCache step skipped: {reason}[/yellow]")
        return CacheResult(skipped=reason)
    with testbed.api() as api:
        result = CacheResult(hub_url=start_hub(testbed, _node_ip(api)))
        console.print(f"local Hub on {result.hub_url}: {TINY} at {REVISION} (LFS blob {LFS_MIB} MiB)")
        make_volume(api, testbed, namespace)
        since = api.get_json(api.resource_path(API_VERSION, "ModelCache", namespace=namespace))
        api.apply(cache_manifest(result.hub_url), namespace=namespace)
        console.print(f"applied ModelCache/{CACHE} (storage.create, {STORAGE_CLASS}, verify sha256)")
        result.status = watch_until_ready(
            testbed, console, namespace, since["metadata"]["resourceVersion"], result.phases
        )
        manifest = result.status.get("manifest") or {}
        console.print(
            f"[green]ModelCache {CACHE} Ready[/green]: "
            f"resolvedRevision {result.status.get('resolvedRevision')}, "
            f"{manifest.get('files')} files, {manifest.get('totalBytes')} bytes, "
            f"claim {result.status.get('claimName')}"
        )
        api.apply(workload_manifest(), namespace=namespace)
        console.print(
            f"applied InferenceWorkload/{WORKLOAD} (spec.model.cacheRef: {CACHE}, served as {SERVED})"
        )
    return result


def _node_ip(api: KubeApi) -> str:
    selector = f"{topology.PROCESS_RUNTIME_LABEL}=process"
    for node in api.list_items("v1", "Node", label_selector=selector):
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
    raise CacheStepError("no process node reports an InternalIP")


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def start_hub(testbed: plane.Testbed, host: str) -> str:
    """Start the local Hub as a testbed daemon on ``host``; its URL once it answers."""
    port = _free_port(host)
    argv = [sys.executable, "-m", "sparkrun_testbed.hfhub", "--host", host, "--port", str(port),
            "--lfs-mib", str(LFS_MIB)]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    hub = daemons.start("local-hub", argv, log=testbed.run_dir / "logs" / "local-hub.log", env=env)
    testbed.state.daemons.append(hub)
    testbed.state.save()  # NB: before waiting, so `testbed down` stops it whatever happens
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not hub.running():
            raise CacheStepError(f"the local Hub exited:\n{daemons.tail(hub.log, lines=20)}")
        try:
            if httpx.get(f"{url}/api/models/{TINY}", timeout=2.0).status_code == 200:
                _pace(url)
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise CacheStepError(f"the local Hub did not answer {url} within 60 s")


def _pace(url: str) -> None:
    rate = LFS_MIB * 2**20 / DOWNLOAD_SECONDS
    fault = {"kind": "slow", "path": f"{TINY}/model.safetensors", "rate": rate}
    httpx.post(f"{url}/_admin/faults", json=fault, timeout=5.0).raise_for_status()


def make_volume(api: KubeApi, testbed: plane.Testbed, namespace: str) -> Path:
    """A ``hostPath`` PersistentVolume under the run directory, pre-bound to the cache's claim."""
    path = testbed.run_dir / "volumes" / CACHE
    shutil.rmtree(path, ignore_errors=True)  # a fresh cache on every run of the demo
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{namespace}-{CACHE}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {"namespace": namespace, "name": CACHE},
            },
        }
    )
    return path


def cache_manifest(hub_url: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "metadata": {"name": CACHE},
        "spec": {
            "source": {"huggingFace": {"repo": TINY, "revision": REVISION, "endpoint": hub_url}},
            "storage": {
                "create": {"size": "1Gi", "storageClassName": STORAGE_CLASS, "accessModes": ["ReadWriteMany"]}
            },
            "verify": "sha256",
            # the download Job's pod runs the real downloader as a process on a process node
            "download": {"nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"}},
        },
    }


def workload_manifest() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceWorkload",
        "metadata": {"name": WORKLOAD},
        "spec": {
            "model": {"name": TINY, "servedName": SERVED, "cacheRef": {"name": CACHE}},
            "engine": {"maxModelLen": 2048},
            "topology": {"nodes": 1, "gpusPerNode": 1, "tensorParallel": 1},
            "replicas": 1,
        },
    }


def _describe(status: dict[str, Any], meter: RateMeter | None = None) -> str:
    """One line for a phase of the cache. With progress, the bytes done and (once ``meter`` has
    a real sample: rate.py) the rate and ETA measured here, as this client watched; the
    operator's message, which repeats the progress, only without progress."""
    phase = status.get("phase") or "Pending"
    progress, manifest = status.get("progress") or {}, status.get("manifest") or {}
    parts = [f"{phase:<11}"]
    if status.get("resolvedRevision"):
        parts.append(f"revision {status['resolvedRevision'][:12]}")
    if manifest:
        parts.append(f"{manifest.get('files')} files, {manifest.get('totalBytes')} bytes")
    total = progress.get("bytesTotal") or 0
    if progress and phase != "Ready":
        done = f"{progress.get('bytesDone', 0)}/{total} bytes done"
        rate = meter.describe(int(total)) if meter is not None else ""
        parts.append(f"{done}, {rate}" if rate else done)
    if status.get("message") and phase != "Ready" and not total:
        parts.append(str(status["message"])[:100])
    return "  ".join(parts)


def watch_until_ready(
    testbed: plane.Testbed, console: Console, namespace: str, since: str, phases: list[str]
) -> dict[str, Any]:
    """Watch the cache from ``since`` (before it was created); print every new phase and the
    progress in it; return its status once Ready. Raises :class:`CacheStepError` on Failed."""
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/modelcaches"
    deadline = time.monotonic() + PHASE_TIMEOUT
    last_line = ""
    meter = RateMeter()
    with _client(testbed) as http:
        while time.monotonic() < deadline:
            params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "30",
                      "fieldSelector": f"metadata.name={CACHE}", "allowWatchBookmarks": "false"}  # fmt: skip
            with http.stream("GET", path, params=params) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    since = (obj.get("metadata") or {}).get("resourceVersion") or since
                    status = obj.get("status") or {}
                    phase = status.get("phase") or "Pending"
                    if not phases or phases[-1] != phase:
                        phases.append(phase)
                    done = (status.get("progress") or {}).get("bytesDone")
                    if isinstance(done, int):
                        meter.update(done, time.monotonic())
                    text = _describe(status, meter)
                    if text != last_line:
                        console.print(f"  {CACHE}: {text}")
                        last_line = text
                    if phase == "Failed":
                        raise CacheStepError(f"ModelCache {CACHE} Failed: {status.get('message')}")
                    if phase == "Ready":
                        console.print(f"  phases seen: {' -> '.join(phases)}")
                        return dict(status)
    raise CacheStepError(f"ModelCache {CACHE} not Ready within {PHASE_TIMEOUT:.0f} s: {last_line}")


def _client(testbed: plane.Testbed) -> httpx.Client:
    token = yaml.safe_load(testbed.kubeconfig.read_text())["users"][0]["user"]["token"]
    context = ssl.create_default_context(cadata=testbed.ca_pem.decode())
    return httpx.Client(
        base_url=testbed.server,
        verify=context,
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(10.0, read=40.0),
    )


def summary_table(result: CacheResult, namespace: str, api: KubeApi) -> Table:
    table = Table(
        "cache", "phase", "resolvedRevision", "files", "bytes", "claim", "used by", title="ModelCaches"
    )
    for cache in api.list_items(API_VERSION, "ModelCache", namespace=namespace):
        status = cache.get("status") or {}
        manifest = status.get("manifest") or {}
        table.add_row(
            cache["metadata"]["name"],
            status.get("phase") or "",
            status.get("resolvedRevision") or "",
            str(manifest.get("files", "")),
            str(manifest.get("totalBytes", "")),
            status.get("claimName") or "",
            ", ".join(status.get("claims") or []),
        )
    if result.hub_url:
        table.caption = f"local Hub {result.hub_url} (stopped by `sparkrun-k8s testbed down`)"
    return table
