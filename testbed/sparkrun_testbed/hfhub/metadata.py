"""JSON bodies of the Hub API (revision info, tree listing, refs), built from a :class:`Repo`."""

from __future__ import annotations

import hashlib
from typing import Any

from sparkrun_testbed.hfhub.repo import Repo, _FileMeta

_EPOCH = "2026-01-01T00:00:00.000Z"


def revision_info(repo: Repo, sha: str, *, blobs: bool) -> dict[str, Any]:
    """``GET /api/{type}s/{id}[/revision/{rev}]``: what ``HfApi.model_info`` parses."""
    siblings: list[dict[str, Any]] = []
    for path, meta in sorted(repo.tree(sha).items()):
        entry: dict[str, Any] = {"rfilename": path}
        if blobs:
            entry["size"] = meta.file.size
            entry["blobId"] = meta.blob_id
            if meta.file.lfs:
                entry["lfs"] = {
                    "size": meta.file.size,
                    "sha256": meta.sha256,
                    "pointerSize": meta.pointer_size,
                }
        siblings.append(entry)
    author = repo.repo_id.split("/")[0] if "/" in repo.repo_id else None
    body: dict[str, Any] = {
        "_id": sha[:24],
        "id": repo.repo_id,
        "author": author,
        "sha": sha,
        "private": repo.private,
        "gated": "manual" if repo.gated else False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "lastModified": _EPOCH,
        "createdAt": _EPOCH,
        "siblings": siblings,
    }
    if repo.repo_type == "model":
        body["modelId"] = repo.repo_id
        body["library_name"] = "transformers"
    return body


def _directories(paths: list[str]) -> set[str]:
    dirs: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def _dir_oid(tree: dict[str, _FileMeta], directory: str) -> str:
    digest = hashlib.sha1(directory.encode(), usedforsecurity=False)
    for path in sorted(tree):
        if path.startswith(directory + "/"):
            digest.update(tree[path].blob_id.encode())
    return digest.hexdigest()


def tree_entries(repo: Repo, sha: str, prefix: str, *, recursive: bool) -> list[dict[str, Any]] | None:
    """``GET /api/{type}s/{id}/tree/{rev}[/{path}]``; None when ``prefix`` is no directory."""
    tree = repo.tree(sha)
    prefix = prefix.strip("/")
    dirs = _directories(list(tree))
    if prefix and prefix not in dirs:
        return None
    base = prefix + "/" if prefix else ""

    def wanted(path: str) -> bool:
        if not path.startswith(base):
            return False
        return recursive or "/" not in path[len(base) :]

    entries: list[dict[str, Any]] = []
    for directory in sorted(d for d in dirs if wanted(d)):
        entries.append({"type": "directory", "oid": _dir_oid(tree, directory), "size": 0, "path": directory})
    for path, meta in sorted(tree.items()):
        if not wanted(path):
            continue
        entry: dict[str, Any] = {"type": "file", "oid": meta.blob_id, "size": meta.file.size, "path": path}
        if meta.file.lfs:
            entry["lfs"] = {"oid": meta.sha256, "size": meta.file.size, "pointerSize": meta.pointer_size}
        entries.append(entry)
    return entries


def refs(repo: Repo) -> dict[str, Any]:
    """``GET /api/{type}s/{id}/refs``."""
    return {
        "branches": [
            {"name": n, "ref": f"refs/heads/{n}", "targetCommit": s} for n, s in sorted(repo.branches.items())
        ],
        "tags": [
            {"name": n, "ref": f"refs/tags/{n}", "targetCommit": s} for n, s in sorted(repo.tags.items())
        ],
        "converts": [],
    }


def summary(repo: Repo) -> dict[str, Any]:
    """What ``GET /_admin/repos`` reports for one repo (tests in another process read it)."""
    head = repo.tree(repo.head)
    return {
        "repo_id": repo.repo_id,
        "repo_type": repo.repo_type,
        "private": repo.private,
        "gated": repo.gated,
        "branches": dict(repo.branches),
        "tags": dict(repo.tags),
        "files": {
            p: {
                "size": m.file.size,
                "lfs": m.file.lfs,
                "sha256": m.sha256,
                "blob_id": m.blob_id,
                "etag": m.etag,
            }
            for p, m in sorted(head.items())
        },
    }
