"""The pure parts of ``sparkrun-k8s daemon``, ``stop``, ``sleep`` and ``wake``: exit codes of the
daemon's refusals, arguments from ``--arg`` and ``KEY=VALUE``, which ``--url`` may carry a token,
where the token comes from (never an option), the text people read (control characters of
tenants' strings replaced), and the workload a lifecycle verb resolves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sparkrun_operator.cli import daemon, lifecycle, main
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import (
    MAX_TOKEN_BYTES,
    TOKEN_ENV,
    check_url,
    describe_error,
    exit_code_for,
    job_refusal,
    read_token,
    refusal,
    split_lines,
)
from sparkrun_operator.cli.sleep import VERB as SLEEP

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, 2), (401, 3), (403, 5), (404, 4), (409, 5), (422, 5), (429, 5), (500, 3), (503, 3), (0, 3)],
)
def test_exit_codes_of_refusals(status: int, code: int) -> None:
    assert exit_code_for(status) == code


def test_a_refusal_is_one_line_in_the_daemons_words() -> None:
    body = {"detail": "Unknown workload: x\x1b[31m", "error": {"type": "LookupError", "retryable": False}}
    error = refusal(404, body)
    assert str(error) == "LookupError: Unknown workload: x?[31m"
    assert error.code == 4
    # 401/403 carry only detail; kube-apiserver's own Status has a message
    assert str(refusal(403, {"detail": "Forbidden"})) == "Forbidden"
    status = {"kind": "Status", "message": 'user "x" cannot get path "/apis/daemon.sparkrun.dev"'}
    assert str(refusal(403, status)).startswith('user "x" cannot get path')
    # a validation error's detail is a list: shown as JSON, bounded
    listed = refusal(422, {"detail": [{"loc": ["body", "limit"], "msg": "bad"}] * 1000})
    assert str(listed).startswith('[{"loc": ["body", "limit"]')
    assert len(str(listed)) <= 2003
    # a body that is not JSON: the fallback
    assert str(refusal(502, None, fallback="bad gateway")) == "bad gateway"


def test_a_rate_limit_says_when_to_retry() -> None:
    body = {"detail": "too many jobs", "error": {"type": "RateLimited", "attrs": {"retry_after_seconds": 7}}}
    assert str(refusal(429, body)) == "RateLimited: too many jobs (retry after 7 s)"
    assert str(refusal(429, {"detail": "slow down"}, retry_after=2.5)) == "slow down (retry after 2.5 s)"
    assert str(refusal(429, {"detail": "slow down"})) == "slow down (retry later)"


def test_a_failed_job_is_exit_1_with_its_typed_error() -> None:
    job = {
        "id": "j-1",
        "state": "failed",
        "error": {"detail": "no-such-jobset", "error": {"type": "LookupError"}},
    }
    error = job_refusal(job)
    assert error.code == 1
    assert str(error) == "job j-1 failed: LookupError: no-such-jobset"
    assert (
        str(job_refusal({"id": "j-2", "state": "cancelled", "error": None})) == "job j-2 cancelled: cancelled"
    )
    assert describe_error("not a dict", "x") == "x"


def test_arguments_from_json_a_file_and_pairs() -> None:
    assert daemon.arguments_of('{"a": 1}', None, ["b=2", "c=text", 'd=["x"]', "e="]) == {
        "a": 1,
        "b": 2,
        "c": "text",
        "d": ["x"],
        "e": "",
    }
    assert daemon.arguments_of(None, '{"name": "f"}', ["name=g"]) == {"name": "g"}
    assert daemon.arguments_of(None, None, []) == {}
    for arg, pairs in (("{", []), ("[1]", []), (None, ["novalue"]), (None, ["=x"])):
        with pytest.raises(CliError) as refused:
            daemon.arguments_of(arg, None, pairs)
        assert refused.value.code == 2


@pytest.mark.parametrize(
    "url",
    [
        "https://shim.example:8443",
        "https://shim.example/prefix/",
        "http://127.0.0.1:8080",
        "http://localhost:1",
    ],
)
def test_urls_a_token_may_go_to(url: str) -> None:
    assert check_url(url) == url.rstrip("/")


@pytest.mark.parametrize(
    "url",
    [
        "http://shim.example:8080",  # clear text across a network
        "http://10.0.0.1",
        "https://user:pw@shim.example",  # credentials in the URL
        "https://shim.example/?next=x",
        "https://shim.example/#f",
        "ftp://shim.example",
        "shim.example:8443",
        "https://",
    ],
)
def test_urls_refused(url: str) -> None:
    with pytest.raises(CliError) as refused:
        check_url(url)
    assert refused.value.code == 2


def test_the_token_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc.def\n")
    assert read_token(str(path), {}) == "abc.def"
    assert read_token(None, {TOKEN_ENV: " xyz "}) == "xyz"
    refused = [
        (None, {}),
        (None, {TOKEN_ENV: ""}),
        (str(tmp_path / "missing"), {}),
    ]
    big = tmp_path / "big"
    big.write_bytes(b"a" * (MAX_TOKEN_BYTES + 1))
    controls = tmp_path / "controls"
    controls.write_text("abc\x1bdef")
    refused += [(str(big), {}), (str(controls), {})]
    for file, env in refused:
        with pytest.raises(CliError) as error:
            read_token(file, env)
        assert error.value.code == 2


@pytest.mark.parametrize(
    "command", [["daemon", "info"], ["shim", "call", "workloads.list", "--url", "https://x"]]
)
def test_no_token_option_exists(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = main.build_parser(only=command[0])
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([*command, "--token", "secret"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --token secret" in capsys.readouterr().err


async def test_event_lines_are_bounded() -> None:
    async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part
            await asyncio.sleep(0)

    lines = [line async for line in split_lines(chunks(b"data: 1\n\nda", b"ta: 2\n", b"tail"), max_line=16)]
    assert lines == [b"data: 1\n", b"\n", b"data: 2\n", b"tail"]
    with pytest.raises(CliError) as refused:
        _ = [line async for line in split_lines(chunks(b"x" * 10, b"y" * 10), max_line=16)]
    assert refused.value.code == 3


def test_texts_for_people() -> None:
    info = {
        "name": "sparkrun daemon",
        "version": "0.4.1",
        "protocol": 1,
        "profile": "kubernetes",
        "binding": "sparkrun-system",
        "runtime": {"principal": "alice\x07", "identity": "front-proxy"},
    }
    assert daemon.info_text(info) == (
        "daemon:           sparkrun daemon 0.4.1\n"
        "protocol:         1\n"
        "profile:          kubernetes\n"
        "namespace:        sparkrun-system\n"
        "you:              alice?\n"
        "authenticated by: front-proxy\n"
    )
    ops = [
        {"name": "workloads.list", "kind": "query", "scope": "read", "description": "List saved workloads."},
        {"name": "cluster.create", "kind": "job", "scope": "operate", "description": "x" * 200},
    ]
    text = daemon.ops_text(ops).splitlines()
    assert text[0].split() == ["NAME", "KIND", "SCOPE", "DESCRIPTION"]
    assert text[1].startswith("cluster.create  job    operate  xxx")
    assert text[1].endswith("...")
    jobs = [
        {
            "id": "abc",
            "state": "running",
            "operation": "workloads.run",
            "created": NOW - 125,
            "principal": "p",
        }
    ]
    assert daemon.jobs_text(jobs, NOW).splitlines() == [
        "ID   STATE    OPERATION      AGE  PRINCIPAL",
        "abc  running  workloads.run  2m   p",
    ]
    assert daemon.jobs_text([], NOW) == "no jobs\n"
    job = {
        "id": "abc",
        "operation": "cluster.create",
        "state": "failed",
        "principal": "p",
        "created": NOW - 7200,
        "error": {"detail": "boom", "error": {"type": "ValueError"}},
        "result": None,
        "prompt": {"prompt_id": "q1", "kind": "confirm", "message": "go?"},
    }
    shown = daemon.job_text(job, NOW)
    assert "created:    2h ago\n" in shown
    assert "error:      ValueError: boom\n" in shown
    assert "prompt:     q1 (confirm): go?\n" in shown
    assert daemon.event_text({"id": 3, "type": "state", "state": "running"}) == "   3 state     running\n"
    assert daemon.event_text({"id": 4, "type": "feedback", "message": "startup:\x1b pulling"}) == (
        "   4 feedback  startup:? pulling\n"
    )
    assert (
        daemon.event_text({"id": 5, "type": "result", "result": {"a": 1}})
        == '   5 result    {"result": {"a": 1}}\n'
    )
    assert daemon.ago("x", NOW) == "?"
    assert daemon.ago(NOW - 3 * 86400, NOW) == "3d"


ROWS = [
    {
        "workload_id": "sparkrun_ab_cd",
        "recipe": "qwen3-8b-vllm",
        "metadata": {"name": "chat", "recipe_revision": "r1"},
    },
    {"workload_id": "ns/bare", "recipe": None, "metadata": {"name": "bare"}},
    "not a row",
]


def test_a_lifecycle_verb_resolves_a_name_or_an_id() -> None:
    assert lifecycle.find_row(ROWS, "chat") is ROWS[0]
    assert lifecycle.find_row(ROWS, "sparkrun_ab_cd") is ROWS[0]
    assert lifecycle.arguments_of(ROWS[0]) == {
        "workload_id": "sparkrun_ab_cd",
        "recipe": "qwen3-8b-vllm",
        "recipe_revision": "r1",
    }
    with pytest.raises(CliError) as missing:
        lifecycle.find_row(ROWS, "nope")
    assert missing.value.code == 4
    with pytest.raises(CliError) as bare:
        lifecycle.arguments_of(ROWS[1])  # type: ignore[arg-type]
    assert bare.value.code == 5
    assert "serves no recipe" in str(bare.value)


def test_a_lifecycle_outcome_reads_as_what_changed() -> None:
    report = {"workload": "chat", "seconds": 2.14, "state": "sleeping", "job_id": "j"}
    assert lifecycle.outcome_text(SLEEP, report) == "chat: sleeping (level 1) in 2.1 s\n"
    submitted = {"workload": "chat", "state": "submitted", "job_id": "j-9"}
    assert lifecycle.outcome_text(SLEEP, submitted) == "chat: workloads.sleep submitted as job j-9\n"


#: An OSC 52 sequence: a terminal that honours it puts the payload on the user's clipboard.
OSC52 = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"


def test_a_hostile_daemons_event_never_writes_terminal_controls() -> None:
    """R1: every field of an event a daemon sends (its id and type too) is printable, and odd
    types or numbers are shown, never a crash."""
    for event in (
        {"id": OSC52, "type": OSC52, "state": "running"},
        {"id": {"x": 1}, "type": ["state"], "state": OSC52},
        {"id": 1.5, "type": None, "message": OSC52},
    ):
        shown = daemon.event_text(event)
        assert "\x1b" not in shown, shown
        assert "\x07" not in shown, shown
        assert shown.endswith("\n")
    for epoch in (float("inf"), float("-inf"), float("nan"), 10**400):
        assert daemon.ago(epoch, NOW) == "?"


def test_an_error_message_never_writes_terminal_controls(capsys: pytest.CaptureFixture[str]) -> None:
    """R1: a CliError quotes what a server said (a job's id or state, a refusal): the one line on
    standard error is printable whoever built it."""
    from sparkrun_operator.cli import common

    async def failing() -> int:
        raise CliError(f"job {OSC52} is still {OSC52} after 1 s", 3)

    assert common.run_async(failing) == 3
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\x07" not in err
    assert err.startswith("error: job ?]52;c;")


async def test_a_cancelled_wait_names_a_hostile_job_printably(capsys: pytest.CaptureFixture[str]) -> None:
    """R1: the job id a daemon acknowledged is quoted on Ctrl-C: printable."""
    from sparkrun_operator.cli.daemonapi import DaemonApi

    class Running(DaemonApi):
        async def job(self, job_id: str) -> dict[str, object]:
            return {"id": job_id, "state": "running"}

    waiting = asyncio.create_task(Running().wait(OSC52))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    err = capsys.readouterr().err
    assert "goes on" in err
    assert "\x1b" not in err
    assert "\x07" not in err


def test_shim_call_sends_no_token_in_clear_text_across_a_network(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R1: ``shim call`` takes the URLs ``daemon --url`` takes: plain http to loopback only, and
    refuses before it connects (192.0.2.1, TEST-NET-1, would otherwise be tried)."""
    monkeypatch.setenv(TOKEN_ENV, "secret-token")
    parser = main.build_parser(only="shim")
    args = parser.parse_args(
        ["shim", "call", "workloads.list", "--url", "http://192.0.2.1:9", "--timeout", "1"]
    )
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "plain http only to a loopback address" in err
    assert "secret-token" not in err
