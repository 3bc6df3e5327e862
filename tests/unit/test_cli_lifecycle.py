"""The pure parts of ``stop``/``sleep``/``wake`` (``cli/lifecycle.py``, ``cli/lifecycle_local.py``):
which path the options choose (and the options of the other path refused), the executor's
arguments read from the workload, its typed errors as exit codes, and the progress lines. The
verbs against a cluster (``--no-wait`` and ``--timeout`` among them): tests/cli/test_lifecycle.py."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.cli import common, complete, lifecycle, lifecycle_local, main
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.ops import errors
from sparkrun_operator.ops.errors import DaemonError

SLEEP = lifecycle.Verb(name="sleep", operation="workloads.sleep", done="sleeping (level 1)")


def _args(*argv: str) -> argparse.Namespace:
    return main.build_parser().parse_args(["sleep", *argv])


def test_the_default_is_this_process_and_daemon_or_url_choose_the_daemon_api() -> None:
    assert lifecycle.via_daemon(_args("chat", "-n", "team-a")) is False
    assert lifecycle.via_daemon(_args("chat", "--daemon", "--key", "k")) is True
    assert lifecycle.via_daemon(_args("chat", "--url", "https://shim.example:8443")) is True


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--daemon", "-n", "team-a"), "-n goes without --daemon"),
        (("--url", "https://shim.example:8443", "-n", "team-a"), "-n goes without --daemon"),
        (("--key", "k1"), "--key"),
        (("--token-file", "/dev/null"), "--token-file and --ca-cert go with --url"),
    ],
)
def test_options_of_the_other_path_are_usage_errors(argv: tuple[str, ...], says: str) -> None:
    with pytest.raises(CliError) as refused:
        lifecycle.via_daemon(_args("chat", *argv))
    assert refused.value.code == common.EXIT_USAGE
    assert says in str(refused.value)


def test_the_executor_pins_what_the_workload_serves_now() -> None:
    model_only = {"spec": {"model": {"name": "Qwen/Qwen3-0.6B"}}, "status": {}}
    assert lifecycle_local.arguments_of(model_only, "chat") == {
        "workload_id": "chat",
        "recipe": None,
        "recipe_revision": "",
    }
    recipe = {"spec": {"recipe": {"name": "qwen"}}, "status": {"recipeRevision": "ab12"}}
    assert lifecycle_local.arguments_of(recipe, "chat") == {
        "workload_id": "chat",
        "recipe": "qwen",
        "recipe_revision": "ab12",
    }


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (
            errors.Conflict("InferenceWorkload chat was not started with engine.enableSleepMode"),
            1,
            "Conflict: ",
        ),
        (DaemonError("Workload chat failed: Error", type_name="WorkloadFailed"), 1, "WorkloadFailed: "),
        (errors.NotFound("Unknown workload: chat"), 4, "Unknown workload"),
        (errors.Invalid("bad name"), 2, "bad name"),
        (errors.OperationTimeout("did not become ready within 1800 seconds"), 3, "(it goes on)"),
        (errors.Forbidden("no"), 5, "PermissionError: no"),
    ],
)
def test_an_executors_typed_error_is_its_exit_code(error: DaemonError, code: int, text: str) -> None:
    found = lifecycle_local.refusal(error)
    assert found.code == code
    assert text in str(found)


def test_the_outcome_reads_as_what_changed() -> None:
    done = {"workload": "chat", "namespace": "team-a", "state": "sleeping", "seconds": 2.14}
    assert lifecycle.outcome_text(SLEEP, done) == "chat: sleeping (level 1) in 2.1 s\n"
    requested = {"workload": "chat\x1b[2J", "namespace": "team-a", "state": "requested"}
    assert lifecycle.outcome_text(SLEEP, requested) == (
        "chat?[2J: sleep requested, not waiting (sparkrun-k8s status -n team-a)\n"
    )


async def test_progress_prints_the_stages_this_command_saw(capsys: pytest.CaptureFixture[str]) -> None:
    progress = lifecycle_local.Progress({"accepted"}, show=True)
    feedback: dict[str, Any] = {"feedback_version": 1}
    await progress("log", {"message": "not a feedback event"})
    await progress(
        "feedback", {**feedback, "message": "InferenceWorkload chat: Sleeping", "stage": "readiness"}
    )
    await progress(
        "feedback", {**feedback, "message": "startup: accepted", "stage": "accepted", "activity": "startup"}
    )
    await progress(
        "feedback", {**feedback, "message": "startup: ready\x07", "stage": "ready", "activity": "startup"}
    )
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("s  ", 1)[1] for line in lines] == [
        "InferenceWorkload chat: Sleeping",
        "startup: ready?",
    ]

    quiet = lifecycle_local.Progress(set(), show=False)  # -o json|yaml: stdout is for the data
    await quiet("feedback", {**feedback, "message": "Deleted InferenceWorkload chat", "stage": "stop"})
    assert capsys.readouterr().err == ""


def test_daemon_name_completion_is_bounded_even_when_its_thread_blocks(tmp_path: Path) -> None:
    """``sleep --daemon <TAB>`` with a kubeconfig whose read blocks the thread (here a FIFO no one
    writes; a hung network mount or a stuck credential helper alike): nothing, within the bound
    of ``cli/complete.py``, not a shell that hangs."""
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    args = _args("chat", "--daemon", "--kubeconfig", str(fifo))
    started = time.monotonic()
    try:
        assert lifecycle.complete_workloads("", args) == []
        assert time.monotonic() - started < complete.SECONDS + 1.5
    finally:
        _release(fifo)


def _release(fifo: Path) -> None:
    """Let the completer's thread, blocked opening ``fifo`` for reading, go on (and fail)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # NB: ENXIO until the reader has opened it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return
        time.sleep(0.05)


def test_the_help_says_which_path_is_the_default() -> None:
    """stop/sleep/wake run in this process by default; the daemon API only with --daemon/--url.
    ``daemon`` and ``cache`` verbs use the daemon API by default (through kube-apiserver)."""
    for verb in ("stop", "sleep", "wake"):
        text = _help(verb)
        assert "With --daemon (not this verb's default path): through kube-apiserver" in text, verb
        assert "Default: through kube-apiserver" not in text, verb
    assert "Default: through kube-apiserver" in _help("daemon", "info")


def _help(*verb: str) -> str:
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), pytest.raises(SystemExit):
        main.main([*verb, "--help"])
    return " ".join(stream.getvalue().split())
