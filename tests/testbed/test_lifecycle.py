"""The testbed's own lifecycle through the CLI: a second testbed beside the session's one,
reachable from other processes through its run directory, and gone without a trace on down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrun_testbed.plane import Testbed
from sparkrun_testbed.state import State

pytestmark = pytest.mark.testbed


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.cli.main", "testbed", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in "ZX"


def test_cli_up_status_env_down_leaves_nothing_running(testbed: Testbed, tmp_path: Path) -> None:
    env = {**os.environ, "SPARKRUN_TESTBED_BIN": str(testbed.state.bin_dir)}
    env.pop("KUBECONFIG", None)
    common = ("--name", "side", "--run-root", str(tmp_path))
    up = _cli(
        "up", *common, "--nodes", "1", "--gpus-per-node", "4", "--crds", str(tmp_path / "none"), env=env
    )
    kubeconfig = tmp_path / "side" / "kubeconfig"
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig}"
        state = State.load(tmp_path / "side")
        assert state is not None
        assert state.phase == "running"
        assert {d.name for d in state.daemons} == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "jobset",
        }
        assert state.server != testbed.server, "side-by-side testbeds get their own ports"

        status = _cli("status", *common, env=env)
        assert status.returncode == 0, status.stderr
        assert "kube-apiserver" in status.stderr
        env_out = _cli("env", *common, env=env)
        assert env_out.stdout == f"export KUBECONFIG={kubeconfig}\n"

        side = Testbed.attach(tmp_path / "side")
        assert side is not None
        with side.api() as api:
            (node,) = api.list_items("v1", "Node")
            assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        pids = [pid for d in state.daemons for pid in d.group_pids()]
        assert len(pids) >= 6
    finally:
        down = _cli("down", *common, env=env)
    assert down.returncode == 0, down.stderr
    assert not [pid for pid in pids if _alive(pid)], "down must leave no testbed process running"
    assert not (tmp_path / "side" / "etcd-data").exists()
    # NB: checked through the library: each CLI start costs seconds of imports.
    stopped = Testbed.attach(tmp_path / "side")
    assert stopped is not None
    assert stopped.state.phase == "stopped"
    assert not stopped.running()
    assert not any(c.running for c in stopped.status())
    # The session's testbed was not disturbed.
    assert all(c.running and c.healthy for c in testbed.status())
