"""Render the Helm chart with the pinned `helm` binary (built by `make testbed-bin`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "sparkrun-operator"
RELEASE, NAMESPACE = "sparkrun", "sparkrun-system"


def helm_binary() -> str | None:
    """The helm of the testbed cache ($SPARKRUN_TESTBED_BIN or hack/testbed-bin.sh), else PATH."""
    dirs = [os.environ.get("SPARKRUN_TESTBED_BIN", "")]
    printed = subprocess.run(
        [str(REPO / "hack" / "testbed-bin.sh"), "--print"], capture_output=True, text=True, check=False
    )
    dirs.append(printed.stdout.strip())
    for directory in dirs:
        if directory and (Path(directory) / "helm").is_file():
            return str(Path(directory) / "helm")
    return shutil.which("helm")


def require_helm() -> str:
    """:func:`helm_binary`, or fail (under ``CI=true``) or skip the calling test without one."""
    found = helm_binary()
    if found is None:
        reason = "no helm binary: run `make testbed-bin` (it builds the pinned helm)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    return found


class Rendered:
    """The documents of one `helm template`, looked up by kind and name."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = self.find(kind, name, namespace)
        assert found is not None, f"no {kind} {name} in {sorted(self.names())}"
        return found

    def find(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for doc in self.of(kind):
            meta = doc["metadata"]
            if meta["name"] == name and (namespace is None or meta.get("namespace") == namespace):
                return doc
        return None

    def names(self) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in self.docs}

    def container(self, deployment: str) -> dict[str, Any]:
        pod = self.get("Deployment", deployment)["spec"]["template"]["spec"]
        containers: list[dict[str, Any]] = pod["containers"]
        assert len(containers) == 1
        return containers[0]


def helm(helm_bin: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin, *args], capture_output=True, text=True, check=check, timeout=120)


def render(helm_bin: str, tmp: Path, values: dict[str, Any] | None = None, *extra: str) -> Rendered:
    """``helm template`` of the chart with ``values`` (a values file), test hooks included."""
    argv = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values:
        path = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    out = helm(helm_bin, *argv, *extra).stdout
    return Rendered([d for d in yaml.safe_load_all(out) if d])
