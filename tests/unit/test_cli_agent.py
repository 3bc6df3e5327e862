"""``sparkrun-k8s agent``'s command line: the man page, the defaults the chart relies on, bounds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkrun_operator.api.telemetry import AGENT_DEFAULT_PORT
from sparkrun_operator.cli.main import build_parser

SPARKRUN_K8S = str(Path(sys.executable).with_name("sparkrun-k8s"))


def test_defaults_and_node_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    args = build_parser(only="agent").parse_args(["agent"])
    assert (args.node, args.port, args.interval, args.nvml_module) == (
        "gpu-7",
        AGENT_DEFAULT_PORT,
        5.0,
        "pynvml",
    )
    assert (args.proc, args.no_labels, args.kubeconfig) == ("/proc", False, None)


@pytest.mark.parametrize("interval", ["0", "-1", "3601"])
def test_the_interval_is_bounded(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser(only="agent").parse_args(["agent", "--interval", interval])
    assert stopped.value.code == 2
    assert "between 0.1 and 3600 seconds" in capsys.readouterr().err


def test_help_reads_like_a_man_page() -> None:
    done = subprocess.run([SPARKRUN_K8S, "agent", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for part in ("GET /v1/sample", "GET /metrics", "nvidia.com/gfd.timestamp", "examples:", "exit codes:"):
        assert part in done.stdout, part
