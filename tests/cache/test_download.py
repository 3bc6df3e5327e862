"""The ModelCache downloader (real ``huggingface_hub``) against the local Hub on loopback."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.rate import MIN_BYTES, RateMeter
from sparkrun_operator.runtime import hferrors
from sparkrun_operator.runtime.download import Downloader, Source
from sparkrun_operator.runtime.hfcache import CacheLayout
from sparkrun_operator.runtime.progress import JsonLinesSink, Progress, Reporter
from sparkrun_testbed.hfhub import BIG, BRANCH, GATED, PRIVATE, TAG, TINY, TOKEN, Hub, Repo, generated
from sparkrun_testbed.hfhub.fixtures import big_model

MiB = 1024 * 1024
SHARD1 = "model-00001-of-00002.safetensors"
_CMD = (sys.executable, "-m", "sparkrun_operator.runtime.download")


def _downloader(hub: Hub, root: Path, repo: str = TINY, revision: str = "main", **kw: object) -> Downloader:
    source = Source(repo, revision, hub.url, allow_patterns=tuple(kw.pop("allow", ())))  # type: ignore[arg-type]
    return Downloader(root, source, **kw)  # type: ignore[arg-type]


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_CMD, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _settle(hub: Hub, key: str) -> None:
    last, deadline = -1, time.monotonic() + 10
    while hub.bytes_served(key) != last and time.monotonic() < deadline:
        last = hub.bytes_served(key)
        time.sleep(0.5)


def _events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_download_records_commit_manifest_and_serves_offline(hub: Hub, cache_root: Path) -> None:
    repo = hub.repo(TINY)
    result = _downloader(hub, cache_root, verify="sha256").download()
    assert result.commit == repo.head
    manifest = json.loads(Path(result.manifest).read_text())
    assert manifest["commit"] == repo.head
    assert manifest["complete"] is True
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        p: m.file.size for p, m in repo.tree(repo.head).items()
    }
    lfs = next(f for f in manifest["files"] if f["path"] == "model.safetensors")
    assert lfs["sha256"] == repo.tree(repo.head)["model.safetensors"].sha256
    layout = CacheLayout(cache_root, TINY)
    assert layout.read_ref("main") == repo.head
    # The engine's view: HF_HOME=<root>, HF_HUB_OFFLINE=1, the repo id only; no request to the Hub.
    hub.reset_stats()
    code = (
        "import json, huggingface_hub as h; from huggingface_hub import scan_cache_dir;"
        f"p = h.snapshot_download({TINY!r}); c = h.hf_hub_download({TINY!r}, 'config.json');"
        "s = scan_cache_dir(); print(json.dumps([p, open(c).read(), len(s.warnings), len(s.repos)]))"
    )
    env = {**os.environ, "HF_HOME": str(cache_root), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_XET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    path, config, warnings, repos = json.loads(out.stdout)
    assert Path(path).name == repo.head
    assert config.encode() == repo.tree(repo.head)["config.json"].file.data
    assert (warnings, repos) == (0, 1)
    assert hub.stats() == {}


@pytest.mark.parametrize("revision", [TAG, BRANCH, "sha"])
def test_tag_branch_and_commit_resolve(hub: Hub, cache_root: Path, revision: str) -> None:
    repo = hub.repo(TINY)
    expected = {TAG: repo.tags[TAG], BRANCH: repo.branches[BRANCH], "sha": repo.tags[TAG]}[revision]
    rev = expected if revision == "sha" else revision
    result = _downloader(hub, cache_root, revision=rev).download()
    assert result.commit == expected
    snapshot = Path(result.snapshot)
    assert sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file()) == sorted(
        repo.tree(expected)
    )
    layout = CacheLayout(cache_root, TINY)
    assert layout.read_ref(rev) == (None if revision == "sha" else expected)


def test_allow_patterns_and_second_run_fetches_nothing(hub: Hub, cache_root: Path) -> None:
    result = _downloader(hub, cache_root, allow=["*.json"]).download()
    assert sorted(Path(result.snapshot).iterdir()) == sorted(
        Path(result.snapshot) / p for p in ("config.json", "generation_config.json", "tokenizer_config.json")
    )
    hub.reset_stats()
    again = _downloader(hub, cache_root, allow=["*.json"]).download()
    assert again.how == {"verified": 3}
    assert hub.bytes_served() == 0


def test_missing_revision_repo_and_gated_fail_with_what_to_do(hub: Hub, cache_root: Path) -> None:
    with pytest.raises(hferrors.DownloadError) as rev:
        _downloader(hub, cache_root, revision="no-such-tag").download()
    assert rev.value.code == hferrors.EXIT_REVISION_NOT_FOUND
    assert "branch, tag or full commit" in rev.value.message
    with pytest.raises(hferrors.DownloadError) as missing:
        _downloader(hub, cache_root, repo="nobody/nothing").download()
    assert missing.value.code == hferrors.EXIT_REPO_NOT_FOUND
    with pytest.raises(hferrors.DownloadError) as private:
        _downloader(hub, cache_root, repo=PRIVATE).download()
    assert "tokenSecretRef" in private.value.message
    with pytest.raises(hferrors.DownloadError) as gated:
        _downloader(hub, cache_root, repo=GATED).download()
    assert gated.value.code == hferrors.EXIT_AUTH
    assert "tokenSecretRef" in gated.value.message
    with pytest.raises(hferrors.DownloadError) as wrong:
        _downloader(hub, cache_root, repo=GATED, token="hf_not_granted").download()
    assert wrong.value.code == hferrors.EXIT_AUTH
    assert "accept the repository's conditions" in wrong.value.message


def test_gated_with_token_file_and_the_token_is_nowhere(hub: Hub, cache_root: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "secret" / "token"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    status = tmp_path / "status.json"
    args = [
        "download",
        "--root",
        str(cache_root),
        "--repo",
        GATED,
        "--endpoint",
        hub.url,
        "--verify",
        "sha256",
    ]
    done = _cli(*args, "--token-file", str(token_file), "--status-file", str(status))
    assert done.returncode == 0, done.stderr
    assert _events(done.stdout)[-1]["event"] == "result"
    assert json.loads(status.read_text())["phase"] == "Ready"
    assert TOKEN not in done.stdout + done.stderr
    for path in [*cache_root.rglob("*"), status]:
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    args[2] = str(tmp_path / "fresh")
    failed = _cli(*args, env={"HF_TOKEN": ""})
    assert failed.returncode == hferrors.EXIT_AUTH
    error = _events(failed.stdout)[-1]
    assert (error["event"], error["reason"], error["retryable"]) == ("error", "AuthenticationRequired", False)


def test_429_and_500_are_retried(hub: Hub, cache_root: Path) -> None:
    hub.fail(f"api:{TINY}", status=429, retry_after=1, times=1)
    hub.fail(f"{TINY}/model.safetensors", status=429, retry_after=0, times=2, method="GET")
    hub.fail(f"{TINY}/config.json", status=500, times=1)
    result = _downloader(hub, cache_root, verify="sha256").download()
    assert result.commit == hub.repo(TINY).head
    stats = hub.stats()
    assert stats[f"api:{TINY}"].statuses[429] == 1
    assert stats[f"{TINY}/model.safetensors"].statuses[429] == 2


def test_corrupt_blob_inspect_reports_it_repair_refetches_only_it(hub: Hub, cache_root: Path) -> None:
    downloader = _downloader(hub, cache_root, verify="sha256")
    result = downloader.download()
    assert downloader.inspect().clean
    layout = CacheLayout(cache_root, TINY)
    meta = hub.repo(TINY).tree(result.commit)["model.safetensors"]
    blob = layout.blob(meta.sha256)
    with open(blob, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    (layout.pointer(result.commit, "README.md")).unlink()
    report = downloader.inspect()
    assert (report.invalid, report.missing, report.unreadable) == (["model.safetensors"], ["README.md"], [])
    size_only = downloader.inspect(level="size")
    assert size_only.invalid == []
    cli = _cli("inspect", "--root", str(cache_root), "--repo", TINY)
    assert cli.returncode == hferrors.EXIT_INVALID
    assert _events(cli.stdout)[-1]["invalid"] == ["model.safetensors"]
    hub.reset_stats()
    repaired = downloader.repair()
    assert sorted(repaired.repaired) == ["README.md", "model.safetensors"]
    served = {k: s.bytes for k, s in hub.stats().items() if s.bytes and not k.startswith("api:")}
    # README.md lost only its snapshot link: its blob is intact and verified, so it is relinked.
    assert served == {f"{TINY}/model.safetensors": meta.file.size}
    assert downloader.inspect().clean


def test_corrupt_bytes_from_the_hub_are_caught(hub: Hub, cache_root: Path) -> None:
    key = f"{TINY}/model.safetensors"
    size = hub.repo(TINY).tree(hub.repo(TINY).head)["model.safetensors"].file.size
    hub.corrupt(key, offset=12345, times=1)
    result = _downloader(hub, cache_root, verify="sha256").download()
    assert hub.stats()[key].bytes == 2 * size
    assert result.fetched_bytes >= 2 * size
    hub.corrupt(key, offset=12345, times=None)
    other = cache_root / "other"
    with pytest.raises(hferrors.DownloadError) as bad:
        _downloader(hub, other, verify="sha256").download()
    assert bad.value.code == hferrors.EXIT_INVALID
    assert not any(other.rglob(f"{hub.repo(TINY).tree(result.commit)['model.safetensors'].sha256}"))


def test_killed_mid_file_resumes_without_refetching_finished_blobs(hub: Hub, cache_root: Path) -> None:
    """SIGKILL during the 24 MiB shard; the rerun continues its orphan with a Range request."""
    repo = hub.repo(BIG)
    key = f"{BIG}/{SHARD1}"
    size = repo.tree(repo.head)[SHARD1].file.size
    hub.slow(key, rate=4 * MiB)
    status = cache_root.parent / "status.json"
    watch = ["--quiet", "--status-file", str(status), "--progress-interval", "0.2"]
    proc = subprocess.Popen(
        [*_CMD, "download", "--root", str(cache_root), "--repo", BIG, "--endpoint", hub.url, *watch],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while hub.bytes_served(key) < 13 * MiB and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    progress = json.loads(status.read_text())
    assert progress["phase"] == "Downloading"
    assert 0 < progress["bytes_done"] < progress["bytes_total"]
    layout = CacheLayout(cache_root, BIG)
    orphans = layout.incomplete(repo.tree(repo.head)[SHARD1].sha256)
    assert len(orphans) == 1
    kept = orphans[0].stat().st_size
    assert kept >= 8 * MiB  # written in 1 MiB chunks (the library's default is 10 MiB)
    hub.clear_faults()
    _settle(hub, key)  # the Hub's thread for the killed connection writes until the socket errors
    hub.reset_stats()
    result = _downloader(hub, cache_root, repo=BIG).download()
    assert result.how == {"resumed": 1, "verified": 2}  # the finished blobs: verified by the killed run
    served = {k: s.bytes for k, s in hub.stats().items() if s.bytes and not k.startswith("api:")}
    assert served == {key: size - kept}
    assert hub.stats()[key].statuses == {206: 1}
    assert not layout.incomplete(repo.tree(repo.head)[SHARD1].sha256)
    assert _downloader(hub, cache_root, repo=BIG).inspect().clean


def test_progress_is_rate_bounded_and_always_reports_phases() -> None:
    now = [0.0]
    seen: list[Progress] = []
    # a meter scaled to this test's bytes: a rate after 2 s and 100 B, an ETA from 10 B/s
    meter = RateMeter(min_seconds=2.0, min_bytes=100, min_rate=10.0)
    reporter = Reporter([seen.append], interval=1.0, clock=lambda: now[0], meter=meter)
    for i in range(50):
        now[0] = i * 0.1
        reporter.update(
            Progress("Downloading", "a/b", "main", bytes_done=i * 10, bytes_total=1000, bytes_fetched=i * 10)
        )
    reporter.update(Progress("Ready", "a/b", "main", bytes_done=1000, bytes_total=1000, bytes_fetched=1000))
    assert [e.phase for e in seen].count("Ready") == 1
    assert [e.at for e in seen] == sorted(e.at for e in seen)
    assert len(seen) == 6  # t = 0, 1, 2, 3, 4 s, and Ready
    early = seen[:2]  # 0 and 1 s into the download: no minimum sample yet
    assert [(e.rate_bytes_per_s, e.eta_s) for e in early] == [(None, None), (None, None)]
    middle = seen[2]  # 2 s, 200 bytes
    assert middle.rate_bytes_per_s == pytest.approx(100.0)
    assert middle.eta_s == pytest.approx((1000 - 200) / 100)
    assert seen[-1].eta_s == 0.0
    assert seen[-1].status_patch() == {"phase": "Ready", "progress": {"bytesDone": 1000, "bytesTotal": 1000}}


def test_the_issues_early_rate_never_reaches_the_status() -> None:
    """``0.0 MB/s, ETA 15686s`` for a 1.5 MiB file done a second later: the downloader's line
    (what the operator copies into ``status.progress`` and the message) carries no rate and no
    ETA until the one meter has its minimum sample (2 s and 256 KiB), with its default rule."""
    now = [100.0]
    lines = io.StringIO()
    reporter = Reporter([JsonLinesSink(lines)], interval=0.0, clock=lambda: now[0])
    total = int(1.5 * MiB)

    def at(seconds: float, done: int) -> dict[str, Any]:
        now[0] = 100.0 + seconds
        reporter.update(Progress("Downloading", "a/b", "main", bytes_done=done, bytes_total=total,
                                 bytes_fetched=done))  # fmt: skip
        line: dict[str, Any] = json.loads(lines.getvalue().splitlines()[-1])
        return line

    start = at(0.0, 0)
    assert (start["rate_bytes_per_s"], start["eta_s"]) == (None, None)
    first = at(0.4, 100)  # 250 B/s if believed: an ETA of 6291 s
    assert (first["rate_bytes_per_s"], first["eta_s"]) == (None, None)
    fast = at(1.0, 1_500_000)  # most of the file, but only 1 s of sample
    assert (fast["rate_bytes_per_s"], fast["eta_s"]) == (None, None)
    sampled = at(2.0, 1_560_000)  # 2 s and 1.5 MB: a rate, and an ETA from it
    assert sampled["rate_bytes_per_s"] == pytest.approx(780_000, abs=1)
    assert sampled["eta_s"] == pytest.approx((total - 1_560_000) / 780_000, abs=0.1)
    trickle = Reporter([], clock=lambda: now[0])
    for second, done in ((0, 0), (300, 300 * 1000)):  # 1,000 B/s for 5 minutes: a rate, no ETA
        now[0] = float(second)
        trickle.update(Progress("Downloading", "a/b", "main", bytes_done=done, bytes_total=10 * MiB,
                                bytes_fetched=done))  # fmt: skip
    assert trickle.last is not None
    assert (trickle.last.rate_bytes_per_s, trickle.last.eta_s) == (1000.0, None)


def test_rate_and_eta_move_inside_one_big_file(hub: Hub, cache_root: Path) -> None:
    """The rate counts bytes of the file in flight, not only finished files (a single large
    shard must not show 0 B/s and an ETA of hours)."""
    size = hub.repo(TINY).tree(hub.repo(TINY).head)["model.safetensors"].file.size
    hub.slow("*model.safetensors", rate=size / 4)  # about 4 s for the one big file
    seen: list[Progress] = []
    reporter = Reporter([seen.append], interval=0.2)
    Downloader(cache_root, Source(TINY, "main", hub.url), reporter=reporter).download()
    inside = [e for e in seen if e.phase == "Downloading" and size / 4 < e.bytes_done < size * 3 / 4]
    assert inside, [(e.phase, e.bytes_done) for e in seen]
    # NB: no rate before the minimum sample (256 KiB fetched, whatever the clock says)
    early = [e.rate_bytes_per_s for e in seen if e.bytes_fetched < MIN_BYTES]
    assert early, [(e.phase, e.bytes_fetched) for e in seen]
    assert early == [None] * len(early)
    rate = inside[-1].rate_bytes_per_s  # about 3 s into the 4 s file: the sample is 2 s and 1 MiB
    assert rate is not None, [(e.bytes_done, e.rate_bytes_per_s) for e in seen]
    assert size / 4 * 0.4 < rate < size / 4 * 2.5, rate  # the paced rate, within a wide margin
    eta = inside[-1].eta_s
    assert eta is not None
    assert 0 < eta < 10


def test_unreachable_hub_is_retryable(cache_root: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    downloader = Downloader(cache_root, Source(TINY, "main", f"http://127.0.0.1:{port}"), attempts=1)
    with pytest.raises(hferrors.DownloadError) as down:
        downloader.download()
    assert down.value.code == hferrors.EXIT_UNAVAILABLE
    assert down.value.retryable


@pytest.mark.parametrize("cdn", [False, True])
def test_orphaned_incomplete_is_continued_with_range(cache_root: Path, cdn: bool) -> None:
    """A partial blob under the library's temp name is continued, also through a CDN redirect."""
    with Hub([big_model((3,))], lfs_redirect=cdn) as hub:
        repo = hub.repo(BIG)
        name = "model-00001-of-00001.safetensors"
        meta = repo.tree(repo.head)[name]
        layout = CacheLayout(cache_root, BIG)
        layout.blobs.mkdir(parents=True)
        orphan = layout.blobs / f"{meta.sha256}.0a1b2c3d.incomplete"
        orphan.write_bytes(meta.file.data[: 2 * MiB + 7])
        (layout.blobs / f"{meta.sha256}.ffffffff.incomplete").write_bytes(meta.file.data[:100])
        result = Downloader(cache_root, Source(BIG, "main", hub.url), verify="sha256").download()
        assert result.how == {"resumed": 1, "fetched": 1}
        assert hub.stats()[f"{BIG}/{name}"].bytes == MiB - 7
        assert hub.stats()[f"{BIG}/{name}"].statuses[206] == 1
        assert not layout.incomplete(meta.sha256)
        assert layout.blob(meta.sha256).read_bytes() == meta.file.data


def test_files_with_the_same_content_share_one_blob(cache_root: Path) -> None:
    weights = generated(MiB, "same")
    files = {
        "a.txt": b"same\n",
        "copy/a.txt": b"same\n",
        "w1.safetensors": weights,
        "w2.safetensors": weights,
    }
    with Hub([Repo("org/dupes", files)]) as hub:
        result = Downloader(cache_root, Source("org/dupes", "main", hub.url), verify="sha256").download()
        assert result.how == {"fetched": 4}
        snapshot = Path(result.snapshot)
        for path, data in files.items():
            assert (snapshot / path).read_bytes() == data
        assert len(list(CacheLayout(cache_root, "org/dupes").blobs.iterdir())) == 2
        assert hub.bytes_served() == MiB + 5
