"""hack/lock.py --check (make verify): the images' lock files against their inputs, offline.

The locks in the repository pass; a copy of the tree where an input changed, a pin leaves its
bounds, a dependency has no pin or a pin has no hash fails, naming the lock and the package.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests import hack_script

ROOT = Path(__file__).resolve().parents[2]


LOCK = hack_script.load("lock.py", "hack_lock")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the locks are made from and of the locks."""
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for lock in LOCK.LOCKS:
        for name in (lock.path, lock.source):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def _problems(root: Path) -> list[str]:
    return [p for lock in LOCK.LOCKS for p in LOCK.check(lock, root)]


def test_the_repository_locks_match_their_inputs() -> None:
    assert _problems(ROOT) == []
    assert LOCK.main(["--check"]) == 0


def test_the_locks_pin_the_bounded_private_api_packages() -> None:
    pins = LOCK.parse_pins((ROOT / "runtime-images/tools/requirements.lock").read_text())
    assert {"uvicorn", "aiohttp", "huggingface-hub", "pyyaml"} <= pins.keys()
    assert all(hashes > 0 for _, hashes in pins.values())


def test_a_changed_input_is_drift(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"rich>=13.9",', '"rich>=13.9",\n    "left-pad>=1",'))
    problems = _problems(tree)
    assert "runtime-images/operator/requirements.lock: no pin for left-pad (x86_64)" in problems
    assert any("operator/requirements.lock: its inputs (pyproject.toml) changed" in p for p in problems)
    assert not [p for p in problems if "requirements-bench.lock" in p]


def test_a_pin_outside_the_bounds_fails(tree: Path) -> None:
    lock = tree / "runtime-images/operator/requirements.lock"
    lock.write_text(re.sub(r"(?m)^uvicorn==\S+", "uvicorn==0.56.0", lock.read_text()))
    (problem,) = _problems(tree)
    assert problem.startswith("runtime-images/operator/requirements.lock: uvicorn==0.56.0 does not satisfy")


def test_a_pin_without_hashes_fails(tree: Path) -> None:
    lock = tree / "runtime-images/tools/requirements-bench.lock"
    text = lock.read_text()
    lock.write_text(
        re.sub(r"(?m)^(llama-benchy==\S+) \\\n(    --hash=\S+ \\\n)*    --hash=\S+\n", r"\1\n", text)
    )
    assert _problems(tree) == [
        "runtime-images/tools/requirements-bench.lock: llama-benchy==0.4.0 has no --hash"
    ]


def test_a_missing_lock_fails(tree: Path) -> None:
    (tree / "runtime-images/tools/requirements.lock").unlink()
    assert _problems(tree) == ["runtime-images/tools/requirements.lock: missing (make lock)"]
