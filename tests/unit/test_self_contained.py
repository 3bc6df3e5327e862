"""A clone of the repository alone regenerates and verifies: nothing outside it is read.

The tree git knows about (tracked files plus untracked, not ignored ones) is copied into a
temporary directory that has no ``shared/`` (or anything else) beside it; there the generators
run (``python -m sparkrun_operator.api.generate`` and ``hack/gen-ops-catalog.py``, importing the
copy's own package) and ``hack/verify-clean.sh`` must find no difference from what was copied.
A generator that reads the workplace's shared folder beside the checkout fails here, and so
does one whose output drifted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repo_files import tree_files

REPO = Path(__file__).resolve().parents[2]
#: The folder beside the checkout that only this workplace has (spelled so that this file does
#: not match its own search).
SIBLING = "/".join(("..", "shared"))


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("this test copies the git tree: git and a checkout are prerequisites")
    root = tmp_path_factory.mktemp("alone") / "repo"
    for name in tree_files():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    assert not (root.parent / "shared").exists()
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "copy")
    return root


def _run(clone: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(clone / "operator")}
    return subprocess.run(list(argv), cwd=clone, env=env, capture_output=True, text=True, timeout=300)


def test_generators_read_only_the_repository(clone: Path) -> None:
    probe = _run(clone, sys.executable, "-c", "import sparkrun_operator; print(sparkrun_operator.__file__)")
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).is_relative_to(clone), "the copy's own package must be imported"
    crds = _run(clone, sys.executable, "-m", "sparkrun_operator.api.generate", "--root", str(clone))
    assert crds.returncode == 0, crds.stderr
    ops = _run(clone, sys.executable, "hack/gen-ops-catalog.py")
    assert ops.returncode == 0, ops.stderr
    verify = _run(clone, "bash", "hack/verify-clean.sh")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_chart_outputs_regenerate_in_the_copy(clone: Path) -> None:
    """The chart's values table and ``manifests/`` (rendered with the pinned helm) too."""
    from tests.deploy.chart import helm_binary

    helm = helm_binary()
    if helm is None:
        reason = "the pinned helm (make testbed-bin) renders manifests/"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    table = _run(clone, sys.executable, "hack/chart-values-table.py")
    assert table.returncode == 0, table.stderr
    schema = _run(clone, sys.executable, "hack/chart-values-schema.py")
    assert schema.returncode == 0, schema.stderr
    manifests = _run(clone, sys.executable, "hack/render-manifests.py", "--helm", helm)
    assert manifests.returncode == 0, manifests.stderr
    verify = _run(clone, "bash", "hack/verify-clean.sh")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_verify_fails_on_drift_and_on_untracked_generated_files(clone: Path) -> None:
    catalog = clone / "operator" / "sparkrun_operator" / "ops" / "data" / "daemon-ops.json"
    original = catalog.read_text()
    stray = clone / "crds" / "stray.sparkrun.dev.yaml"
    try:
        catalog.write_text(original.replace('"version"', '"versio"', 1))
        drift = _run(clone, "bash", "hack/verify-clean.sh")
        assert drift.returncode == 1
        assert "differ from what is committed" in drift.stderr
        catalog.write_text(original)
        stray.write_text("kind: Stray\n")
        untracked = _run(clone, "bash", "hack/verify-clean.sh")
        assert untracked.returncode == 1
        assert "crds/stray.sparkrun.dev.yaml" in untracked.stderr
    finally:
        catalog.write_text(original)
        stray.unlink(missing_ok=True)


def test_nothing_in_the_build_names_the_workplace_folder() -> None:
    paths = ["Makefile", ".ci", "hack", "operator", "tests", "bench", "pyproject.toml"]
    found = subprocess.run(
        ["git", "grep", "-n", "-I", "-F", "-e", SIBLING, "-e", 'parent / "shared"', "--", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    me = "tests/unit/test_self_contained.py"
    hits = [line for line in found.stdout.splitlines() if not line.startswith(me)]
    assert hits == []
