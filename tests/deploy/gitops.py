"""A real GitOps engine for the tests: Flux's server-side-apply library (``github.com/fluxcd/pkg/ssa``)
through ``hack/ssa-check`` (built by ``hack/ssa-check.sh`` into a cache outside the repository),
configured as Flux's kustomize-controller configures it (field manager ``kustomize-controller``,
its owner labels, staged apply, its cleanup of kubectl's managers).

``Flux.apply(docs)`` and ``Flux.diff(docs)`` return the program's JSON report:
``{"objects": [{"subject", "action", "patch"}], "drifted": [subject, ...]}``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "ssa-check.sh"
IN_CI = os.environ.get("CI", "").lower() == "true"
#: kustomize-controller's field manager, the one the ADR's Argo CD/Flux settings name.
FLUX_MANAGER = "kustomize-controller"


class SsaCheckMissing(Exception):
    """The program is not built and cannot be (no Go)."""


def ssa_check_binary() -> Path:
    """The cached binary; built by ``hack/ssa-check.sh`` when missing (Go needed)."""
    printed = subprocess.run([str(SCRIPT), "--print"], capture_output=True, text=True, check=False)
    if printed.returncode != 0:
        raise SsaCheckMissing(f"hack/ssa-check.sh --print failed: {printed.stderr.strip()}")
    binary = Path(printed.stdout.strip())
    if binary.is_file():
        return binary
    if shutil.which("go") is None:
        raise SsaCheckMissing(f"{binary} is not built and there is no Go to build it (make ssa-check)")
    t0 = time.monotonic()
    built = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=False, timeout=1800)
    if built.returncode != 0 or not binary.is_file():
        raise SsaCheckMissing(f"hack/ssa-check.sh failed:\n{built.stderr[-4000:]}")
    print(f"[gitops] built {binary} in {time.monotonic() - t0:.0f} s")
    return binary


@dataclass
class Flux:
    """``ssa-check`` against one kubeconfig, as one Kustomization named ``owner``."""

    binary: Path
    kubeconfig: Path
    owner: str = "sparkrun"

    def run(
        self,
        command: str,
        docs: list[dict[str, Any]],
        *,
        namespace: str | None = None,
        force: bool = False,
        fail_on_drift: bool = False,
    ) -> dict[str, Any]:
        """The report; with ``fail_on_drift`` the exit status (0, or 2 on drift) is in ``"rc"``."""
        argv = [str(self.binary), command, "--kubeconfig", str(self.kubeconfig), "--owner-name", self.owner]
        argv += ["--timeout", "90s"]
        if fail_on_drift:
            argv.append("--fail-on-drift")
        if namespace:
            argv += ["--namespace", namespace]
        if force:
            argv.append("--force")
        argv.append("-")
        done = subprocess.run(
            argv, input=yaml.safe_dump_all(docs), capture_output=True, text=True, check=False, timeout=120
        )
        allowed = (0, 2) if fail_on_drift else (0,)
        assert done.returncode in allowed, f"ssa-check {command} exited {done.returncode}:\n{done.stderr}"
        report: dict[str, Any] = json.loads(done.stdout)
        report["rc"] = done.returncode
        return report

    def apply(self, docs: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.run("apply", docs, **kw)

    def diff(self, docs: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        return self.run("diff", docs, **kw)


def drift_of(report: dict[str, Any]) -> dict[str, Any]:
    """``{subject: [patch ops]}`` of every drifted object (for assertion messages)."""
    by_subject = {o["subject"]: o for o in report["objects"]}
    return {s: by_subject[s].get("patch") or by_subject[s]["action"] for s in report["drifted"]}


def actions(report: dict[str, Any]) -> dict[str, str]:
    return {o["subject"]: o["action"] for o in report["objects"]}
