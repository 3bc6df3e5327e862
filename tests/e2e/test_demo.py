"""``make demo``'s flow, run for real: ``sparkrun-k8s demo --down`` in its own testbed.

It brings up a testbed with process nodes, the operator, the shim and the gateway, applies
the examples, waits for Ready workloads, chats through the gateway with the openai client and
calls the daemon API; then it stops everything. The test checks the exit status, the steps it
reports, and that nothing of its testbed is left running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrun_testbed import binaries, plane

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.mark.timeout(900)
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    try:
        missing = binaries.locate().missing()
    except binaries.BinariesMissing as error:
        missing = [str(error)]
    if missing:
        reason = f"testbed binaries missing: {missing} (make testbed-bin)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    run_root = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.cli.main", "demo", "--down", "--run-root", str(run_root),
         "--name", "e2e", "--timeout", "420"],
        capture_output=True,
        text=True,
        timeout=840,
        env={**os.environ, "COLUMNS": "160"},
        check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for step in ("1. Check the examples", "2. Start the testbed", "5. Wait until every workload is Ready",
                 "6. Chat through the gateway", "7. Call the daemon API", "demo complete"):  # fmt: skip
        assert step in output
    assert "llama-405b (4 nodes) streamed" in output
    assert "workloads.list -> 3 workloads" in output
    testbed = plane.Testbed.attach(run_root / "e2e")
    assert testbed is not None
    assert not testbed.running(), "the demo left testbed processes running"
