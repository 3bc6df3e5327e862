"""The benchmark runner's tokenizer search under hostile input (issue 31 review): a tenant writes
``spec.tokenizer``/``benchArgs.tokenizer`` and the files of its own ModelCache volume (symlink
loops, names too long for the filesystem, NUL bytes), and an administrator's Hub address may carry
credentials. Each failure is one place's reason in ``TokenizerUnavailable``, never a raw
exception, and no credential of an endpoint reaches the message or the log."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.runtime import bench

REPO = "org/model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(root: Path) -> dict[str, Any]:
    snapshot = root / "hub" / "models--org--model" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    return {"name": "my-cache", "repo": REPO, "root": str(root), "path": str(snapshot)}


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    "explicit",
    ["./loop", "./loop/deeper", "./a\x00b", "./" + "x" * 300, "./" + "d/" * 2100],
    ids=["symlink-loop", "under-a-loop", "nul", "name-too-long", "path-too-long"],
)
def test_a_hostile_path_is_one_places_failure(tmp_path: Path, explicit: str) -> None:
    cache = _cache(tmp_path / "models")
    (tmp_path / "models" / "loop").symlink_to("loop")
    with pytest.raises(bench.TokenizerUnavailable) as caught:
        bench.resolve_tokenizer(explicit, REPO, cache=cache, endpoint=None, workdir=tmp_path)
    assert str(caught.value).startswith(f"no tokenizer: spec.tokenizer {explicit}: ")


def test_a_snapshot_that_loops_is_one_places_failure(tmp_path: Path) -> None:
    root = tmp_path / "models"
    cache = _cache(root)
    snapshot = Path(cache["path"])
    snapshot.rmdir()
    snapshot.symlink_to(snapshot.name)  # the tenant's own volume: it may hold anything
    with pytest.raises(bench.TokenizerUnavailable) as caught:
        bench.resolve_tokenizer(None, REPO, cache=cache, endpoint=None, workdir=tmp_path)
    assert str(caught.value).startswith(f"no tokenizer: ModelCache my-cache ({REPO}): ")


def test_the_runner_reports_a_hostile_path_as_tokenizer_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = _cache(tmp_path / "models")
    (tmp_path / "models" / "loop").symlink_to("loop")
    plan = {
        "framework": "llama-benchy",
        "benchArgs": {"tokenizer": "./loop"},
        "scenario": {"name": "c1", "concurrency": 1, "requests": 1},
        "baseUrl": "http://127.0.0.1:9/v1",
        "model": "tiny",
        "modelId": REPO,
        "modelCache": cache,
    }
    code = bench.main(["--plan", json.dumps(plan), "--workdir", str(tmp_path)])
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (code, last["event"], last["reason"]) == (bench.EXIT_FAILED, "error", "TokenizerUnavailable")
    assert last["message"].startswith("no tokenizer: spec.tokenizer ./loop: ")


def test_an_endpoints_credentials_are_never_shown(tmp_path: Path) -> None:
    endpoint = f"http://admin:s3cret@{_closed_port()}"
    with pytest.raises(bench.TokenizerUnavailable) as caught:
        bench.resolve_tokenizer(None, REPO, cache=None, endpoint=endpoint, workdir=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"no tokenizer: the Hub http://{endpoint.rsplit('@', 1)[1]} ({REPO}): ")
    assert "s3cret" not in message
    assert "admin" not in message


def test_an_unparsable_endpoint_is_one_places_failure(tmp_path: Path) -> None:
    with pytest.raises(bench.TokenizerUnavailable) as caught:
        bench.resolve_tokenizer(None, REPO, cache=None, endpoint="http://u:p@[bad", workdir=tmp_path)
    assert str(caught.value).startswith(f"no tokenizer: the Hub (an unparsable URL) ({REPO}): ")
