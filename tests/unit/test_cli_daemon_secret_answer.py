"""``sparkrun-k8s daemon answer``: a secret prompt's answer (a token the job asks for) is never
taken from the command line, where ``ps`` and the shell's history keep it (review R2 of issue
33); it comes from standard input (``-``). A plain prompt's answer may still be an argument.

Against a loopback HTTP server that plays the shim's listener (``--url``): it serves a job waiting
on a prompt and records what reaches its ``/input``.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sparkrun_operator.cli import common, daemon
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import daemon_transport


@dataclass
class Shim:
    url: str = ""
    answers: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
async def shim() -> AsyncIterator[Shim]:
    found = Shim()
    kinds = {"j-secret": "secret", "j-plain": "text"}

    async def job(request: web.Request) -> web.Response:
        job_id = request.match_info["id"]
        prompt = {"prompt_id": "p1", "kind": kinds[job_id], "message": "the Hugging Face token"}
        return web.json_response({"id": job_id, "state": "waiting_input", "prompt": prompt, "seq": 1})

    async def answer(request: web.Request) -> web.Response:
        found.answers.append({"job": request.match_info["id"], **(await request.json())})
        return web.json_response({"accepted": True})

    app = web.Application()
    app.router.add_get("/v1/jobs/{id}", job)
    app.router.add_post("/v1/jobs/{id}/input", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield found
    finally:
        await runner.cleanup()


def _args(shim: Shim, tmp_path: Path, job_id: str, value: str) -> argparse.Namespace:
    token = tmp_path / "token"
    token.write_text("tok-" + "y" * 20 + "\n")
    return argparse.Namespace(
        url=shim.url,
        token_file=str(token),
        ca_cert=None,
        kubeconfig=None,
        context=None,
        job_id=job_id,
        prompt_id="p1",
        value=value,
        output="json",
    )


async def test_a_secret_answer_on_the_command_line_is_refused(shim: Shim, tmp_path: Path) -> None:
    args = _args(shim, tmp_path, "j-secret", "hf_secret_value")
    async with daemon_transport(args) as api:
        with pytest.raises(CliError) as refused:
            await daemon._answer(api, args)
    assert refused.value.code == common.EXIT_USAGE
    assert "standard input" in str(refused.value)
    assert "hf_secret_value" not in str(refused.value)
    assert shim.answers == [], "the secret was sent"


async def test_a_plain_answer_may_be_an_argument(shim: Shim, tmp_path: Path) -> None:
    args = _args(shim, tmp_path, "j-plain", "yes")
    async with daemon_transport(args) as api:
        assert await daemon._answer(api, args) == 0
    assert shim.answers == [{"job": "j-plain", "prompt_id": "p1", "value": "yes"}]


@pytest.mark.parametrize(
    "command",
    [
        ["cache", "prune"],
        ["cache", "inspect", "some-cache"],
        ["stop", "some-workload"],
        ["daemon", "jobs"],
    ],
)
def test_no_verb_on_the_daemon_transport_takes_token_for_token_file(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse takes an unambiguous prefix of an option for the option: ``--token SECRET`` would be
    ``--token-file SECRET`` (a token on the command line, then echoed in the error naming the file)."""
    from sparkrun_operator.cli import main

    parser = main.build_parser(only=command[0])
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([*command, "--url", "https://shim.example", "--token", "SECRET"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --token SECRET" in capsys.readouterr().err


def test_a_token_file_others_may_read_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ssh does for keys: a token file with group or world read rights is named on stderr (the
    token is still used; the warning never shows the token)."""
    from sparkrun_operator.cli.daemonapi import read_token

    path = tmp_path / "shim.token"
    path.write_text("tok-private-value\n")
    path.chmod(0o600)
    assert read_token(str(path), {}) == "tok-private-value"
    assert capsys.readouterr().err == ""
    path.chmod(0o644)
    assert read_token(str(path), {}) == "tok-private-value"
    err = capsys.readouterr().err
    assert "readable by other users" in err
    assert "chmod 600" in err
    assert "tok-private-value" not in err
