"""The first failure of a group (``plan/failures.py``, ``plan/workload/counts.py``; ADR 0046).

Tested: a failed pod becomes a record with its replica, rank (leader 0, a worker its completion
index + 1, from the label or the annotation), role, revision and exit code; a container killed by
its pod's deletion is no failure; the log lines are the redacted termination message, bounded in
lines, characters and JSON bytes whatever the input (1 MiB, 10,000 lines); ``keep`` sets the
first failure once and moves the last one on; the first is cleared once the workload has been
Ready for ``resetAfterReadySeconds`` without a newer failure, and the planner looks again then.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.history import FAILURE_LOG_BYTES, FAILURE_LOG_LINE_CHARS, FAILURE_LOG_LINES
from sparkrun_operator.api.meta import Condition
from sparkrun_operator.api.workload import FailureRecord, InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.ops.redact import REDACTED, Redactor
from sparkrun_operator.plan import failures, observe
from sparkrun_operator.plan.workload import Observation, Plan
from sparkrun_operator.plan.workload.counts import count, reset_first_failure
from sparkrun_operator.render import keys

T0 = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
TOKEN = "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH"  # 34 letters: a Hugging Face token's shape
REDACT = Redactor().text


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(
    *,
    role: str = "worker",
    index: str | None = "0",
    where: str = "labels",
    code: int = 3,
    message: str = "",
    finished: dt.datetime = T0,
    deleting: dt.datetime | None = None,
) -> dict[str, Any]:
    labels = {
        keys.LABEL_WORKLOAD: "chat",
        keys.LABEL_ROLE: role,
        keys.LABEL_REPLICA: "1",
        keys.LABEL_REVISION: "0123456789",
        keys.JOBSET_NAME_LABEL: "chat-1-01234",
    }
    annotations: dict[str, str] = {}
    if index is not None:
        (labels if where == "labels" else annotations)[failures.COMPLETION_INDEX] = index
    meta: dict[str, Any] = {
        "name": f"chat-1-01234-{role}-0-{index or 0}-xyz",
        "namespace": "team-a",
        "labels": labels,
        "annotations": annotations,
    }
    if deleting is not None:
        meta["deletionTimestamp"] = _stamp(deleting)
        meta["deletionGracePeriodSeconds"] = 30
    terminated = {
        "exitCode": code,
        "reason": "Error" if code else "Completed",
        "finishedAt": _stamp(finished),
    }
    if message:
        terminated["message"] = message
    return {
        "metadata": meta,
        "status": {
            "phase": "Failed" if code else "Succeeded",
            "containerStatuses": [{"name": keys.CONTAINER_ENGINE, "state": {"terminated": terminated}}],
        },
    }


# -- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_worker_is_its_completion_index_plus_one(where: str) -> None:
    record = failures.failure_of(_pod(index="2", where=where, message="boom\n"), REDACT)
    assert record is not None
    assert (record.role, record.rank, record.replica, record.revision) == ("worker", 3, 1, "0123456789")
    assert (record.reason, record.exit_code, record.time) == ("Error", 3, T0)
    assert record.object == "Pod/chat-1-01234-worker-0-2-xyz"
    assert record.message == "container vllm exited with code 3"
    assert record.log == ["boom"]


def test_the_leader_is_rank_zero_and_an_unknown_index_no_rank() -> None:
    leader = failures.failure_of(_pod(role="leader", index=None))
    assert leader is not None
    assert (leader.role, leader.rank) == ("leader", 0)
    for bad in (None, "x", "-1", "64", "9" * 40):
        worker = failures.failure_of(_pod(index=bad))
        assert worker is not None, bad
        assert (worker.role, worker.rank) == ("worker", None), bad


def test_a_success_or_a_kill_by_deletion_is_no_failure() -> None:
    assert failures.failure_of(_pod(code=0)) is None
    # the group restart deleted the pod (grace 30 s) and its container stopped after that ...
    killed = _pod(code=143, finished=T0, deleting=T0 + dt.timedelta(seconds=20))
    assert failures.failure_of(killed) is None
    # ... but one that failed before the deletion was asked for did fail
    failed = _pod(code=3, finished=T0, deleting=T0 + dt.timedelta(seconds=60))
    assert failures.failure_of(failed) is not None


def test_the_pod_index_never_holds_the_log_and_the_message_is_not_the_log() -> None:
    pod = observe.pod_from(_pod(message=f"token={TOKEN}\n"))
    assert pod is not None
    assert pod.failure is not None
    assert pod.failure.log == []
    assert TOKEN not in pod.failure.model_dump_json()


def test_a_secret_in_the_log_is_redacted() -> None:
    message = (
        "INFO loading weights\n"
        f"ERROR download failed with {TOKEN}\n"
        "Authorization: Bearer abcdefghijklmnop0123\n"
        "rank 1 exits\n"
    )
    record = failures.failure_of(_pod(message=message), REDACT)
    assert record is not None
    text = "\n".join(record.log)
    assert TOKEN not in text
    assert "abcdefghijklmnop0123" not in text
    assert record.log[0] == "INFO loading weights"
    assert record.log[1] == f"ERROR download failed with {REDACTED}"
    assert REDACTED in record.log[2]
    assert record.log[-1] == "rank 1 exits"


def _bounded(lines: list[str]) -> None:
    assert len(lines) <= FAILURE_LOG_LINES
    assert all(len(line) <= FAILURE_LOG_LINE_CHARS for line in lines)
    assert len(json.dumps(lines, ensure_ascii=False, separators=(",", ":")).encode()) <= FAILURE_LOG_BYTES
    FailureRecord(reason="Error", time=T0, log=lines)  # the CRD's bounds hold


def test_the_log_is_bounded_for_a_mebibyte_and_for_ten_thousand_lines() -> None:
    started = time.perf_counter()
    one_line = failures.log_lines("x" * (1 << 20), REDACT)
    many = failures.log_lines("".join(f"line {i} {TOKEN}\n" for i in range(10_000)), REDACT)
    wide = failures.log_lines("\n".join(['"\\' * 600] * 50), REDACT)
    assert time.perf_counter() - started < 5  # linear: a few milliseconds
    assert one_line == []  # no line break in the part read: a cut line is not shown
    _bounded(many)
    _bounded(wide)
    assert len(many) == FAILURE_LOG_LINES
    assert many[-1] == f"line 9999 {REDACTED}"
    assert wide
    assert all(line.endswith("…") for line in wide)


def test_control_characters_and_blank_lines_are_dropped() -> None:
    lines = failures.log_lines("\x1b[31mred\x1b[0m\r\n\n   \nlast\x00 line\n  indented\n", REDACT)
    assert lines == ["red", "last line", "  indented"]


# -- keeping --------------------------------------------------------------------------------------


def _record(seconds: int, *, rank: int = 1, log: tuple[str, ...] = ("boom",)) -> FailureRecord:
    return FailureRecord(
        reason="Error",
        time=T0 + dt.timedelta(seconds=seconds),
        object=f"Pod/p{seconds}-{rank}",
        exit_code=3,
        rank=rank,
        role="worker" if rank else "leader",
        log=list(log),
    )


def test_the_first_failure_stays_and_the_last_moves_on() -> None:
    first, last, left = failures.keep(
        first=None,
        last=None,
        candidates=[_record(5, rank=0), _record(1)],
        ready_since=None,
        now=T0,
        reset_after=600,
    )
    assert first == _record(1)
    assert last == _record(5, rank=0)
    assert left is None
    again, newer, _ = failures.keep(
        first=first,
        last=last,
        candidates=[_record(1), _record(40)],
        ready_since=None,
        now=T0,
        reset_after=600,
    )
    assert again == _record(1)
    assert newer == _record(40)


def test_a_failure_reported_before_never_comes_back() -> None:
    # the status says lastFailure at +40 and no first failure (cleared): older records stay out
    first, last, _ = failures.keep(
        first=None,
        last=_record(40),
        candidates=[_record(1), _record(40)],
        ready_since=None,
        now=T0,
        reset_after=1,
    )
    assert first is None
    assert last == _record(40)


def test_same_second_prefers_the_record_with_log_lines_then_the_order_recorded() -> None:
    bare = _record(0, log=())
    first, _, _ = failures.keep(
        first=None, last=None, candidates=[bare, _record(0, rank=2)], ready_since=None, now=T0, reset_after=1
    )
    assert first == _record(0, rank=2)
    # rank 1 died; the leader lost it in the same second and its pod event came second
    first, last, _ = failures.keep(
        first=None,
        last=None,
        candidates=[_record(0, rank=1), _record(0, rank=0)],
        ready_since=None,
        now=T0,
        reset_after=1,
    )
    assert first == _record(0, rank=1)
    assert last == _record(0, rank=0)
    # a pass that saw the pod before its event was recorded kept it without the log: the
    # pod event's record, with the log, takes its place
    first, last, _ = failures.keep(
        first=bare, last=bare, candidates=[_record(0)], ready_since=None, now=T0, reset_after=1
    )
    assert first == _record(0)
    assert last == _record(0)


def test_the_reset_comes_after_ready_for_the_configured_time_without_a_newer_failure() -> None:
    kept = _record(0)
    ready = T0 + dt.timedelta(seconds=100)

    def at(seconds: int, last: FailureRecord = kept) -> tuple[FailureRecord | None, float | None]:
        first, _, left = failures.keep(
            first=kept,
            last=last,
            candidates=(),
            ready_since=ready,
            now=T0 + dt.timedelta(seconds=seconds),
            reset_after=600,
        )
        return first, left

    assert at(100) == (kept, 600.0)
    assert at(699) == (kept, 1.0)
    assert at(700) == (None, None)
    # a failure while Ready (another replica) starts the wait again
    assert at(700, last=_record(300)) == (kept, 200.0)
    # not Ready: kept, no timer
    assert (
        failures.keep(first=kept, last=kept, candidates=(), ready_since=None, now=T0, reset_after=0)[0]
        == kept
    )


def _status(ready_since: dt.datetime | None, first: FailureRecord | None) -> InferenceWorkloadStatus:
    conditions = []
    if ready_since is not None:
        conditions.append(
            Condition(
                type=c.READY, status="True", reason="AllReplicasReady", last_transition_time=ready_since
            )
        )
    return InferenceWorkloadStatus(conditions=conditions, first_failure=first, last_failure=first)


def _observation(status: InferenceWorkloadStatus, now: dt.datetime, **kwargs: Any) -> Observation:
    spec = InferenceWorkloadSpec.model_validate(
        {"model": {"name": "m"}, "failures": {"resetAfterReadySeconds": 60}}
    )
    return Observation(
        name="chat", namespace="team-a", uid="u", generation=1, spec=spec, status=status, now=now, **kwargs
    )


def test_the_planner_clears_on_time_and_asks_to_look_again_until_then() -> None:
    kept = _record(0)
    ready = T0 + dt.timedelta(seconds=10)
    status = _status(ready, kept)
    out = Plan()
    reset_first_failure(_observation(status, T0 + dt.timedelta(seconds=30)), status, out)
    assert status.first_failure == kept
    assert out.requeue_after == pytest.approx(40.0)
    out = Plan()
    reset_first_failure(_observation(status, T0 + dt.timedelta(seconds=70)), status, out)
    assert status.first_failure is None
    assert out.requeue_after is None


def test_count_reads_the_pod_events_records_when_the_pods_are_gone() -> None:
    status = InferenceWorkloadStatus()
    obs = _observation(
        InferenceWorkloadStatus(), T0 + dt.timedelta(seconds=9), failures=(_record(1), _record(4, rank=0))
    )
    count(obs, status, revision=None)
    assert status.first_failure == _record(1)
    assert status.last_failure == _record(4, rank=0)


# -- hostile termination messages (review of issue 28) --------------------------------------------


def test_a_first_line_the_kubelet_may_have_cut_is_not_shown() -> None:
    # the kubelet keeps the last 2048 bytes of the log's last 80 lines: its first line may begin
    # inside a secret ("...Bearer " cut away), whose rest has no shape the redaction knows
    secret_tail = "0123456789abcdefSECRETSECRET"
    message = secret_tail + "\n" + "".join(f"line {i:04d} " + "x" * 40 + "\n" for i in range(40))
    message = message[len(message.encode()) - failures.KUBELET_LOG_BYTES :]
    assert len(message.encode()) == failures.KUBELET_LOG_BYTES
    lines = failures.log_lines(message, REDACT)
    assert lines
    assert all("SECRET" not in line for line in lines)
    # shorter than the kubelet's cut: the whole message is the log's end, its first line whole
    assert failures.log_lines("first\nsecond\n", REDACT) == ["first", "second"]


@pytest.mark.parametrize(
    "text",
    [
        "api\x00_key=SEKRETSEKRET\n",  # a NUL inside the name: dropped only after the redaction
        "\x1b[1mAPI_KEY\x1b[0m=SEKRETSEKRET\n",  # a coloured log line
        "api_\u200bkey=SEKRETSEKRET\n",  # a zero-width space inside the name
        "Authorization: Bearer\u00a0SEKRETSEKRET\n",  # a no-break space after the scheme
        "progress 10%\rtoken=\u2066SEKRETSEKRET\n",  # a carriage return and a bidi isolate
    ],
)
def test_what_a_terminal_hides_is_removed_before_the_redaction(text: str) -> None:
    lines = failures.log_lines(text, REDACT)
    assert lines
    assert all("SEKRET" not in line for line in lines), lines


def test_bidi_controls_escapes_and_lone_surrogates_never_reach_the_status() -> None:
    text = (
        "ok \u202etxt.exe\n"
        "\u202e\u2066\u200f\u2069\n"  # a line of bidi controls only: blank, skipped
        "\x1b]0;title\x07shown\x1b[2K\n"
        "bad \ud800 utf-8\n"
        "\x01\x02\x7f\x85\n"
    )
    lines = failures.log_lines(text, REDACT)
    assert lines == ["ok txt.exe", "shown", "bad \ufffd utf-8"]
    FailureRecord(reason="Error", time=T0, log=lines).model_dump_json().encode()  # valid UTF-8
