"""The local Hub against the real ``huggingface_hub`` (what the downloader relies on)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import tokenizers
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors

from sparkrun_testbed.hfhub import (
    BIG,
    BRANCH,
    DATASET,
    GATED,
    PRIVATE,
    TAG,
    TINY,
    TOKEN,
    TOKENIZER,
    Hub,
    Repo,
)
from sparkrun_testbed.hfhub.fixtures import gated_model, tokenizer_repo

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def _cache(tmp_path: Path) -> str:
    return str(tmp_path / "hf")


def test_snapshot_download_branch_tag_and_commit(hub: Hub, tmp_path: Path) -> None:
    repo = hub.repo(TINY)
    for revision, sha in ((TAG, repo.tags[TAG]), ("main", repo.head), (BRANCH, repo.branches[BRANCH])):
        path = Path(
            snapshot_download(
                TINY, revision=revision, endpoint=hub.url, cache_dir=_cache(tmp_path), token=False
            )
        )
        assert path.name == sha
        for name, meta in repo.tree(sha).items():
            assert (path / name).read_bytes() == meta.file.data
    assert (
        Path(_cache(tmp_path)) / "models--sparkrun-test--tiny-model" / "refs" / TAG
    ).read_text() == repo.tags[TAG]
    assert not (path / "dev-only.txt").exists() or path.name == repo.branches[BRANCH]


def test_model_info_tree_refs(hub: Hub) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    repo = hub.repo(TINY)
    info = api.model_info(TINY, revision=TAG, files_metadata=True)
    assert info.sha == repo.tags[TAG]
    lfs = {s.rfilename: s.lfs for s in info.siblings or [] if s.lfs}
    assert set(lfs) == {"model.safetensors"}
    assert lfs["model.safetensors"].sha256 == repo.tree(repo.tags[TAG])["model.safetensors"].sha256
    files = {f.path for f in api.list_repo_tree(TINY, recursive=True) if hasattr(f, "lfs")}
    assert files == set(repo.tree(repo.head))
    refs = api.list_repo_refs(TINY)
    assert {b.name: b.target_commit for b in refs.branches} == repo.branches
    assert {t.name: t.target_commit for t in refs.tags} == repo.tags


def test_tree_pagination_follows_link() -> None:
    files = {f"f{i:02d}.txt": f"{i}\n".encode() for i in range(7)}
    with Hub([Repo("org/paged", files)], tree_page_size=3) as hub:
        listed = [
            f.path for f in HfApi(endpoint=hub.url, token=False).list_repo_tree("org/paged", recursive=True)
        ]
        assert listed == sorted(files)
        assert hub.stats()["api:org/paged"].requests == 3


def test_errors_map_to_library_exceptions(hub: Hub, tmp_path: Path) -> None:
    kw = {"endpoint": hub.url, "cache_dir": _cache(tmp_path)}
    with pytest.raises(hf_errors.RevisionNotFoundError):
        snapshot_download(TINY, revision="no-such-branch", token=False, **kw)
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):
        hf_hub_download(TINY, "missing.bin", token=False, **kw)
    with pytest.raises(hf_errors.GatedRepoError) as no_token:
        hf_hub_download(GATED, "config.json", token=False, **kw)
    assert no_token.value.response.status_code == 401
    with pytest.raises(hf_errors.GatedRepoError) as bad_token:
        hf_hub_download(GATED, "config.json", token="hf_wrong", **kw)
    assert bad_token.value.response.status_code == 403
    assert Path(hf_hub_download(GATED, "config.json", token=TOKEN, **kw)).read_bytes().startswith(b"{")
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info(PRIVATE)
    assert HfApi(endpoint=hub.url, token=TOKEN).model_info(PRIVATE).private
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info("nobody/nothing")


def test_missing_file_carries_commit(hub: Hub) -> None:
    response = httpx.head(f"{hub.url}/{TINY}/resolve/{TAG}/missing.bin")
    assert response.status_code == 404
    assert response.headers["x-error-code"] == "EntryNotFound"
    assert response.headers["x-repo-commit"] == hub.repo(TINY).tags[TAG]


def test_resolve_headers_range_and_no_xet(hub: Hub) -> None:
    repo = hub.repo(TINY)
    meta = repo.tree(repo.head)["model.safetensors"]
    url = f"{hub.url}/{TINY}/resolve/main/model.safetensors"
    head = httpx.head(url)
    assert head.headers["x-linked-etag"] == f'"{meta.sha256}"'
    assert int(head.headers["x-linked-size"]) == int(head.headers["content-length"]) == meta.file.size
    assert head.headers["x-repo-commit"] == repo.head
    assert not [h for h in head.headers if h.lower().startswith("x-xet")]
    part = httpx.get(url, headers={"Range": "bytes=100-199"})
    assert part.status_code == 206
    assert part.content == meta.file.data[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{meta.file.size}"
    assert httpx.get(url, headers={"Range": f"bytes={meta.file.size}-"}).status_code == 416
    hub.ignore_range(f"{TINY}/model.safetensors", times=1)
    assert httpx.get(url, headers={"Range": "bytes=100-"}).status_code == 200
    tree = httpx.get(f"{hub.url}/api/models/{TINY}/tree/main", params={"recursive": "true"}).text
    assert "xetHash" not in tree


def test_dropped_connection_resumes_with_range(hub: Hub, tmp_path: Path) -> None:
    """A cut after 15 MiB of a 24 MiB file: the library resumes from its last whole chunk."""
    name = "model-00001-of-00002.safetensors"
    key = f"{BIG}/{name}"
    hub.drop(key, after_bytes=15 * MiB, times=1)
    path = hf_hub_download(BIG, name, endpoint=hub.url, cache_dir=_cache(tmp_path), token=False)
    repo = hub.repo(BIG)
    assert Path(path).read_bytes() == repo.tree(repo.head)[name].file.data
    stats = hub.stats()[key]
    assert stats.get == 2
    assert stats.statuses.get(206) == 1
    chunk = hf_constants.DOWNLOAD_CHUNK_SIZE  # 10 MiB; 1 MiB once runtime.download is imported
    assert stats.bytes == 15 * MiB + 24 * MiB - (15 * MiB // chunk) * chunk


def test_status_faults_are_retried(hub: Hub, tmp_path: Path) -> None:
    key = f"{TINY}/config.json"
    hub.fail(key, status=429, retry_after=0, times=1)
    hub.fail(key, status=500, times=1)
    path = hf_hub_download(TINY, "config.json", endpoint=hub.url, cache_dir=_cache(tmp_path), token=False)
    assert Path(path).exists()
    assert hub.stats()[key].statuses[429] == 1
    assert hub.stats()[key].statuses[500] == 1


def test_corrupt_and_slow_knobs(hub: Hub) -> None:
    repo = hub.repo(TINY)
    data = repo.tree(repo.head)["config.json"].file.data
    hub.corrupt(f"{TINY}/config.json", offset=3, times=1)
    served = httpx.get(f"{hub.url}/{TINY}/resolve/main/config.json").content
    assert served != data
    assert served[:3] + served[4:] == data[:3] + data[4:]
    assert httpx.get(f"{hub.url}/{TINY}/resolve/main/config.json").content == data


def test_dataset_repo(hub: Hub, tmp_path: Path) -> None:
    path = snapshot_download(
        DATASET, repo_type="dataset", endpoint=hub.url, cache_dir=_cache(tmp_path), token=False
    )
    assert (Path(path) / "data" / "train.jsonl").read_text().count("\n") == 100


def test_lfs_redirect_to_cdn_drops_authorization(tmp_path: Path) -> None:
    with Hub([gated_model()], tokens=[TOKEN], lfs_redirect=True) as hub:
        path = snapshot_download(GATED, endpoint=hub.url, cache_dir=_cache(tmp_path), token=TOKEN)
        assert (Path(path) / "model.safetensors").stat().st_size == MiB
        assert hub.stats()[f"{GATED}/model.safetensors"].statuses[302] >= 1
        assert hub.cdn_authorization_seen == 0


def test_admin_endpoint_sets_faults_and_reports_counters(hub: Hub) -> None:
    created = httpx.post(
        f"{hub.url}/_admin/faults", json={"kind": "status", "path": f"{TINY}/README.md", "status": 500}
    )
    assert created.status_code == 201
    assert httpx.get(f"{hub.url}/{TINY}/resolve/main/README.md").status_code == 500
    assert httpx.get(f"{hub.url}/{TINY}/resolve/main/README.md").status_code == 200
    assert httpx.post(f"{hub.url}/_admin/faults", json={"kind": "nope"}).status_code == 400
    stats = httpx.get(f"{hub.url}/_admin/stats").json()
    assert stats[f"{TINY}/README.md"]["statuses"] == {"500": 1, "200": 1}
    repos = httpx.get(f"{hub.url}/_admin/repos").json()
    assert repos[TINY]["tags"][TAG] == hub.repo(TINY).tags[TAG]


def test_tokenizer_repo_serves_a_real_tokenizer(tmp_path: Path) -> None:
    repo = tokenizer_repo()
    assert repo is not None
    with Hub([repo]) as hub:
        path = hf_hub_download(
            TOKENIZER, "tokenizer.json", endpoint=hub.url, cache_dir=_cache(tmp_path), token=False
        )
    encoded = tokenizers.Tokenizer.from_file(path).encode("hello world")
    assert encoded.ids


def test_cli_prints_url_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "testbed")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkrun_testbed.hfhub", "--port", "0", "--print-url"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        info = httpx.get(f"{url}/api/models/{TINY}", timeout=10).json()
        assert info["id"] == TINY
        assert json.loads(httpx.get(f"{url}/_admin/health").text) == {"ok": True}
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
