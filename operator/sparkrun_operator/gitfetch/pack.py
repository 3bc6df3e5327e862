"""A fetched pack, bounded before it is inflated, and the files of one commit in it.

:func:`scan` walks the pack's objects with a streaming zlib (no object is held whole) and adds
up the size each object inflates to (a delta: the size of its result, from the delta's own
header): a pack of a few MiB that inflates to gigabytes is refused before dulwich inflates
anything. :func:`load` inflates it in memory (dulwich's ``MemoryObjectStore.add_pack`` spools a
pack over 16 MiB to a temporary file, and the operator's root filesystem is read-only).
:func:`files_of` reads the tree of a commit from dulwich's in-memory store, bounded in entries
walked and path length, and never returns a name git itself refuses (``..``, a slash, ``.git``,
a control character, bytes that are not UTF-8): such entries are listed as skipped.
"""

from __future__ import annotations

import io
import stat
import struct
import zlib
from collections.abc import Callable
from typing import Final

from dulwich.object_store import MemoryObjectStore
from dulwich.objects import Blob, Commit, ObjectID, Tag, Tree
from dulwich.pack import PackData, PackInflater

from sparkrun_operator.gitfetch.source import FetchLimits, GitFetchError

_OFS_DELTA: Final = 6
_REF_DELTA: Final = 7
_CHUNK: Final = 64 * 1024
_TRAILER: Final = 20
_GITLINK: Final = 0o160000
#: Entries walked between two looks at the fetch's deadline.
_CHECK_EVERY: Final = 1024


def _varint_header(pack: bytes, pos: int) -> tuple[int, int, int]:
    """An object's type and size header at ``pos``: ``(type, size, next position)``."""
    byte = pack[pos]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    while byte & 0x80:
        pos += 1
        if shift > 63:
            raise GitFetchError("invalid", "the pack has an object size over 64 bits")
        byte = pack[pos]
        size |= (byte & 0x7F) << shift
        shift += 7
    return kind, size, pos + 1


