"""The process runtime's termination messages (``process_status.termination_message``), as the
kubelet fills ``state.terminated.message``: the termination message file when it is not empty
(its first 4096 bytes), else with ``terminationMessagePolicy: FallbackToLogsOnError`` and a
failure the end of the log: its last 80 lines, of those the last 2048 bytes."""

from __future__ import annotations

from sparkrun_testbed.process_status import (
    FALLBACK_LOG_BYTES,
    FALLBACK_LOG_LINES,
    TERMINATION_MESSAGE_BYTES,
    ContainerState,
    log_tail,
    termination_message,
)

FALLBACK = "FallbackToLogsOnError"
LOG = "".join(f"line {i}\n" for i in range(200)).encode()


def test_the_file_wins_whatever_the_policy_and_is_cut_at_4096_bytes() -> None:
    for policy in (None, "File", FALLBACK):
        message = termination_message(
            policy=policy, exit_code=1, reason="Error", file_text=b"done", log_end=LOG
        )
        assert message == "done"
    long = termination_message(
        policy=None, exit_code=0, reason="Completed", file_text=b"x" * 10_000, log_end=b""
    )
    assert len(long) == TERMINATION_MESSAGE_BYTES


def test_fallback_to_the_log_only_on_a_failure_with_that_policy() -> None:
    tail = termination_message(policy=FALLBACK, exit_code=3, reason="Error", file_text=b"", log_end=LOG)
    assert tail.splitlines() == [f"line {i}" for i in range(120, 200)]
    assert len(tail.splitlines()) == FALLBACK_LOG_LINES
    assert (
        termination_message(policy=FALLBACK, exit_code=0, reason="Completed", file_text=None, log_end=LOG)
        == ""
    )
    assert termination_message(policy="File", exit_code=3, reason="Error", file_text=None, log_end=LOG) == ""
    cannot = termination_message(
        policy=FALLBACK, exit_code=128, reason="ContainerCannotRun", file_text=None, log_end=LOG
    )
    assert cannot == ""


def test_the_log_tail_keeps_the_last_2048_bytes_even_mid_line() -> None:
    long_lines = b"".join(b"%04d " % i + b"y" * 95 + b"\n" for i in range(100))  # 100 bytes a line
    tail = log_tail(long_lines)
    assert len(tail.encode()) == FALLBACK_LOG_BYTES
    assert tail.endswith("0099 " + "y" * 95 + "\n")
    assert not tail.startswith("0079")  # the first line is cut: bytes, not lines, bound it
    cut = log_tail("é".encode() * 2000 + b"x")  # the 2048 bytes begin inside a character
    assert cut.startswith("\ufffd")
    assert cut.count("\ufffd") == 1


def test_the_message_is_in_the_terminated_state() -> None:
    state = ContainerState(name="vllm", image="vllm/vllm-openai")
    state.run("process://1")
    state.finish(3, message="boom")
    assert state.to_dict()["state"]["terminated"]["message"] == "boom"
    assert state.to_dict()["state"]["terminated"]["exitCode"] == 3
