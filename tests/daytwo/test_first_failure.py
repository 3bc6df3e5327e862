"""The first failure of a group is kept (ADR 0046), on the testbed with pods run as processes.

A 2-node workload whose rank 1 (the worker) exits with status 3 a second after it joined the
leader, three times over, after printing a line with a Hugging Face token and a bearer credential in
it (the engine stand-in's ``SPARKRUN_ENGINE_FAIL_*`` knobs). The kubelet puts the end of the
worker's log in its termination message (``FallbackToLogsOnError``); the JobSet controller
restarts the group, deleting its pods. ``status.firstFailure`` names rank 1, role worker, exit
code 3 and the log lines with the secrets redacted, and is the same record after two group
restarts, while ``status.lastFailure`` moves on. Once the group serves and the workload has been
Ready for ``spec.failures.resetAfterReadySeconds``, the first failure is cleared (the last one
stays).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import OperatorProcess, get_workload, wait_condition, workload
from tests.operator.test_workload_process import ON_PROCESS_NODES
from tests.process.helpers import wait_for

Factory = Callable[..., OperatorProcess]

NAME = "crashy-pair"
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"  # 34 letters: a Hugging Face token's shape
BEARER = "eyZmFrZS1jcmVkZW50aWFsLW9mLWEtdGVzdA"
LAST_WORDS = f"RuntimeError: weights unreachable with {TOKEN} (Authorization: Bearer {BEARER})"
#: Long enough that the moments a failing group looks Ready between its failures do not clear it.
RESET_SECONDS = 15
FAILING = [
    {"name": "SPARKRUN_ENGINE_FAIL_RANK", "value": "1"},
    {"name": "SPARKRUN_ENGINE_FAIL_AFTER", "value": "1"},
    {"name": "SPARKRUN_ENGINE_FAIL_CODE", "value": "3"},
    {"name": "SPARKRUN_ENGINE_FAIL_MESSAGE", "value": LAST_WORDS},
]


def _status(kube: KubeApi, namespace: str) -> dict[str, Any]:
    obj = get_workload(kube, namespace, NAME) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_the_first_failure_of_a_group_is_kept_through_restarts(
    kube: KubeApi, namespace: str, operator_factory: Factory, netns_network: None, tmp_path: Path
) -> None:
    operator_factory(namespace)
    ledger = tmp_path / "failures"
    failing = [
        *FAILING,
        {"name": "SPARKRUN_ENGINE_FAIL_TIMES", "value": "3"},
        {"name": "SPARKRUN_ENGINE_FAIL_LEDGER", "value": str(ledger)},
    ]
    kube.apply(
        workload(
            NAME,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "qwen-chat"},
            engine={"env": failing},
            failures={"resetAfterReadySeconds": RESET_SECONDS},
            topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
            scheduling=ON_PROCESS_NODES,
        )
    )
    # NB: a pass may write firstFailure from the JobSet's view before the pod event's record with
    # the log arrives, and enrich it then: wait for the record with its log lines
    first = wait_for(
        lambda: (found := _status(kube, namespace).get("firstFailure")) and found.get("log") and found,
        timeout=180,
        what="status.firstFailure with its log lines",
    )
    assert first["rank"] == 1, first
    assert first["role"] == "worker"
    assert first["exitCode"] == 3
    assert first["reason"] == "Error"
    assert first["replica"] == 0
    assert first["object"].startswith(f"Pod/{NAME}-0-")
    assert first["revision"] == _status(kube, namespace)["revision"]
    redacted = [line for line in first["log"] if line.startswith("RuntimeError: weights unreachable with")]
    assert len(redacted) == 1, first["log"]
    assert redacted[0].startswith(
        "RuntimeError: weights unreachable with [redacted] (Authorization: [redacted]"
    )
    assert any("rank 1 fails on request (exit status 3)" in line for line in first["log"])

    later = wait_for(
        lambda: (
            (s := _status(kube, namespace)).get("restarts", 0) >= 2
            and s.get("lastFailure", {}).get("time", "") > first["time"]
            and s
        ),
        timeout=300,
        what="two group restarts and a newer lastFailure",
    )
    assert later["firstFailure"] == first  # the same record, log lines and all
    assert later["lastFailure"] != first
    text = json.dumps(later)
    assert TOKEN not in text
    assert BEARER not in text

    # the third failure is the last (the ledger): once Ready for resetAfterReadySeconds, the
    # first failure is cleared, the last one stays
    wait_condition(kube, namespace, NAME, "Ready", timeout=180)
    cleared = wait_for(
        lambda: (s := _status(kube, namespace)).get("firstFailure") is None and s,
        timeout=90,
        what=f"status.firstFailure cleared after {RESET_SECONDS} s Ready",
    )
    assert cleared["lastFailure"]["time"] >= later["lastFailure"]["time"]
    assert cleared["lastFailure"]["rank"] in (0, 1)
    assert TOKEN not in json.dumps(cleared)