def _delta_sizes(head: bytes) -> int:
    """The result size a delta declares (its second varint)."""
    pos, values = 0, []
    for _ in range(2):
        value, shift = 0, 0
        while True:
            if pos >= len(head) or shift > 63:
                raise GitFetchError("invalid", "the pack has a malformed delta")
            byte = head[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append(value)
    return values[1]


def _inflate(pack: bytes, pos: int, size: int, want_head: bool) -> tuple[bytes, int]:
    """Inflate the zlib stream at ``pos`` (at most ``size`` bytes out, as declared), keeping the
    first bytes when ``want_head``; returns ``(head, position after the stream)``."""
    stream = zlib.decompressobj()
    out, head, cursor = 0, b"", pos
    while not stream.eof:
        chunk = pack[cursor : cursor + _CHUNK]
        if not chunk:
            raise GitFetchError("invalid", "the pack is truncated")
        cursor += len(chunk)
        data = chunk
        while data and not stream.eof:
            piece = stream.decompress(data, _CHUNK)
            out += len(piece)
            if out > size:
                raise GitFetchError("invalid", "a pack object inflates past the size it declares")
            if want_head and len(head) < 32:
                head += piece[: 32 - len(head)]
            data = stream.unconsumed_tail
    if out != size:
        raise GitFetchError("invalid", "a pack object inflates to another size than it declares")
    return head, cursor - len(stream.unused_data)


def scan(pack: bytes, limits: FetchLimits) -> None:
    """Refuse a pack whose objects would inflate past ``limits.max_inflated_bytes`` (or that
    holds more than ``limits.max_objects`` objects)."""
    if len(pack) < 12 + _TRAILER or pack[:4] != b"PACK":
        raise GitFetchError("invalid", "the server sent no pack")
    version, count = struct.unpack(">II", pack[4:12])
    if version not in (2, 3):
        raise GitFetchError("invalid", f"the pack has version {version}")
    if count > limits.max_objects:
        raise GitFetchError("too_large", f"the pack holds {count} objects (at most {limits.max_objects})")
    pos, total = 12, 0
    try:
        for _ in range(count):
            kind, size, pos = _varint_header(pack, pos)
            if kind == _OFS_DELTA:
                while pack[pos] & 0x80:
                    pos += 1
                pos += 1
            elif kind == _REF_DELTA:
                pos += _TRAILER
            delta = kind in (_OFS_DELTA, _REF_DELTA)
            total += size
            if total > limits.max_inflated_bytes:
                break
            head, pos = _inflate(pack, pos, size, want_head=delta)
            if delta:
                total += _delta_sizes(head)
            if total > limits.max_inflated_bytes:
                break
    except IndexError:
        raise GitFetchError("invalid", "the pack is truncated") from None
    if total > limits.max_inflated_bytes:
        raise GitFetchError("too_large", f"the pack inflates past {limits.max_inflated_bytes} bytes")


def load(pack: bytes) -> MemoryObjectStore:
    """The pack's objects in memory (after :func:`scan`)."""
    store = MemoryObjectStore()
    if not pack:
        return store
    # NB: not store.add_pack(): it spools past 16 MiB to a temporary file (no writable /tmp here)
    data = PackData.from_file(io.BytesIO(pack), store.object_format, len(pack))
    try:
        data.check()
        for obj in PackInflater.for_pack_data(data, store.get_raw):
            store.add_object(obj)
    finally:
        data.close()
    return store


def commit_of(store: MemoryObjectStore, sha: bytes) -> Commit:
    """The commit ``sha`` names (an annotated tag is peeled)."""
    for _ in range(8):
        try:
            obj = store[ObjectID(sha)]
        except KeyError:
            raise GitFetchError("invalid", f"the server did not send {sha.decode()}") from None
        if isinstance(obj, Commit):
            return obj
        if not isinstance(obj, Tag):
            raise GitFetchError("invalid", f"{sha.decode()} is not a commit")
        sha = obj.object[1]
    raise GitFetchError("invalid", "a chain of tags too long")


def blob_at(store: MemoryObjectStore, commit: Commit, path: str, limit: int) -> bytes | None:
    """The blob at ``path`` in ``commit`` (``None``: absent, not a file, or over ``limit``)."""
    tree_sha = commit.tree
    parts = path.split("/")
    for index, part in enumerate(parts):
        tree = store[tree_sha]
        if not isinstance(tree, Tree) or part.encode() not in tree:
            return None
        mode, sha = tree[part.encode()]
        if index < len(parts) - 1:
            if not stat.S_ISDIR(mode):
                return None
            tree_sha = sha
        elif stat.S_ISREG(mode) and ObjectID(sha) in store:
            blob = store[sha]
            return blob.data if isinstance(blob, Blob) and len(blob.data) <= limit else None
    return None


def _unsafe(name: bytes) -> bool:
    """A tree entry name git's fsck refuses, or one no path may hold here."""
    return (
        name in (b"", b".", b"..")
        or b"/" in name
        or b"\\" in name
        or name.lower() == b".git"
        or any(byte < 0x20 or byte == 0x7F for byte in name)
    )


def _shown(prefix: str, name: bytes, limit: int) -> str:
    """A skipped entry's path as ``skipped`` lists it: escaped, at most ``limit`` characters."""
    return (prefix + name.decode("ascii", "backslashreplace").encode("unicode_escape").decode())[:limit]


def files_of(
    store: MemoryObjectStore,
    commit: Commit,
    wanted: Callable[[str, bool], bool],
    limits: FetchLimits,
    check: Callable[[], None] | None = None,
) -> tuple[dict[str, bytes], dict[str, str], dict[str, int]]:
    """``(files, skipped, modes)`` of the paths ``wanted(path, is_dir)`` accepts in ``commit``;
    ``check`` is called every few entries (it raises when the fetch's deadline has passed)."""
    files: dict[str, bytes] = {}
    skipped: dict[str, str] = {}
    modes: dict[str, int] = {}
    stack: list[tuple[str, bytes]] = [("", commit.tree)]
    walked = 0
    while stack:
        prefix, tree_sha = stack.pop()
        tree = store[ObjectID(tree_sha)] if ObjectID(tree_sha) in store else None  # noqa: SIM401
        if not isinstance(tree, Tree):
            raise GitFetchError("invalid", f"the server did not send the tree of {prefix or 'the root'}")
        for entry in tree.iteritems():
            walked += 1
            if walked > limits.max_entries:
                raise GitFetchError(
                    "too_large", f"more than {limits.max_entries} tree entries under the registry's paths"
                )
            if check is not None and walked % _CHECK_EVERY == 0:
                check()
            try:
                name = entry.path.decode("utf-8")
            except UnicodeDecodeError:
                name = ""
            if not name or _unsafe(entry.path):
                skipped[_shown(prefix, entry.path, limits.max_path_chars)] = "unsafe name (not fetched)"
                continue
            path = f"{prefix}{name}"
            if len(path) > limits.max_path_chars:
                if wanted(path, stat.S_ISDIR(entry.mode)):
                    skipped[path[: limits.max_path_chars]] = (
                        f"path longer than {limits.max_path_chars} characters (not fetched)"
                    )
                continue
            if stat.S_ISDIR(entry.mode):
                if wanted(path, True):
                    stack.append((f"{path}/", entry.sha))
                continue
            if not wanted(path, False):
                continue
            reason = _skip_reason(store, entry.mode, entry.sha, limits)
            if reason:
                skipped[path] = reason
                continue
            if len(files) >= limits.max_files:
                raise GitFetchError(
                    "too_large", f"more than {limits.max_files} files under the registry's paths"
                )
            blob = store[entry.sha]
            assert isinstance(blob, Blob)
            files[path] = blob.data
            modes[path] = entry.mode
    return files, skipped, modes


def _skip_reason(store: MemoryObjectStore, mode: int, sha: bytes, limits: FetchLimits) -> str:
    if mode == _GITLINK:
        return "submodule (not fetched)"
    if stat.S_ISLNK(mode):
        return "symbolic link (not followed)"
    if not stat.S_ISREG(mode):
        return f"not a regular file (mode {mode:o})"
    if ObjectID(sha) not in store:
        return f"larger than {limits.max_file_bytes} bytes (left out by the server's filter)"
    _kind, data = store.get_raw(ObjectID(sha))
    if len(data) > limits.max_file_bytes:
        return f"larger than {limits.max_file_bytes} bytes"
    return ""
