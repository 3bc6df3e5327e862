"""The downloader sends a token only where it may (ADR 0040), against the local Hub on loopback.

- ``--token-origins``: the token goes to the endpoint only when its origin is listed; elsewhere
  the requests are anonymous and a failure says why (a private repository is then not found);
- redirects: an LFS file the Hub redirects to another host (its CDN) is fetched there without
  the token, by ``hf_hub_download`` and by the downloader's own resume of a partial blob.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrun_operator.runtime import hferrors
from sparkrun_operator.runtime.download import Downloader, Source
from sparkrun_operator.runtime.hfcache import CacheLayout
from sparkrun_testbed.hfhub import GATED, PRIVATE, TOKEN, Hub
from sparkrun_testbed.hfhub.fixtures import gated_model, private_model

MiB = 1024 * 1024


def _resolve(hub: Hub, token_file: Path, root: Path, *origins: str) -> tuple[int, dict[str, object]]:
    argv = [sys.executable, "-m", "sparkrun_operator.runtime.download", "resolve", "--root", str(root)]
    argv += ["--repo", PRIVATE, "--endpoint", hub.url, "--quiet", "--token-file", str(token_file)]
    argv += [arg for origin in origins for arg in ("--token-origins", origin)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, "HF_TOKEN": ""}, check=False
    )
    assert TOKEN not in done.stdout + done.stderr
    event: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return done.returncode, event


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def test_the_token_goes_only_to_a_listed_origin(tmp_path: Path, token_file: Path) -> None:
    with Hub([private_model()], tokens=[TOKEN]) as hub:
        port = hub.url.rsplit(":", 1)[1]
        for listed in (hub.url, f"HTTP://127.0.0.1:{port}/", f"https://huggingface.co,{hub.url}"):
            code, event = _resolve(hub, token_file, tmp_path / "ok", listed)
            assert (code, event["event"]) == (0, "manifest"), (listed, event)
        # unrestricted without the flag (a ModelCache's own token: its owner may read it, ADR 0040)
        assert _resolve(hub, token_file, tmp_path / "own")[0] == 0
        for listed in ("https://huggingface.co", "", f"http://127.0.0.2:{port}", f"http://127.0.0.1:{port}0"):
            code, event = _resolve(hub, token_file, tmp_path / "no", listed)
            assert code == hferrors.EXIT_REPO_NOT_FOUND, (listed, event)
            assert f"is not sent to {hub.url}" in str(event["message"]), event
            assert "operator.credentials.allowedEndpoints.huggingFace" in str(event["message"])


def test_a_redirect_to_another_host_drops_the_token(tmp_path: Path) -> None:
    with Hub([gated_model()], tokens=[TOKEN], lfs_redirect=True) as hub:
        fresh = Downloader(tmp_path / "a", Source(GATED, "main", hub.url), token=TOKEN, verify="sha256")
        assert fresh.download().how["fetched"] >= 1
        assert hub.stats()[f"{GATED}/model.safetensors"].statuses[302] >= 1
        # a partial blob left by a killed pod is continued through the redirect as well
        root = tmp_path / "b"
        meta = hub.repo(GATED).tree(hub.repo(GATED).head)["model.safetensors"]
        layout = CacheLayout(root, GATED)
        layout.blobs.mkdir(parents=True)
        (layout.blobs / f"{meta.sha256}.0a1b2c3d.incomplete").write_bytes(meta.file.data[: MiB // 2])
        resumed = Downloader(root, Source(GATED, "main", hub.url), token=TOKEN, verify="sha256").download()
        assert resumed.how.get("resumed") == 1
        assert hub.cdn_authorization_seen == 0
