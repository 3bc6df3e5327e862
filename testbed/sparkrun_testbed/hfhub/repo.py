"""Repositories the local Hub serves: commits of generated files, branches, tags, access flags."""

from __future__ import annotations

import fnmatch
import hashlib
import random
from dataclasses import dataclass, field
from typing import Literal

RepoType = Literal["model", "dataset"]
LFS_PATTERNS: tuple[str, ...] = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.msgpack", "*.h5")
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with these bytes (what the Hub sends as ETag of a regular file)."""
    digest = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    digest.update(data)
    return digest.hexdigest()


def generated(size: int, seed: int | str = 0) -> bytes:
    """Deterministic pseudo-random bytes, e.g. stand-in weights."""
    return random.Random(f"sparkrun-hfhub:{seed}").randbytes(size)


@dataclass(frozen=True)
class RepoFile:
    """One file of one commit, with the metadata the Hub reports for it."""

    path: str
    data: bytes
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def pointer(self) -> bytes:
        """The git-lfs pointer committed in place of an LFS file."""
        return _LFS_POINTER.format(oid=self.sha256, size=self.size).encode()

    @property
    def blob_id(self) -> str:
        """Git object id of what git stores: the pointer for LFS files, the bytes otherwise."""
        return git_blob_sha1(self.pointer if self.lfs else self.data)

    @property
    def etag(self) -> str:
        """The blob name in a client's cache: sha256 for LFS files, the git blob id otherwise."""
        return self.sha256 if self.lfs else self.blob_id


@dataclass(frozen=True)
class _FileMeta:
    """Checksums computed once per file (hashing megabytes on every request would skew benchmarks)."""

    file: RepoFile
    sha256: str
    blob_id: str
    pointer_size: int

    @property
    def etag(self) -> str:
        return self.sha256 if self.file.lfs else self.blob_id


@dataclass
class Commit:
    sha: str
    files: dict[str, _FileMeta]
    parent: str | None
    message: str


@dataclass
class Repo:
    """A repository: ``files`` become the first commit on ``main``; more with :meth:`commit`.

    ``gated`` repos serve metadata to anyone but files only to ``Hub`` tokens in ``granted``
    (every configured token when ``granted`` is None). ``private`` repos answer 401 RepoNotFound
    to requests without a configured token.
    """

    repo_id: str
    files: dict[str, bytes] = field(default_factory=dict)
    repo_type: RepoType = "model"
    private: bool = False
    gated: bool = False
    granted: frozenset[str] | None = None
    lfs_patterns: tuple[str, ...] = LFS_PATTERNS
    lfs_threshold: int = 10 * 1024 * 1024
    commits: dict[str, Commit] = field(default_factory=dict, init=False)
    branches: dict[str, str] = field(default_factory=dict, init=False)
    tags: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.commit(self.files, message="initial commit")

    def is_lfs(self, path: str, data: bytes) -> bool:
        name = path.rsplit("/", 1)[-1]
        return len(data) >= self.lfs_threshold or any(fnmatch.fnmatch(name, p) for p in self.lfs_patterns)

    def commit(
        self,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        delete: tuple[str, ...] = (),
        message: str = "update",
    ) -> str:
        """Add a commit on ``branch`` (created from ``main`` when new) and return its sha."""
        parent_sha = self.branches.get(branch, self.branches.get("main"))
        tree = dict(self.commits[parent_sha].files) if parent_sha else {}
        for path in delete:
            tree.pop(path, None)
        for path, data in files.items():
            repo_file = RepoFile(path.strip("/"), data, self.is_lfs(path, data))
            tree[repo_file.path] = _FileMeta(
                repo_file, repo_file.sha256, repo_file.blob_id, len(repo_file.pointer)
            )
        digest = hashlib.sha1(f"{self.repo_id}\0{parent_sha}\0{message}".encode(), usedforsecurity=False)
        for path in sorted(tree):
            digest.update(f"{path}\0{tree[path].blob_id}\0".encode())
        sha = digest.hexdigest()
        self.commits[sha] = Commit(sha, tree, parent_sha, message)
        self.branches[branch] = sha
        return sha

    def tag(self, name: str, revision: str = "main") -> str:
        sha = self.resolve(revision)
        if sha is None:
            raise KeyError(revision)
        self.tags[name] = sha
        return sha

    def branch(self, name: str, revision: str = "main") -> str:
        sha = self.resolve(revision)
        if sha is None:
            raise KeyError(revision)
        self.branches[name] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        """The commit a branch, tag, ``refs/heads/x``/``refs/tags/x`` or full sha names, or None."""
        if revision in self.commits:
            return revision
        for prefix, table in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix):
                return table.get(revision.removeprefix(prefix))
        return self.branches.get(revision) or self.tags.get(revision)

    def tree(self, sha: str) -> dict[str, _FileMeta]:
        return self.commits[sha].files

    @property
    def head(self) -> str:
        return self.branches["main"]
