"""The cache tool: inventory and file-level verbs over an HF hub cache on a cache volume.

``python -m sparkrun_operator.runtime.cachetool {scan,remove,adopt,import} --root DIR ...`` runs in
the short Jobs of the ``model_cache.*`` daemon operations (ADR 0023), with the cache's claim
mounted at ``--root``. It prints one JSON line ``{"event": "report", ...}`` (or ``{"event":
"error", ...}``) and needs no network and no ``huggingface_hub``:

- ``scan``: every snapshot of every repository: commit, refs naming it, files, logical bytes,
  private (reclaimable) bytes — blobs no other snapshot of the repository links — as allocated
  bytes, the snapshot's mtime, whether a complete manifest exists, orphaned partial downloads;
  and the filesystem's free bytes.
- ``remove``: delete snapshots (their refs and their private blobs; blobs other snapshots link
  are kept; saved manifests are kept) and report what was reclaimed, measured.
- ``adopt``: build a manifest from the blob links of snapshots written by any HF tool (each file a
  link to ``blobs/<sha256>`` or ``blobs/<git-sha1>``), verify every blob against its name, and
  save the manifest (unless ``--dry-run``), so the snapshot can be tracked without a download.
- ``import``: save a manifest supplied as a file (no weights) and report completeness.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrun_operator import safeload
from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.runtime import hferrors
from sparkrun_operator.runtime.hfcache import (
    CacheLayout,
    FileEntry,
    Manifest,
    VerifiedBlobs,
    check_file,
    git_blob_sha1_hasher,
    now,
)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_BUF = 8 << 20


def _allocated(path: Path) -> int:
    st = path.stat()
    blocks = getattr(st, "st_blocks", None)
    return int(blocks * 512) if blocks is not None else int(st.st_size)


def free_bytes(root: Path) -> int:
    st = os.statvfs(root)
    return int(st.f_bavail * st.f_frsize)


def repo_of_folder(folder: str) -> tuple[str, str] | None:
    """``models--org--name`` -> ``("org/name", "model")``; ``None`` for other folders."""
    kind, sep, rest = folder.partition("--")
    if not sep or kind not in ("models", "datasets") or not rest:
        return None
    return rest.replace("--", "/"), kind[:-1]


@dataclass
class Snapshot:
    """One ``snapshots/<commit>`` directory of one repository."""

    repo: str
    repo_type: str
    commit: str
    path: Path
    #: file path -> blob name (``None``: not a link into ``blobs/``)
    links: dict[str, str | None]

    @property
    def blob_linked(self) -> bool:
        return bool(self.links) and all(v is not None for v in self.links.values())


def _links(snapshot: Path, blobs: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dirpath, _dirs, files in os.walk(snapshot):
        for name in files:
            pointer = Path(dirpath) / name
            rel = pointer.relative_to(snapshot).as_posix()
            target: str | None = None
            if pointer.is_symlink():
                with contextlib.suppress(OSError):
                    resolved = pointer.resolve()
                    if resolved.parent == blobs.resolve():
                        target = resolved.name
            out[rel] = target
    return out


def snapshots(root: Path, repo: str | None = None) -> Iterator[tuple[CacheLayout, Snapshot]]:
    """Every snapshot under ``root/hub`` (of ``repo`` only, when given), sorted."""
    hub = root / "hub"
    if not hub.is_dir():
        return
    for folder in sorted(p.name for p in hub.iterdir() if p.is_dir()):
        parsed = repo_of_folder(folder)
        if parsed is None or (repo is not None and parsed[0] != repo):
            continue
        layout = CacheLayout(root, parsed[0], parsed[1])
        snaps = layout.repo_dir / "snapshots"
        if not snaps.is_dir():
            continue
        for commit_dir in sorted(p for p in snaps.iterdir() if p.is_dir()):
            links = _links(commit_dir, layout.blobs)
            yield layout, Snapshot(parsed[0], parsed[1], commit_dir.name, commit_dir, links)


def _refs(layout: CacheLayout) -> dict[str, list[str]]:
    """commit -> ref names pointing at it."""
    out: dict[str, list[str]] = {}
    refs = layout.repo_dir / "refs"
    if not refs.is_dir():
        return out
    for path in sorted(refs.rglob("*")):
        if path.is_file():
            with contextlib.suppress(OSError):
                out.setdefault(path.read_text().strip(), []).append(path.relative_to(refs).as_posix())
    return out


def _blob_users(layout: CacheLayout) -> dict[str, set[str]]:
    """blob name -> commits whose snapshot links it."""
    users: dict[str, set[str]] = {}
    for _layout, snap in snapshots(layout.root, layout.repo_id):
        if snap.repo_type != layout.repo_type:
            continue
        for blob in snap.links.values():
            if blob is not None:
                users.setdefault(blob, set()).add(snap.commit)
    return users


def scan(root: Path, repo: str | None = None) -> dict[str, Any]:
    """The inventory of the cache (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    users_by_repo: dict[str, dict[str, set[str]]] = {}
    refs_by_repo: dict[str, dict[str, list[str]]] = {}
    for layout, snap in snapshots(root, repo):
        users = users_by_repo.setdefault(layout.folder, _blob_users(layout))
        refs = refs_by_repo.setdefault(layout.folder, _refs(layout))
        logical = private = 0
        seen: set[str] = set()
        for rel, blob in snap.links.items():
            target = layout.blob(blob) if blob else snap.path / rel
            with contextlib.suppress(OSError):
                logical += target.stat().st_size
                if blob and blob not in seen and users.get(blob, set()) == {snap.commit}:
                    seen.add(blob)
                    private += _allocated(target)
        manifest = layout.load_manifest(snap.commit)
        rows.append(
            {
                "repo": snap.repo,
                "repo_type": snap.repo_type,
                "commit": snap.commit,
                "snapshot": str(snap.path),
                "refs": refs.get(snap.commit, []),
                "files": len(snap.links),
                "logical_bytes": logical,
                "private_bytes": private,
                "mtime": snap.path.stat().st_mtime,
                "manifest": manifest is not None,
                "manifest_complete": bool(manifest and manifest.complete),
                "blob_linked": snap.blob_linked,
                "partial_downloads": len(list(layout.blobs.glob("*.incomplete")))
                if layout.blobs.is_dir()
                else 0,
            }
        )
    return {"event": "report", "root": str(root), "free_bytes": free_bytes(root), "snapshots": rows}


def remove(root: Path, targets: Sequence[tuple[str, str]], repo_type: str = "model") -> dict[str, Any]:
    """Delete the snapshots ``targets`` (``(repo, commit)``): refs naming them, then blobs nobody
    else links. Saved manifests are kept."""
    before = free_bytes(root)
    removed: list[dict[str, Any]] = []
    for repo, commit in targets:
        layout = CacheLayout(root, repo, repo_type)
        snap = layout.snapshot(commit)
        if not _SHA1.match(commit) or not snap.is_dir():
            removed.append({"repo": repo, "commit": commit, "removed": False, "reclaimed_bytes": 0})
            continue
        users = _blob_users(layout)
        links = _links(snap, layout.blobs)
        for name in _refs(layout).get(commit, []):
            (layout.repo_dir / "refs" / name).unlink(missing_ok=True)
        shutil.rmtree(snap)
        verified = VerifiedBlobs(layout)
        reclaimed = 0
        for blob in {b for b in links.values() if b is not None}:
            if users.get(blob, set()) - {commit}:
                continue
            path = layout.blob(blob)
            with contextlib.suppress(FileNotFoundError):
                reclaimed += _allocated(path)
                path.unlink()
            verified.forget(blob)
        removed.append({"repo": repo, "commit": commit, "removed": True, "reclaimed_bytes": reclaimed})
    return {
        "event": "report",
        "root": str(root),
        "free_bytes": before,
        "free_bytes_after": free_bytes(root),
        "reclaimed_bytes": sum(r["reclaimed_bytes"] for r in removed),
        "removed": removed,
    }


def _hash_matches(path: Path, name: str) -> bool:
    size = path.stat().st_size
    digest = hashlib.sha256() if _SHA256.match(name) else git_blob_sha1_hasher(size)
    buffer = bytearray(_BUF)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return bool(digest.hexdigest() == name)


def adopt(root: Path, repo: str | None, commit: str | None, *, dry_run: bool) -> dict[str, Any]:
    """Manifests for blob-linked snapshots, every blob checked against its content-hash name."""
    rows: list[dict[str, Any]] = []
    for layout, snap in snapshots(root, repo):
        if commit is not None and snap.commit != commit:
            continue
        row: dict[str, Any] = {"repo": snap.repo, "commit": snap.commit, "snapshot": str(snap.path)}
        bad = sorted(
            p for p, b in snap.links.items() if b is None or not (_SHA256.match(b) or _SHA1.match(b))
        )
        if not snap.links or bad:
            rows.append(
                row | {"result": "not_adoptable", "detail": f"files not linked to hub blobs: {bad[:5]}"}
            )
            continue
        files: list[FileEntry] = []
        failed: list[str] = []
        for rel, blob in sorted(snap.links.items()):
            assert blob is not None
            path = layout.blob(blob)
            try:
                ok = _hash_matches(path, blob)
            except OSError:
                ok = False
            if not ok:
                failed.append(rel)
                continue
            size = path.stat().st_size
            lfs = _SHA256.match(blob) is not None
            # NB: an LFS file's git pointer id is not on disk; its blob is named by its sha256.
            files.append(FileEntry(rel, size, blob, blob if lfs else None))
        if failed:
            rows.append(
                row | {"result": "adopt_unverifiable", "detail": f"blobs fail their hash: {failed[:5]}"}
            )
            continue
        refs = _refs(layout).get(snap.commit, [])
        previous = layout.load_manifest(snap.commit)
        if previous is not None and previous.complete:
            rows.append(
                row | {"result": "adoptable", "detail": "a complete manifest exists", "files": len(files)}
            )
            continue
        manifest = Manifest(
            repo=snap.repo,
            repo_type=snap.repo_type,
            revision=refs[0] if refs else snap.commit,
            commit=snap.commit,
            files=files,
            complete=True,
            verify="sha256",
            created_at=now(),
            verified_at=now(),
        )
        if not dry_run:
            layout.save_manifest(manifest)
        rows.append(
            row
            | {
                "result": "adoptable" if dry_run else "adopted",
                "detail": f"{len(files)} files verified against their blob hashes",
                "files": len(files),
            }
        )
    return {"event": "report", "root": str(root), "free_bytes": free_bytes(root), "adopted": rows}


def manifest_from_seed(body: dict[str, Any], commit: str) -> Manifest:
    """Our manifest from the daemon's manifest shape (``files[{path, size, checksum_algorithm,
    checksum}]``); ``checksum_algorithm`` ``sha256`` marks an LFS file, ``git-sha1`` a regular one."""
    files: list[FileEntry] = []
    for item in body.get("files") or []:
        path, size = str(item["path"]), int(item["size"])
        algorithm, checksum = item.get("checksum_algorithm"), item.get("checksum")
        if algorithm == "sha256" and isinstance(checksum, str) and _SHA256.match(checksum):
            files.append(FileEntry(path, size, checksum, checksum))
        elif algorithm in ("git-sha1", "sha1") and isinstance(checksum, str) and _SHA1.match(checksum):
            files.append(FileEntry(path, size, checksum, None))
        else:
            raise ValueError(f"file {path}: checksum_algorithm must be sha256 or git-sha1 with its checksum")
    if not files:
        raise ValueError("the manifest lists no files")
    return Manifest(
        repo=str(body["repo"]),
        repo_type="model",
        revision=str(body.get("revision") or commit),
        commit=commit,
        files=files,
        endpoint=body.get("endpoint") or None,
        verify="size",
        created_at=now(),
    )


def import_manifest(root: Path, manifest: Manifest, *, level: str) -> dict[str, Any]:
    """Save ``manifest`` (complete only if every file is already in place) and report each file."""
    layout = CacheLayout(root, manifest.repo, manifest.repo_type)
    lvl: Any = level
    states = {f.path: check_file(layout, manifest.commit, f, lvl) for f in manifest.files}
    complete = all(s == "ok" for s in states.values())
    manifest.complete = complete
    if complete:
        manifest.verified_at = now()
        layout.write_ref(manifest.revision, manifest.commit)
    path = layout.save_manifest(manifest)
    failures = [{"path": p, "reason": s} for p, s in sorted(states.items()) if s != "ok"]
    return {
        "event": "report",
        "root": str(root),
        "manifest": str(path),
        "commit": manifest.commit,
        "complete": complete,
        "checked_files": len(states),
        "failures": failures,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparkrun_operator.runtime.cachetool")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("scan", "remove", "adopt", "import"):
        p = sub.add_parser(name)
        p.add_argument("--root", required=True)
        p.add_argument("--repo", default=None)
        p.add_argument("--commit", action="append", default=[])
        p.add_argument("--target", action="append", default=[], help="remove: REPO@COMMIT (repeatable)")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--manifest-json", default=None, help="import: the manifest (the daemon's shape)")
        p.add_argument("--verify", default="size", choices=["none", "size", "sha256"])
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) and hferrors.EXIT_USAGE
    root = Path(args.root)
    try:
        if not root.is_dir():
            raise hferrors.DownloadError(hferrors.EXIT_STORAGE, f"the cache root {root} is not mounted")
        if args.command == "scan":
            body = scan(root, args.repo)
        elif args.command == "remove":
            targets = [tuple(t.rsplit("@", 1)) for t in args.target if "@" in t]
            if not targets or len(targets) != len(args.target):
                raise hferrors.DownloadError(hferrors.EXIT_USAGE, "remove needs --target REPO@COMMIT")
            body = remove(root, [(r, c) for r, c in targets])
        elif args.command == "adopt":
            body = adopt(root, args.repo, args.commit[0] if args.commit else None, dry_run=args.dry_run)
        else:
            if not args.manifest_json or len(args.commit) != 1:
                raise hferrors.DownloadError(hferrors.EXIT_USAGE, "import needs --manifest-json and --commit")
            try:
                seed = safeload.load_json(args.manifest_json, safeload.MANIFEST)
                if not isinstance(seed, dict):
                    raise ValueError("the manifest is not a JSON object")
                manifest = manifest_from_seed(seed, args.commit[0])
            except (ValueError, KeyError, TypeError) as err:
                raise hferrors.DownloadError(hferrors.EXIT_USAGE, f"invalid manifest: {err}") from None
            body = import_manifest(root, manifest, level=args.verify)
    except hferrors.DownloadError as err:
        print(
            json.dumps(
                {"event": "error", "reason": err.reason, "exit_code": err.code, "message": err.message}
            )
        )
        return err.code
    except OSError as err:
        message = clip(f"{err.strerror or err} ({err.filename or root})", MESSAGE_MAX)
        print(json.dumps({"event": "error", "reason": "StorageError", "exit_code": 9, "message": message}))
        return hferrors.EXIT_STORAGE
    print(json.dumps(body), flush=True)
    sys.stdout.flush()
    return hferrors.EXIT_OK


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
