"""hack/gpu-agent-check.sh on a machine without an NVIDIA driver (this one, CI) fails as it must:
exit 1, the sample printed with NVML's error. On a GPU machine it is the real-NVML check."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys

import pytest

from tests.deploy.chart import REPO


def test_the_check_fails_without_a_gpu_and_says_why() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("an NVIDIA driver is installed: run hack/gpu-agent-check.sh itself")
    done = subprocess.run(
        [str(REPO / "hack" / "gpu-agent-check.sh"), sys.executable],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "SPARKRUN_AGENT_PORT": "19417"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: no GPU read through NVML" in done.stderr
    sample = json.loads(done.stdout[: done.stdout.index("\n}\n") + 2])
    assert sample["nvml"]["available"] is False
    assert sample["nvml"]["error"].startswith("nvmlInit: ")
    assert 'sparkrun_gpu_agent_nvml_available{Hostname="' in done.stdout
