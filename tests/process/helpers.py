"""Builders and probes for the process-node tests: manifests, waits, and the host's processes."""

from __future__ import annotations

import contextlib
import ipaddress
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sparkrun_testbed import process_runtime, topology
from sparkrun_testbed.kubeapi import KubeApi

T = TypeVar("T")

MARK_ENV = "SPARKRUN_TEST_MARK"
ENGINE_IMAGE = "vllm/vllm-openai:v0.11.0"
TOLERATION = {
    "key": topology.PROCESS_TAINT["key"],
    "operator": "Equal",
    "value": topology.PROCESS_TAINT["value"],
    "effect": topology.PROCESS_TAINT["effect"],
}
JOBSET = "jobset.x-k8s.io/v1alpha2"


def pod_spec(
    containers: Sequence[dict[str, Any]],
    *,
    init: Sequence[dict[str, Any]] = (),
    restart: str = "Never",
    mark: str | None = None,
    grace: int = 2,
) -> dict[str, Any]:
    """A pod spec pinned to process nodes; ``mark`` goes into every container's environment."""

    def marked(container: dict[str, Any]) -> dict[str, Any]:
        if mark is None:
            return container
        return {**container, "env": [*container.get("env", []), {"name": MARK_ENV, "value": mark}]}

    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": {topology.PROCESS_RUNTIME_LABEL: "process"},
        "tolerations": [TOLERATION],
        "containers": [marked(c) for c in containers],
    }
    if init:
        spec["initContainers"] = [marked(c) for c in init]
    return spec


def pod(name: str, spec: dict[str, Any], *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def shell(name: str, script: str, **extra: Any) -> dict[str, Any]:
    """A busybox-image container running ``sh -c script`` (the host's /bin/sh)."""
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script], **extra}


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns a truthy value; fail the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def wait_pod(
    kube: KubeApi,
    namespace: str,
    name: str,
    check: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 60,
    what: str = "",
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        current = kube.get("v1", "Pod", name, namespace=namespace)
        return current if current is not None and check(current) else None

    return wait_for(probe, timeout=timeout, what=what or f"pod {namespace}/{name}")


def phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase", ""))


def condition(p: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (p.get("status") or {}).get("conditions") or ():
        if cond["type"] == kind:
            return dict(cond)
    return {}


def ready(p: dict[str, Any]) -> bool:
    return condition(p, "Ready").get("status") == "True"


def container(p: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (p.get("status") or {}).get(key) or ():
        if status["name"] == name:
            return dict(status)
    return {}


def marked_pids(mark: str) -> list[int]:
    """Every live process on this machine whose environment carries ``MARK_ENV=mark``."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
            if needle in environ.split(b"\0") and stat[stat.rindex(")") + 2] not in "ZX":
                found.append(int(entry.name))
    return found


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def cmdline_of(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def network_mode(run_dir: Path) -> str:
    """``netns`` or ``loopback``: what the testbed's process runtime runs pods with."""
    info = wait_for(
        lambda: process_runtime.read_info(run_dir), timeout=30, what="the process runtime's runtime.json"
    )
    return str(info["network"])


def routable_pod_ip(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_private and not address.is_loopback and not address.is_link_local
