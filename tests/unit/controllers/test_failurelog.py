"""The operator's memory of pod failures (``controllers/failurelog.py``): a failure seen at a
pod event is kept with its log lines redacted, once, bounded per workload and in workloads, and
forgotten with the workload."""

from __future__ import annotations

from typing import Any

from sparkrun_operator.controllers.failurelog import STRANGERS, FailureLog
from sparkrun_operator.ops.redact import REDACTED
from sparkrun_operator.render import keys

TOKEN = "hf_" + "q" * 34


def _pod(workload: str, second: int, *, code: int = 3, name: str = "p", ns: str = "team-a") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                keys.LABEL_WORKLOAD: workload,
                keys.LABEL_ROLE: "worker",
                keys.JOBSET_NAME_LABEL: f"{workload}-0-abcde",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "vllm",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Error",
                            "finishedAt": f"2026-09-01T12:00:{second:02d}Z",
                            "message": f"starting\nHF_TOKEN={TOKEN}\ncrash\n",
                        }
                    },
                }
            ]
        },
    }


def test_a_failure_is_kept_once_with_its_log_redacted() -> None:
    log = FailureLog()
    kept = log.record(_pod("chat", 1))
    assert kept is not None
    assert kept.rank == 1
    assert kept.log == ["starting", f"HF_TOKEN={REDACTED}", "crash"]
    assert log.record(_pod("chat", 1)) is None  # the same failure again: nothing parsed twice
    assert log.of(("team-a", "chat")) == (kept,)
    assert log.record(_pod("chat", 2, code=0)) is None  # no failure
    assert log.record({"metadata": {"name": "x"}}) is None  # not a workload's pod


def test_bounded_per_workload_and_in_workloads_and_dropped_with_the_workload() -> None:
    log = FailureLog(per_workload=2, workloads=3)
    for second in range(5):
        log.record(_pod("chat", second, name=f"p{second}"))
    assert [r.object for r in log.of(("team-a", "chat"))] == ["Pod/p3", "Pod/p4"]
    for i in range(4):
        log.record(_pod(f"w{i}", 1))
    assert len(log) == 3
    assert log.of(("team-a", "chat")) == ()  # the one that recorded least recently went first
    log.drop(("team-a", "w3"))
    assert log.of(("team-a", "w3")) == ()
    assert len(log) == 2


def test_pods_labelled_with_made_up_workloads_cannot_push_out_the_records_of_real_ones() -> None:
    # a tenant's own pods may carry any workload label in its namespace; failing ones for names
    # no workload has are kept apart, in a small pool of their own
    log = FailureLog(workloads=8)
    real = {("team-a", f"real{i}") for i in range(8)}
    for i in range(8):
        assert log.record(_pod(f"real{i}", 1), known=real.__contains__) is not None
    for i in range(5000):
        log.record(_pod(f"fake{i}", 1, ns="team-b"), known=real.__contains__)
    assert all(log.of(key) for key in real)
    assert len(log) <= 8 + STRANGERS
    # a workload not planned yet (the operator just started) still has its record when it is
    kept = log.record(_pod("late", 2), known=real.__contains__)
    assert kept is not None
    assert log.of(("team-a", "late")) == (kept,)
    assert log.record(_pod("late", 2), known=lambda _: True) is None  # the same failure, once
    log.drop(("team-a", "late"))
    assert log.of(("team-a", "late")) == ()
