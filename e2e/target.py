"""The target of the e2e flows: a cluster with the product installed, and how to reach it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Target:
    """Where the flows run and how to reach the product there."""

    kubeconfig: Path
    gateway_url: str
    daemon_url: str
    daemon_ca: str | None
    token: str
    namespace: str
    image: str | None = None
    #: The gateway's bearer token and CA, where the gateway is reached through kube-apiserver's
    #: Service proxy (the token then authenticates to the apiserver; the gateway has no keys).
    gateway_token: str | None = None
    gateway_ca: str | None = None
    #: ``spec.scheduling`` for the flow's workload (the pod testbed's tainted process nodes).
    scheduling: dict[str, Any] | None = None
    #: ``sparkrun-k8s demo``'s combined output and exit status (local target only).
    demo_output: str | None = None
    demo_returncode: int | None = None
    run_dir: Path | None = None

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(
            ["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, timeout=600, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr or result.stdout}")
        return result.stdout


def admin_token(kubeconfig: Path) -> str:
    """The bearer token of a testbed kubeconfig (its first user: the admin)."""
    import yaml

    doc = yaml.safe_load(kubeconfig.read_text())
    return str(doc["users"][0]["user"].get("token") or "")
