"""Fixtures of the CLI's tests: the operator on the testbed (``operator_factory``, shared with
tests/operator), a terminal (``terminal``, tests/cli/tmux.py) and ``sparkrun_k8s`` to run the real
command as a subprocess with the testbed's kubeconfig."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkrun_testbed import plane
from tests.cli.tmux import terminal
from tests.operator.conftest import operator_factory, pytest_runtest_makereport

__all__ = ["operator_factory", "pytest_runtest_makereport", "sparkrun_k8s", "terminal"]

#: the command as a user runs it (this venv's console script)
SPARKRUN_K8S = str(Path(sys.executable).with_name("sparkrun-k8s"))


@pytest.fixture
def sparkrun_k8s(testbed: plane.Testbed) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``sparkrun_k8s(*args, timeout=60, env=None)``: run ``sparkrun-k8s ARGS`` with the testbed's
    kubeconfig; the completed process (text stdout/stderr, returncode)."""

    def run(
        *args: str, timeout: float = 60.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = {
            **os.environ,
            "KUBECONFIG": str(testbed.kubeconfig),
            "NO_COLOR": "1",
            "COLUMNS": "200",
            **(env or {}),
        }
        return subprocess.run(
            [SPARKRUN_K8S, *args], capture_output=True, text=True, timeout=timeout, env=full, check=False
        )

    return run
