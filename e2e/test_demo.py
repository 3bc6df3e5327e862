"""``make demo``'s flow, run for real: ``sparkrun-k8s demo`` in its own testbed.

The session's local target (``conftest.py``) runs the demo once: a testbed with process nodes,
the operator, the shim and the gateway, the examples applied, Ready workloads, a chat through the
gateway with the openai client and a daemon API call. This test checks its exit status and the
steps it reports; the other flows then run against what it started, and the fixture stops it
(and checks that nothing of its testbed is left running).
"""

from __future__ import annotations

import pytest

from e2e.target import Target

pytestmark = pytest.mark.testbed  # a whole testbed (or a real cluster) behind every flow


def test_demo_runs_end_to_end(target: Target) -> None:
    if target.demo_output is None:
        pytest.skip("the demo runs only on the local testbed target (SPARKRUN_E2E_KUBECONFIG is set)")
    output = target.demo_output
    assert target.demo_returncode == 0, output[-6000:]
    for step in ("1. Check the examples", "2. Start the testbed", "5. Wait until every workload is Ready",
                 "6. Chat through the gateway", "7. Call the daemon API", "demo complete"):  # fmt: skip
        assert step in output
    assert "llama-405b (4 nodes) streamed" in output
    assert "workloads.list -> 3 workloads" in output
    assert target.run_dir is not None
    assert (target.run_dir / "endpoints.json").exists()
