"""The public sparkrun reference implementation, installed on demand for differential tests.

``reference_python()`` returns an interpreter that can ``import sparkrun`` (version
``REFERENCE_VERSION``): ``$SPARKRUN_REFERENCE_PYTHON`` if set, else a venv it creates once in
``~/.cache/sparkrun-reference/<version>`` from a Python >= 3.12 found on the machine and PyPI.
Outside CI a missing prerequisite skips the test; under ``CI=true`` it fails it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

REFERENCE_VERSION = "0.4.1"
IN_CI = os.environ.get("CI", "").lower() == "true"
_CANDIDATES = ("python3.13", "python3.12")
# NB: pyenv shims on PATH fail unless that version is selected; look at its installs directly.
_PYENV_GLOBS = ("*/bin/python3.13", "*/bin/python3.12")


def _missing(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _importable(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import sparkrun"], capture_output=True, check=False, timeout=60)
    return probe.returncode == 0


def _find_base_python() -> str | None:
    found = [shutil.which(name) for name in _CANDIDATES]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for pattern in _PYENV_GLOBS:
        found += [str(p) for p in sorted(pyenv.glob(pattern), reverse=True)]
    for candidate in found:
        if candidate is None:
            continue
        probe = [candidate, "-c", "import venv, ensurepip"]
        if subprocess.run(probe, capture_output=True, check=False, timeout=60).returncode == 0:
            return candidate
    return None


def reference_python() -> str:
    """An interpreter with the reference ``sparkrun`` importable (see module docs)."""
    explicit = os.environ.get("SPARKRUN_REFERENCE_PYTHON")
    if explicit:
        if not _importable(explicit):
            _missing(f"SPARKRUN_REFERENCE_PYTHON={explicit} cannot import sparkrun")
        return explicit
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "sparkrun-reference"
        / REFERENCE_VERSION
    )
    python = cache / "bin" / "python"
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{REFERENCE_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # NB: pytest-xdist workers or parallel runs share it
        if python.exists() and _importable(str(python)):
            return str(python)
        base = _find_base_python()
        if base is None:
            _missing("no Python >= 3.12 on PATH to run the sparkrun reference (it requires >= 3.12)")
        shutil.rmtree(cache, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(cache)], check=True, capture_output=True, timeout=300)
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"sparkrun=={REFERENCE_VERSION}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if install.returncode != 0:
            _missing(f"pip install sparkrun=={REFERENCE_VERSION} failed: {install.stderr[-2000:]}")
    return str(python)
