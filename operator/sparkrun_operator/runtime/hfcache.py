"""The Hugging Face hub cache layout on a cache volume, streaming verification, and manifests.

Layout under the cache root (the engine's ``HF_HOME``)::

    <root>/hub/models--org--name/{blobs/<etag>, snapshots/<commit>/<path>, refs/<rev>}
    <root>/sparkrun/manifests/models--org--name/<commit>.json   what the revision holds
    <root>/sparkrun/verified/models--org--name.json             blobs already verified

No network and no ``huggingface_hub`` here: ``inspect`` runs from this module alone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

VerifyLevel = Literal["none", "size", "sha256"]
Selection = Literal["auto", "all", "safetensors"]
#: Weight files; ``safetensors`` selection drops the other formats' weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")
_OTHER_WEIGHTS = WEIGHT_SUFFIXES[1:]
LEVELS: dict[str, int] = {"none": 0, "size": 1, "sha256": 2}
_BUF = 8 << 20
MANIFEST_FORMAT = 1


def select_files(paths: list[str], selection: Selection) -> list[str]:
    """The files a selection keeps: ``all``; ``safetensors`` (no weights of other formats);
    ``auto``: ``safetensors`` when the revision has safetensors weights, else ``all``."""
    if selection == "all" or (selection == "auto" and not any(p.endswith(".safetensors") for p in paths)):
        return list(paths)
    return [p for p in paths if not p.endswith(_OTHER_WEIGHTS)]


def repo_folder_name(repo_id: str, repo_type: str = "model") -> str:
    """``models--org--name`` (the library's ``repo_folder_name``)."""
    return "--".join([f"{repo_type}s", *repo_id.split("/")])


@dataclass(frozen=True)
class FileEntry:
    """One file of a revision as the Hub describes it."""

    path: str
    size: int
    blob_id: str
    sha256: str | None = None

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        """The blob's name in the cache: sha256 for LFS files, the git blob id otherwise."""
        return self.sha256 if self.sha256 is not None else self.blob_id


@dataclass
class Manifest:
    """What one revision holds; written before the download (complete=False) and after it."""

    repo: str
    repo_type: str
    revision: str
    commit: str
    files: list[FileEntry]
    endpoint: str | None = None
    allow_patterns: list[str] = field(default_factory=list)
    ignore_patterns: list[str] = field(default_factory=list)
    complete: bool = False
    verify: str = "size"
    created_at: str = ""
    verified_at: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["files"] = [asdict(f) | {"lfs": f.lfs, "etag": f.etag} for f in self.files]
        return {"format": MANIFEST_FORMAT, **body, "total_bytes": self.total_bytes}

    def to_daemon(self, selection: str = "all", provenance: str = "origin") -> dict[str, Any]:
        """The daemon's manifest shape (``model_cache.resolve``/``import``): the commit as
        ``revision``, per file ``checksum_algorithm`` ``sha256`` (LFS) or ``git-sha1``."""
        weights = [f.path for f in self.files if f.path.endswith(WEIGHT_SUFFIXES)]
        return {
            "repo": self.repo,
            "revision": self.commit,
            "endpoint": self.endpoint or "",
            "selection": selection,
            "files": [
                {
                    "path": f.path,
                    "size": f.size,
                    "checksum_algorithm": "sha256" if f.lfs else "git-sha1",
                    "checksum": f.sha256 if f.lfs else f.blob_id,
                }
                for f in self.files
            ],
            "weight_path": (os.path.dirname(weights[0]) or ".") if weights else None,
            "projector_path": None,
            "weight_files": weights,
            "provenance": provenance,
            "schema_version": 1,
            "selection_version": 1,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Manifest:
        files = [FileEntry(f["path"], int(f["size"]), f["blob_id"], f.get("sha256")) for f in body["files"]]
        known = {k: body[k] for k in cls.__dataclass_fields__ if k in body and k != "files"}
        return cls(files=files, **known)


@dataclass
class Result:
    """What a download or repair did."""

    repo: str
    revision: str
    commit: str
    files: int
    total_bytes: int
    fetched_bytes: int
    verify: str
    manifest: str
    snapshot: str
    seconds: float
    how: dict[str, int] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"event": "result", **asdict(self)}


@dataclass
class InspectReport:
    """``inspect``: the state of every file of a revision against its manifest."""

    repo: str
    commit: str
    verify: str
    files: int
    total_bytes: int
    missing: list[str]
    invalid: list[str]
    unreadable: list[str]
    manifest: str

    @property
    def clean(self) -> bool:
        return not (self.missing or self.invalid or self.unreadable)

    def to_json(self) -> dict[str, Any]:
        return {"event": "inspect", "clean": self.clean, **asdict(self)}


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class CacheLayout:
    """Paths of one repository in the cache under ``root``."""

    def __init__(self, root: Path, repo_id: str, repo_type: str = "model") -> None:
        self.root = Path(root)
        self.repo_id, self.repo_type = repo_id, repo_type
        self.folder = repo_folder_name(repo_id, repo_type)
        self.hub = self.root / "hub"
        self.repo_dir = self.hub / self.folder
        self.blobs = self.repo_dir / "blobs"
        self.locks = self.hub / ".locks" / self.folder

    def blob(self, etag: str) -> Path:
        return self.blobs / etag

    def pointer(self, commit: str, path: str) -> Path:
        return self.repo_dir / "snapshots" / commit / path

    def snapshot(self, commit: str) -> Path:
        return self.repo_dir / "snapshots" / commit

    def lock(self, etag: str) -> Path:
        return self.locks / f"{etag}.lock"

    def incomplete(self, etag: str) -> list[Path]:
        """Partial downloads of this blob that a killed process left (``<etag>[.<id>].incomplete``)."""
        if not self.blobs.is_dir():
            return []
        return sorted(self.blobs.glob(f"{etag}*.incomplete"))

    def manifest_path(self, commit: str) -> Path:
        return self.root / "sparkrun" / "manifests" / self.folder / f"{commit}.json"

    def verified_path(self) -> Path:
        return self.root / "sparkrun" / "verified" / f"{self.folder}.json"

    def write_ref(self, revision: str, commit: str) -> None:
        if revision == commit:
            return
        write_atomic(self.repo_dir / "refs" / revision, commit.encode())

    def read_ref(self, revision: str) -> str | None:
        try:
            return (self.repo_dir / "refs" / revision).read_text().strip()
        except OSError:
            return None

    def link(self, commit: str, entry: FileEntry) -> None:
        """Point ``snapshots/<commit>/<path>`` at the blob with a relative symlink (as the library does)."""
        pointer = self.pointer(commit, entry.path)
        pointer.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.blob(entry.etag), pointer.parent)
        with contextlib.suppress(FileNotFoundError):
            if os.readlink(pointer) == target:
                return
        tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.link")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(target, tmp)
        os.replace(tmp, pointer)

    def load_manifest(self, commit: str) -> Manifest | None:
        try:
            return Manifest.from_json(json.loads(self.manifest_path(commit).read_bytes()))
        except FileNotFoundError:
            return None

    def save_manifest(self, manifest: Manifest) -> Path:
        path = self.manifest_path(manifest.commit)
        write_atomic(path, json.dumps(manifest.to_json(), indent=1).encode() + b"\n")
        return path

    def manifests(self) -> list[Manifest]:
        folder = self.root / "sparkrun" / "manifests" / self.folder
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            found.append(Manifest.from_json(json.loads(path.read_bytes())))
        return found


