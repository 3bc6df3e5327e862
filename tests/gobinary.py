"""The Go binaries the tests need. The testbed's own (``hack/<name>-bin.sh``: the llm-d simulator,
the endpoint picker, :func:`go_binary`): built under CI=true when missing (a failed build fails
the test), else the test skips. The test tools (``hack/<name>.sh`` on ``hack/go-tool.sh``:
netpol-eval, flux-health, oci-registry, :func:`go_tool`): built when missing wherever Go is
(a failed build fails the test); without Go the test skips (fails under CI=true)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sparkrun_testbed import epp, plane
from sparkrun_testbed.binaries import BinariesMissing

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parents[1]


def go_binary(locate: Callable[[Path], Path], build: Callable[[Path], Path], script: str) -> Path:
    """The binary ``locate(REPO)`` names when it is built; else, under CI=true, ``build(REPO)``;
    else a skip. ``script``: the build script's path, for the reason."""
    try:
        path: Path | None = locate(REPO)
        why = f"{path} is not built ({script})"
    except BinariesMissing as exc:
        path, why = None, str(exc)
    if path is not None and os.access(path, os.X_OK):
        return path
    if not IN_CI:
        pytest.skip(why)
    try:
        return build(REPO)
    except Exception as exc:  # any failure to build fails the test under CI
        pytest.fail(f"prerequisite missing under CI=true: {why}; the build failed: {exc}", pytrace=False)


def go_tool(name: str, *, timeout: float = 1200) -> Path:
    """``hack/<name>.sh``'s binary: the cached one, else built (``timeout`` seconds at most)."""
    script = REPO / "hack" / f"{name}.sh"
    printed = subprocess.run([str(script), "--print"], capture_output=True, text=True, check=False)
    binary = Path(printed.stdout.strip())
    if printed.returncode == 0 and binary.is_file():
        return binary
    if shutil.which("go") is None:
        reason = f"{binary} is not built and there is no Go to build it (make {name})"
        if IN_CI:
            pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    built = subprocess.run([str(script)], capture_output=True, text=True, check=False, timeout=timeout)
    if built.returncode != 0 or not binary.is_file():
        pytest.fail(f"hack/{name}.sh failed:\n{built.stderr[-4000:]}")
    return binary


def picker(testbed: plane.Testbed) -> Path:
    """The endpoint picker (``hack/epp-bin.sh``, :func:`go_binary`), with the InferencePool CRD
    (v1, from the same module) installed on ``testbed``."""
    binary = go_binary(epp.locate, epp.build, "hack/epp-bin.sh")
    crd = yaml.safe_load(epp.inferencepool_crd(binary).read_text())
    assert testbed.apply_crds([crd]) == ["inferencepools.inference.networking.k8s.io"]
    return binary
