"""Where the benchmark runner takes llama-benchy's tokenizer and text from (``runtime/bench.py``):
the target's ModelCache (a read-only mount in the pod; here a directory in the Hugging Face
layout), an explicit ``spec.tokenizer``, the Hub (the testbed's loopback Hub, a closed port, or
none), in that order; ``TokenizerUnavailable`` naming each place; paths never leave the mount.
The last test runs the real llama-benchy with the tokenizer from the cache and the shipped text,
no Hub at all."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.runtime import bench
from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import TOKENIZER, tokenizer_repo
from tests.engine.conftest import StartEngine

REPO = "org/model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    with Hub(default_repos(lfs_mib=0.01)) as running:
        yield running


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _tokenizer_json() -> bytes:
    repo = tokenizer_repo()
    assert repo is not None, "the tokenizers package is missing"
    return repo.tree(repo.head)["tokenizer.json"].file.data


def cache_dir(root: Path, *, with_tokenizer: bool = True, repo: str = REPO) -> dict[str, Any]:
    """A ModelCache's volume at ``root`` as the downloader lays it out, and the plan's ``modelCache``."""
    folder = root / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (folder / "blobs").mkdir()
    (snapshot / "config.json").write_text("{}")
    if with_tokenizer:
        blob = folder / "blobs" / "tokblob"
        blob.write_bytes(_tokenizer_json())
        (snapshot / "tokenizer.json").symlink_to(Path("../../blobs/tokblob"))
    return {"name": "my-cache", "repo": repo, "root": str(root), "path": str(snapshot)}


def _resolve(tmp_path: Path, explicit: str | None, **kw: Any) -> tuple[str, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return bench.resolve_tokenizer(explicit, kw.pop("default", REPO), workdir=work, **kw)


def _unavailable(tmp_path: Path, explicit: str | None, **kw: Any) -> str:
    with pytest.raises(bench.TokenizerUnavailable) as caught:
        _resolve(tmp_path, explicit, **kw)
    return str(caught.value)


def test_the_cache_comes_first_and_no_hub_is_asked(tmp_path: Path) -> None:
    cache = cache_dir(tmp_path / "models")
    # a closed port as the endpoint: asking it would fail, so success means it was not asked
    path, source = _resolve(tmp_path, None, cache=cache, endpoint=_closed_port())
    assert path == cache["path"]
    assert source == f"ModelCache my-cache ({REPO}) at {cache['path']}"
    # spec.tokenizer naming the cache's own repository reads it from the cache as well
    assert _resolve(tmp_path, REPO, cache=cache, endpoint=None)[0] == cache["path"]


def test_without_an_endpoint_a_cache_target_never_waits_on_the_public_hub(tmp_path: Path) -> None:
    cache = cache_dir(tmp_path / "models", with_tokenizer=False)
    message = _unavailable(tmp_path, None, cache=cache, endpoint=None)
    assert message == (
        f"no tokenizer: ModelCache my-cache ({REPO}): no tokenizer.json in {cache['path']}; "
        "the Hub: not asked: the target serves a ModelCache and no hfEndpoint is set "
        "(set spec.hfEndpoint, or spec.tokenizer to a repository or a path in the cache)"
    )


def test_each_place_and_why_it_failed(tmp_path: Path, hub: Hub) -> None:
    cache = cache_dir(tmp_path / "models", with_tokenizer=False)
    message = _unavailable(tmp_path, None, cache=cache, endpoint=hub.url)
    assert message.startswith(f"no tokenizer: ModelCache my-cache ({REPO}): no tokenizer.json in ")
    assert f"; the Hub {hub.url} ({REPO}): RepositoryNotFoundError: " in message
    assert "Traceback" not in message
    closed = _closed_port()
    message = _unavailable(tmp_path, None, cache=None, endpoint=closed)
    assert message.startswith(f"no tokenizer: the Hub {closed} ({REPO}): ")
    assert "Traceback" not in message
    assert len(message) < 600  # each place's reason is clipped


def test_an_explicit_repository_the_cache_does_not_hold_comes_from_the_hub(tmp_path: Path, hub: Hub) -> None:
    cache = cache_dir(tmp_path / "models")
    path, source = _resolve(tmp_path, TOKENIZER, cache=cache, endpoint=hub.url)
    assert Path(path, "tokenizer.json").is_file()
    assert source == f"the Hub {hub.url} ({TOKENIZER})"
    message = _unavailable(tmp_path, "sparkrun-test/no-such-repo", cache=cache, endpoint=hub.url)
    assert message.startswith(f"no tokenizer: ModelCache my-cache ({REPO}): holds {REPO}, not ")


def test_paths_are_read_inside_the_mount_only(tmp_path: Path) -> None:
    root = tmp_path / "models"
    cache = cache_dir(root)
    inside = f"./hub/models--org--model/snapshots/{COMMIT}"
    assert _resolve(tmp_path, inside, cache=cache, endpoint=None) == (
        cache["path"],
        f"spec.tokenizer {inside}",
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "tokenizer.json").write_bytes(_tokenizer_json())
    for escape in ("../elsewhere", str(outside)):
        cache_bad = {**cache, "path": str(root / "none")}
        message = _unavailable(tmp_path, escape, cache=cache_bad, endpoint=None)
        assert message.startswith(
            f"no tokenizer: spec.tokenizer {escape}: outside the ModelCache mount {root}"
        )
    # a tokenizer.json that is a symlink out of the mount is refused too
    trap = root / "trap"
    trap.mkdir()
    (trap / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    message = _unavailable(tmp_path, "./trap", cache={**cache, "path": str(trap)}, endpoint=None)
    assert "spec.tokenizer ./trap: its tokenizer.json leads outside the ModelCache mount" in message
    # no cache mounted: no local path is read at all
    message = _unavailable(tmp_path, str(outside), cache=None, endpoint=None)
    assert "read only inside the target's ModelCache, and it serves none" in message


def test_the_shipped_text_is_seeded_under_llama_benchys_cache_key(tmp_path: Path) -> None:
    text, missing = bench.prompt_text()
    assert text is not None, missing
    assert text.stat().st_size < 300 * 1024
    url = bench.seed_prompt_text(text, tmp_path / "home")
    assert url == text.resolve().as_uri()
    # llama-benchy 0.4 (corpus.py) reads ~/.cache/llama-benchy/<md5 of the URL>.txt before any download
    seeded = tmp_path / "home" / ".cache" / "llama-benchy" / f"{hashlib.md5(url.encode()).hexdigest()}.txt"
    body = seeded.read_text(encoding="utf-8")
    assert body.startswith("\nThe Adventures of Sherlock Holmes\n\nby Arthur Conan Doyle")
    assert len(body.split()) > 30_000


def test_llama_benchy_runs_offline_from_the_cache(start_engine: StartEngine, tmp_path: Path) -> None:
    cache = cache_dir(tmp_path / "models", repo=TOKENIZER)
    engine = start_engine("Qwen/Qwen3-0.6B", "--served-model-name", "tiny")
    plan = {
        "framework": "llama-benchy",
        "benchArgs": {"skip_coherence": True},
        "scenario": {"name": "c1", "concurrency": 1, "requests": 2, "inputTokens": 64, "outputTokens": 8},
        "baseUrl": f"{engine.url}/v1",
        "model": "tiny",
        "modelId": TOKENIZER,
        "modelCache": cache,
    }
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.runtime.bench", "--plan", json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    started, last = lines[0], lines[-1]
    assert started["tokenizer"] == {
        "path": cache["path"],
        "from": f"ModelCache my-cache ({TOKENIZER}) at {cache['path']}",
    }
    assert started["args"]["book_url"].endswith("/the-adventures-of-sherlock-holmes-i-iv.txt")
    assert last["event"] == "result"
    assert last["result"]["requests"] == 2
    assert "Downloading book" not in last["raw"]
    assert "Loading text from cache" in last["raw"]


def test_the_tools_image_copies_the_text_where_the_runner_reads_it() -> None:
    root = Path(__file__).resolve().parents[2]
    text = Path(bench.PROMPT_TEXT)
    source = f"runtime-images/tools/bench-text/{text.name}"
    dockerfile = (root / "runtime-images" / "tools" / "Dockerfile").read_text()
    assert f"COPY {source} {text.parent}/\n" in dockerfile
    assert (root / source).is_file()
    assert "Project Gutenberg eBook #1661" in (root / "runtime-images/tools/bench-text/README.md").read_text()
