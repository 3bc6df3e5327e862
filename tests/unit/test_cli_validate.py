"""``sparkrun-k8s validate``: the real console script on real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.cli.main", "validate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_examples_are_valid() -> None:
    result = _run(*sorted(str(p) for p in (ROOT / "examples").glob("*.yaml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("valid") >= 8


def test_bad_manifest_fails_with_field_path() -> None:
    bad = """
apiVersion: sparkrun.dev/v1alpha1
kind: InferenceWorkload
metadata: {name: bad}
spec:
  model: {name: org/m}
  topology: {nodes: 2, gpusPerNode: 8, tensorParallel: 8}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
"""
    result = _run("-", stdin=bad)
    assert result.returncode == 1
    assert "spec.topology.gpusPerNode" in result.stdout
    assert "skipped" in result.stdout