def git_blob_sha1_hasher(size: int) -> Any:
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(b"blob %d\0" % size)
    return digest


def hash_file(path: Path, entry: FileEntry, buf: bytearray | None = None) -> bool:
    """Stream the file once through sha256 (LFS) or the git blob sha1 (regular files)."""
    digest = hashlib.sha256() if entry.lfs else git_blob_sha1_hasher(entry.size)
    expected = entry.sha256 if entry.lfs else entry.blob_id
    buffer = buf if buf is not None else bytearray(_BUF)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return bool(digest.hexdigest() == expected)


FileState = Literal["ok", "missing", "invalid", "unreadable"]


def check_file(layout: CacheLayout, commit: str, entry: FileEntry, level: VerifyLevel) -> FileState:
    """State of one file of a revision: pointer and blob present, size and (sha256 level) hash right."""
    pointer = layout.pointer(commit, entry.path)
    blob = layout.blob(entry.etag)
    try:
        if not os.path.lexists(pointer) or not blob.exists():
            return "missing"
        if pointer.resolve() != blob.resolve():
            return "invalid"
        if level == "none":
            return "ok"
        if blob.stat().st_size != entry.size:
            return "invalid"
        if level == "sha256" and not hash_file(blob, entry):
            return "invalid"
    except PermissionError:
        return "unreadable"
    except OSError:
        return "unreadable"
    return "ok"


class VerifiedBlobs:
    """Blobs already verified (by size/mtime/inode), so a rerun does not hash them again."""

    def __init__(self, layout: CacheLayout) -> None:
        self._path = layout.verified_path()
        self._lock = threading.Lock()
        try:
            self._data: dict[str, dict[str, Any]] = json.loads(self._path.read_bytes())
        except (OSError, ValueError):
            self._data = {}

    @staticmethod
    def _stamp(blob: Path) -> dict[str, int]:
        st = blob.stat()
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}

    def is_verified(self, blob: Path, level: VerifyLevel) -> bool:
        with self._lock:
            record = self._data.get(blob.name)
        if record is None or LEVELS[record.get("level", "none")] < LEVELS[level]:
            return False
        try:
            return all(record.get(k) == v for k, v in self._stamp(blob).items())
        except OSError:
            return False

    def record(self, blob: Path, level: VerifyLevel) -> None:
        stamp = self._stamp(blob)
        with self._lock:
            self._data[blob.name] = {"level": level, **stamp, "at": now()}
            data = json.dumps(self._data, indent=0).encode()
            write_atomic(self._path, data)

    def forget(self, etag: str) -> None:
        with self._lock:
            if self._data.pop(etag, None) is not None:
                write_atomic(self._path, json.dumps(self._data, indent=0).encode())
