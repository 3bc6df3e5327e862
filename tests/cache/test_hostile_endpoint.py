"""A hostile endpoint's error bodies, against the real downloader CLI (issue 23).

A server on loopback answers every request ``500`` with a body it chose (and ``Retry-After: 0``,
so the downloader's retries are quick). ``huggingface_hub`` puts the server's body into its
exception text; the downloader must neither carry that text unbounded into its report nor print it
raw, where a line of it could pass for the tool's own report:

- a 3 MB body: the ``error`` event's message is bounded, and so is every line the tool prints;
- a body holding ``\\n{"event": "manifest", ...}``: the merged log (stdout and stderr, as the pod
  log holds them) yields the tool's own ``error`` event, never the forged one, and the operator's
  check of a report against the Job's exit code refuses a forged one anyway;
- a ``200`` answer whose commit, file path, blob id or sha256 would name a path outside the
  repository's folder (``../..``): the command fails before it writes anything (it wrote the
  manifest outside the cache root), and so does ``repair`` of an imported manifest naming one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.ops.errors import DaemonError
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.runtime import hferrors
from tests.canned import Answer, CannedServer

BIG = b"A" * 3_000_000
FORGED = {"event": "manifest", "manifest": {"repo": "forged/model", "revision": "f" * 40, "files": []}}
INJECTION = b"oops\n" + json.dumps(FORGED).encode() + b"\n\x0b" + json.dumps(FORGED).encode() + b"\nbye"
#: Bound of the ``error`` event line (the message is at most 4 KiB, then JSON-escaped).
LINE_BYTES = 32 * 1024


@pytest.fixture(scope="module")
def hostile() -> Iterator[CannedServer]:
    with CannedServer() as server:
        yield server


def _resolve(
    hostile: CannedServer, body: bytes, root: Path, *, status: int = 500, command: str = "resolve"
) -> tuple[int, str]:
    """Run ``command`` against the server answering ``body``: (exit code, the merged log)."""
    content = "application/json" if status == 200 else "text/plain"
    hostile.answer = Answer(status, body, {"Content-Type": content, "Retry-After": "0"})
    argv = [sys.executable, "-m", "sparkrun_operator.runtime.download", command, "--root", str(root)]
    argv += ["--repo", "org/model", "--endpoint", hostile.url, "--quiet"]
    done = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # NB: one stream, as the pod log merges them
        timeout=120,
        env={**os.environ, "HF_TOKEN": ""},
        check=False,
    )
    return done.returncode, done.stdout.decode(errors="replace")


def test_a_huge_error_body_gives_a_bounded_report(hostile: CannedServer, tmp_path: Path) -> None:
    code, log = _resolve(hostile, BIG, tmp_path)
    assert code == hferrors.EXIT_UNAVAILABLE, log[-2000:]
    assert hostile.count() > 0
    longest = max(len(line.encode()) for line in log.split("\n"))
    assert longest <= LINE_BYTES, f"a line of {longest} bytes"
    event = last_event(log)
    assert event is not None
    assert (event["event"], event["reason"], event["exit_code"]) == ("error", "HubUnavailable", code)
    message = str(event["message"])
    assert len(message) <= 4096, len(message)
    assert hostile.url in message
    assert "retry later" in message


def test_an_error_body_cannot_forge_the_tools_report(hostile: CannedServer, tmp_path: Path) -> None:
    code, log = _resolve(hostile, INJECTION, tmp_path)
    assert code == hferrors.EXIT_UNAVAILABLE, log[-2000:]
    # the server's text is in the report, but escaped: no line of the log is the forged event
    lines = log.split("\n")
    assert not any(line.startswith('{"event": "manifest"') for line in lines), log
    event = last_event(log)
    assert event is not None, event
    assert event["event"] == "error", event
    assert "forged/model" in str(event["message"])
    from sparkrun_operator.ops.executors.modelcache.tooljob import report

    assert report(event, failed=True, exit_code=code, where="resolve") == event
    # and were a forged report read, it would not pass for how the Job ended
    with pytest.raises(DaemonError, match="exit code 8"):
        report(FORGED, failed=True, exit_code=code, where="resolve")


SHA1, SHA256 = "b" * 40, "c" * 64
SIBLING = {"rfilename": "config.json", "blobId": SHA1, "size": 2}


def _outside(base: Path, root: Path) -> list[Path]:
    return [p for p in base.rglob("*") if p.is_file() and root not in p.parents]


@pytest.mark.parametrize(
    ("sha", "sibling", "what"),
    [
        ("../../../../../escaped", SIBLING, "commit"),
        ("a" * 40, {**SIBLING, "rfilename": "../../../../../../evil.txt"}, "file path"),
        ("a" * 40, {**SIBLING, "rfilename": "/etc/evil"}, "file path"),
        ("a" * 40, {**SIBLING, "rfilename": "a/./b\\c"}, "file path"),
        ("a" * 40, {**SIBLING, "blobId": "../../../../pwn"}, "blob id"),
        ("a" * 40, {**SIBLING, "lfs": {"sha256": "../../x", "size": 2, "pointerSize": 1}}, "sha256"),
    ],
)
@pytest.mark.parametrize("command", ["resolve", "download"])
def test_an_answer_naming_paths_outside_is_refused(
    hostile: CannedServer, tmp_path: Path, sha: str, sibling: dict[str, Any], what: str, command: str
) -> None:
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    info = {"id": "org/model", "sha": sha, "siblings": [sibling]}
    code, log = _resolve(hostile, json.dumps(info).encode(), root, status=200, command=command)
    assert code == hferrors.EXIT_FAILED, log[-2000:]
    event = last_event(log)
    assert event is not None, log
    assert f"the endpoint answered an invalid {what}" in str(event["message"]), event
    assert _outside(tmp_path, root) == []
    assert not any(p.is_file() for p in root.rglob("*")), list(root.rglob("*"))


def test_repair_of_an_imported_manifest_naming_a_path_outside_is_refused(
    hostile: CannedServer, tmp_path: Path
) -> None:
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    seed = {
        "repo": "org/model",
        "revision": "a" * 40,
        "endpoint": hostile.url,
        "files": [
            {"path": "../../../../../../evil", "size": 2, "checksum_algorithm": "git-sha1", "checksum": SHA1}
        ],
    }
    tool = [sys.executable, "-m", "sparkrun_operator.runtime.cachetool", "import", "--root", str(root)]
    tool += ["--manifest-json", json.dumps(seed), "--commit", "a" * 40]
    subprocess.run(tool, capture_output=True, timeout=60, check=False)
    before = _outside(tmp_path, root)
    argv = [sys.executable, "-m", "sparkrun_operator.runtime.download", "repair", "--root", str(root)]
    argv += ["--repo", "org/model", "--commit", "a" * 40, "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == hferrors.EXIT_FAILED, done.stdout + done.stderr
    event = last_event(done.stdout)
    assert event is not None
    assert "the endpoint answered an invalid file path" in str(event["message"]), event
    assert _outside(tmp_path, root) == before
