"""Offline mode, as vLLM with ``HF_HUB_OFFLINE=1``: the weights must already be in the HF cache.

With ``HF_HUB_OFFLINE=1`` the stand-in refuses to start unless the snapshot of ``--model`` at
``--revision`` (a commit, or a ref name resolved through ``refs/``; ``main`` when unset) exists
under ``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``) with at least ``config.json`` in it, so a
test proves that an engine serves from a ModelCache and not from the network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def hub_cache(env: Mapping[str, str]) -> Path | None:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return None


def check(model: str, revision: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """``None`` when the engine may start; else why not (offline and the snapshot is absent)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes", "on"):
        return None
    cache = hub_cache(env)
    if cache is None:
        return "HF_HUB_OFFLINE=1 but neither HF_HOME nor HF_HUB_CACHE is set"
    repo_dir = cache / ("models--" + model.replace("/", "--"))
    rev = revision or "main"
    commit = rev
    if not _COMMIT.match(rev):
        ref = repo_dir / "refs" / rev
        if not ref.is_file():
            return f"offline: {model} revision {rev!r} is not in the cache {cache} (no {ref})"
        commit = ref.read_text().strip()
    snapshot = repo_dir / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        return f"offline: {model} at {commit} is not in the cache {cache} (no {snapshot}/config.json)"
    return None
