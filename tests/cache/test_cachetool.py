"""The cache tool (``runtime/cachetool.py``) over caches the real downloader and the real
``huggingface_hub.snapshot_download`` wrote from the local Hub: scan, remove, adopt, import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparkrun_operator.runtime import cachetool
from sparkrun_operator.runtime.download import Downloader, Source
from sparkrun_operator.runtime.hfcache import CacheLayout
from sparkrun_testbed.hfhub import TAG, TINY, Hub

_CMD = (sys.executable, "-m", "sparkrun_operator.runtime.cachetool")


def _download(hub: Hub, root: Path, revision: str) -> str:
    return Downloader(root, Source(TINY, revision, hub.url), verify="sha256").download().commit


def _tool(*args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run([*_CMD, *args], capture_output=True, text=True, timeout=60, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stderr
    return done.returncode, json.loads(lines[-1])


def test_scan_counts_private_and_shared_blobs_and_refs(hub: Hub, cache_root: Path) -> None:
    old = _download(hub, cache_root, TAG)
    new = _download(hub, cache_root, "main")
    code, report = _tool("scan", "--root", str(cache_root))
    assert code == 0
    rows = {r["commit"]: r for r in report["snapshots"]}  # type: ignore[union-attr]
    assert set(rows) == {old, new}
    assert rows[old]["refs"] == [TAG]
    assert rows[new]["refs"] == ["main"]
    repo = hub.repo(TINY)
    assert rows[new]["logical_bytes"] == sum(m.file.size for m in repo.tree(new).values())
    # the revisions share every blob but config.json and the weights: only those two are private
    # (counted as allocated bytes: whole filesystem blocks)
    tree = repo.tree(old)
    own = tree["config.json"].file.size + tree["model.safetensors"].file.size
    assert own <= rows[old]["private_bytes"] <= own + 2 * 65536
    assert rows[old]["manifest_complete"] is True
    assert rows[old]["blob_linked"] is True
    assert int(report["free_bytes"]) > 0  # type: ignore[call-overload]


def test_remove_keeps_shared_blobs_and_the_other_revision_intact(hub: Hub, cache_root: Path) -> None:
    old = _download(hub, cache_root, TAG)
    new = _download(hub, cache_root, "main")
    code, report = _tool("remove", "--root", str(cache_root), "--target", f"{TINY}@{old}")
    assert code == 0, report
    [removed] = report["removed"]  # type: ignore[misc]
    assert removed["removed"] is True
    assert removed["reclaimed_bytes"] > 0
    layout = CacheLayout(cache_root, TINY)
    assert not layout.snapshot(old).exists()
    assert layout.read_ref(TAG) is None  # its ref went with it
    assert layout.load_manifest(old) is not None  # saved manifests are kept
    inspect = Downloader(cache_root, Source(TINY, "main", hub.url)).inspect(new, "sha256")
    assert inspect.clean, inspect  # every shared blob of the other revision is still there
    # an unknown commit is reported, not an error
    code, report = _tool("remove", "--root", str(cache_root), "--target", f"{TINY}@{'0' * 40}")
    assert code == 0
    assert report["removed"][0]["removed"] is False
    code, report = _tool("remove", "--root", str(cache_root), "--target", "no-commit")
    assert code == 2
    assert report["event"] == "error"


def test_adopt_enrols_a_foreign_snapshot_offline_and_catches_a_bad_blob(hub: Hub, cache_root: Path) -> None:
    env = {**os.environ, "HF_HUB_DISABLE_XET": "1"}
    code = (
        "import huggingface_hub as h, sys;"
        f"print(h.snapshot_download({TINY!r}, revision={TAG!r}, cache_dir=sys.argv[1], endpoint={hub.url!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(cache_root / "hub")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    commit = Path(out.stdout.strip()).name
    assert commit == hub.repo(TINY).tags[TAG]
    layout = CacheLayout(cache_root, TINY)
    assert layout.load_manifest(commit) is None  # written by another tool: untracked
    rc, preview = _tool("adopt", "--root", str(cache_root), "--repo", TINY, "--dry-run")
    assert rc == 0
    assert [r["result"] for r in preview["adopted"]] == ["adoptable"]
    assert layout.load_manifest(commit) is None  # a preview writes nothing
    rc, done = _tool("adopt", "--root", str(cache_root), "--repo", TINY)
    assert [r["result"] for r in done["adopted"]] == ["adopted"]  # type: ignore[union-attr]
    manifest = layout.load_manifest(commit)
    assert manifest is not None
    assert manifest.complete
    assert manifest.revision == TAG
    # the adopted manifest is enough: the downloader makes the commit Ready with the Hub gone
    hub.reset_stats()
    result = Downloader(cache_root, Source(TINY, commit, "http://127.0.0.1:9")).download()
    assert result.commit == commit
    assert result.fetched_bytes == 0
    assert hub.stats() == {}
    # a corrupted blob makes a snapshot unverifiable for adoption
    layout.manifest_path(commit).unlink()
    weights = layout.pointer(commit, "model.safetensors").resolve()
    data = bytearray(weights.read_bytes())
    data[10] ^= 0xFF
    weights.write_bytes(bytes(data))
    rc, bad = _tool("adopt", "--root", str(cache_root), "--repo", TINY, "--dry-run")
    assert [r["result"] for r in bad["adopted"]] == ["adopt_unverifiable"]  # type: ignore[union-attr]


def test_import_saves_a_manifest_and_reports_completeness(hub: Hub, cache_root: Path, tmp_path: Path) -> None:
    commit = _download(hub, cache_root, TAG)
    layout = CacheLayout(cache_root, TINY)
    manifest = layout.load_manifest(commit)
    assert manifest is not None
    daemon_shape = manifest.to_daemon()
    other = tmp_path / "other"
    other.mkdir()
    rc, report = _tool(
        "import", "--root", str(other), "--commit", commit, "--manifest-json", json.dumps(daemon_shape)
    )
    assert rc == 0
    assert report["complete"] is False
    assert {f["reason"] for f in report["failures"]} == {"missing"}  # type: ignore[union-attr]
    saved = CacheLayout(other, TINY).load_manifest(commit)
    assert saved is not None
    assert not saved.complete
    assert len(saved.files) == len(manifest.files)
    rc, report = _tool(
        "import", "--root", str(cache_root), "--commit", commit, "--manifest-json", json.dumps(daemon_shape)
    )
    assert report["complete"] is True
    assert report["failures"] == []
    bad = {**daemon_shape, "files": [{"path": "x", "size": 1, "checksum_algorithm": "md5", "checksum": "0"}]}
    rc, report = _tool("import", "--root", str(other), "--commit", commit, "--manifest-json", json.dumps(bad))
    assert rc == 2
    assert "checksum_algorithm" in str(report["message"])


def test_selection_and_the_daemon_manifest_shape() -> None:
    from sparkrun_operator.runtime.hfcache import select_files

    paths = ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"]
    assert select_files(paths, "all") == paths
    assert select_files(paths, "safetensors") == ["config.json", "model.safetensors", "tokenizer.json"]
    assert select_files(paths, "auto") == ["config.json", "model.safetensors", "tokenizer.json"]
    assert select_files(["config.json", "pytorch_model.bin"], "auto") == ["config.json", "pytorch_model.bin"]
    assert cachetool.repo_of_folder("models--org--name") == ("org/name", "model")
    assert cachetool.repo_of_folder(".locks") is None
