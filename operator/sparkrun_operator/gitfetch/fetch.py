"""``fetch_tree``: one shallow (depth 1) fetch of one ref into memory, bounded in bytes, files
and time, and the files of that commit a registry reads.

The blocking work (dulwich's client, inflating the pack) runs in a worker thread; the call as a
whole (waiting for a slot included) is under ``limits.timeout_s``: past it the fetch's sockets
are shut down (the thread ends at once) and ``GitFetchError("timeout")`` is raised. At most
:data:`MAX_CONCURRENT_FETCHES` fetches run at once in the process; a slot is given back when
its thread ends. The ref: a branch ``refs/heads/<ref>`` or tag ``refs/tags/<ref>`` (a tag
first, as git resolves a name; an annotated tag is peeled), a full 40-hex commit (fetched by
id: the server must allow it, else ``not_found`` says so), or the remote's HEAD when unset.
Large blobs are asked to be left out by the server (``filter blob:limit``, where it supports
it) and are listed in ``GitTree.skipped`` either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import urllib3.exceptions
from dulwich.client import HTTPUnauthorized
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.protocol import PEELED_TAG_SUFFIX

from sparkrun_operator.gitfetch import pack, transport
from sparkrun_operator.gitfetch.source import (
    COMMIT_SHA,
    MAX_CONCURRENT_FETCHES,
    FetchLimits,
    GitFetchError,
    GitSource,
    GitTree,
    check_source,
    normal_subpath,
    scrub,
    shown,
)
from sparkrun_operator.recipe.registry_tree import MANIFEST_PATH, manifest_subpaths

T = TypeVar("T")
#: The most bytes a refs-only call receives (the ref advertisement of the ref asked for).
REFS_MAX_BYTES: Final = 1024 * 1024
_SLOTS: Final = threading.BoundedSemaphore(MAX_CONCURRENT_FETCHES)
_SLOT_POLL_S: Final = 0.05
_NOT_FOUND: Final = (
    "no such repository",
    "not exported",
    "not found",
    "does not appear to be a git repository",
    "does not exist",
)


async def fetch_tree(source: GitSource, limits: FetchLimits = FetchLimits()) -> GitTree:  # noqa: B008
    """The commit ``source.ref`` names and its files under the registry's paths."""
    return await _bounded(source, limits, _fetch)


async def resolve_commit(source: GitSource, limits: FetchLimits = FetchLimits()) -> str:  # noqa: B008
    """The commit ``source.ref`` names now, from the remote's refs alone (no pack: the
    ``ls-remote`` of a cheap no-change check), under the same transport rules, deadline and
    credentials as :func:`fetch_tree` and at most :data:`REFS_MAX_BYTES` received. A full
    40-hex ref is itself (the remote is still asked, so a repository gone or credentials
    refused fail as a fetch would). An annotated tag the server does not peel resolves to the
    tag object's id, which is never a commit's: a caller comparing it with a commit fetches."""
    bounded = dataclasses.replace(limits, max_pack_bytes=min(limits.max_pack_bytes, REFS_MAX_BYTES))
    return await _bounded(source, bounded, _resolve)


async def _bounded(
    source: GitSource, limits: FetchLimits, work: Callable[[GitSource, FetchLimits, transport.Session], T]
) -> T:
    check_source(source)
    session = transport.Session(limits)
    try:
        async with asyncio.timeout(limits.timeout_s):
            # NB: polled: worker threads of any event loop give slots back (no loop to notify)
            while not _SLOTS.acquire(blocking=False):  # noqa: ASYNC110
                await asyncio.sleep(_SLOT_POLL_S)
            # NB: the thread gives the slot back when it ends (after an abort too)
            return await asyncio.to_thread(_in_thread, work, source, limits, session)
    except TimeoutError:
        session.abort()
        raise GitFetchError(
            "timeout", f"fetching {shown(source.url)} took longer than {limits.timeout_s:g}s"
        ) from None
    except asyncio.CancelledError:
        session.abort()
        raise


def _in_thread(
    work: Callable[[GitSource, FetchLimits, transport.Session], T],
    source: GitSource,
    limits: FetchLimits,
    session: transport.Session,
) -> T:
    try:
        with transport.current(session):
            return work(source, limits, session)
    except GitFetchError:
        raise
    except Exception as error:  # every failure of a fetch is one of its kinds
        raise _classify(error, source, limits) from None
    finally:
        session.close()
        _SLOTS.release()


def _resolve(source: GitSource, _limits: FetchLimits, session: transport.Session) -> str:
    client, path = transport.client_for(source.url, session, source.username, source.password)
    answer = client.get_refs(path, ref_prefix=_prefixes(source.ref))
    refs: dict[bytes, bytes] = {k: v for k, v in answer.refs.items() if v is not None}
    if not refs and source.ref is not None and not COMMIT_SHA.fullmatch(source.ref):
        raise GitFetchError("not_found", f"{shown(source.url)} has no branch or tag {source.ref!r}")
    want = _want(refs, source)
    for name, sha in refs.items():
        # NB: an annotated tag: the commit is its peeled value (``<tag>^{}``), when sent
        if sha == want and name.startswith(b"refs/tags/") and name + PEELED_TAG_SUFFIX in refs:
            want = refs[name + PEELED_TAG_SUFFIX]
            break
    return want.decode("ascii", "replace")


def _fetch(source: GitSource, limits: FetchLimits, session: transport.Session) -> GitTree:
    client, path = transport.client_for(source.url, session, source.username, source.password)
    chosen: list[bytes] = []
    received = bytearray()

    def determine_wants(refs: dict[bytes, bytes], depth: int | None = None) -> list[bytes]:
        chosen.append(_want(refs, source))
        return chosen[-1:]

    def pack_data(data: bytes) -> int:
        received.extend(data)
        if len(received) > limits.max_pack_bytes:
            raise transport.TooMuch(f"the pack is larger than {limits.max_pack_bytes} bytes")
        session.check()
        return len(data)

    client.fetch_pack(
        path,
        determine_wants,
        _NoHaves(),
        pack_data,
        depth=1,
        ref_prefix=_prefixes(source.ref),
        filter_spec=b"blob:limit=%d" % limits.max_file_bytes,
    )
    if not chosen:
        raise GitFetchError("invalid", f"{shown(source.url)} sent no refs")
    if not received and source.ref is not None and COMMIT_SHA.fullmatch(source.ref):
        raise GitFetchError("not_found", _by_id(shown(source.url), source.ref))
    data = bytes(received)
    del received[:]
    pack.scan(data, limits)
    store = pack.load(data)
    commit = pack.commit_of(store, chosen[0])
    subpaths = {normal_subpath(source.subpath)}
    manifest = pack.blob_at(store, commit, MANIFEST_PATH, limits.max_file_bytes)
    if manifest is not None:
        subpaths.update(normal_subpath(s) for s in manifest_subpaths(manifest))
    files, skipped, modes = pack.files_of(store, commit, _selector(subpaths), limits, session.check)
    return GitTree(commit=commit.id.decode(), files=files, skipped=skipped, modes=modes)


class _NoHaves:
    """The graph walker of a fetch into an empty store: nothing to offer."""

    shallow: set[bytes] = set()

    def ack(self, sha: bytes) -> None:
        pass

    def nak(self) -> None:
        pass

    def next(self) -> bytes | None:
        return None

    def __next__(self) -> bytes | None:
        return None


def _prefixes(ref: str | None) -> list[bytes]:
    if ref is None or COMMIT_SHA.fullmatch(ref):
        return [b"HEAD"]
    if ref.startswith("refs/"):
        return [ref.encode()]
    return [b"refs/tags/" + ref.encode(), b"refs/heads/" + ref.encode()]


def _want(refs: dict[bytes, bytes], source: GitSource) -> bytes:
    ref = source.ref
    if ref is None:
        if b"HEAD" not in refs:
            raise GitFetchError("not_found", f"{shown(source.url)} has no HEAD (an empty repository?)")
        return refs[b"HEAD"]
    if COMMIT_SHA.fullmatch(ref):
        return ref.encode()
    names = (
        [ref.encode()]
        if ref.startswith("refs/")
        else [b"refs/tags/" + ref.encode(), b"refs/heads/" + ref.encode()]
    )
    for name in names:
        if name in refs:
            return refs[name]
    raise GitFetchError("not_found", f"{shown(source.url)} has no branch or tag {ref!r}")


def _selector(subpaths: set[str]) -> Any:
    roots = sorted(subpaths)

    def wanted(path: str, is_dir: bool) -> bool:
        if path == MANIFEST_PATH or (is_dir and MANIFEST_PATH.startswith(path + "/")):
            return True
        for root in roots:
            if not root or path == root or path.startswith(root + "/"):
                return True
            if is_dir and root.startswith(path + "/"):
                return True
        return False

    return wanted


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(seen) < 8 and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _classify(error: Exception, source: GitSource, limits: FetchLimits) -> GitFetchError:
    where = shown(source.url)
    chain = _chain(error)
    text = scrub(" ".join(str(e) for e in chain[:2] if str(e)), source)
    for exc in chain:
        if isinstance(exc, urllib3.exceptions.NewConnectionError | ConnectionRefusedError | socket.gaierror):
            return GitFetchError("unreachable", f"{where} is unreachable: {text or type(exc).__name__}")
        if isinstance(exc, transport.TooMuch):
            return GitFetchError("too_large", f"{where}: {scrub(str(exc), source)}")
        if isinstance(
            exc, transport.Aborted | TimeoutError | socket.timeout | urllib3.exceptions.TimeoutError
        ):
            return GitFetchError("timeout", f"fetching {where} took longer than {limits.timeout_s:g}s")
        if isinstance(exc, transport.GitTransportRefused):
            return GitFetchError("invalid", scrub(str(exc), source))
        if isinstance(exc, HTTPUnauthorized):
            return GitFetchError("auth", _auth_message(where, source))
        if isinstance(exc, NotGitRepository):
            return GitFetchError("not_found", f"{where}: no such repository")
    lowered = text.lower()
    if "unexpected http resp 403" in lowered or "unexpected http resp 401" in lowered:
        return GitFetchError("auth", _auth_message(where, source))
    if "not our ref" in lowered:
        return GitFetchError("not_found", _by_id(where, str(source.ref)))
    if any(marker in lowered for marker in _NOT_FOUND):
        return GitFetchError("not_found", f"{where}: no such repository ({text})")
    for exc in chain:
        if isinstance(
            exc, HangupException | ConnectionError | socket.gaierror | urllib3.exceptions.HTTPError
        ):
            return GitFetchError("unreachable", f"{where} is unreachable: {text or type(exc).__name__}")
        if isinstance(exc, OSError):
            return GitFetchError("unreachable", f"{where} is unreachable: {text or type(exc).__name__}")
    if isinstance(error, GitProtocolError):
        return GitFetchError("unreachable", f"{where}: {text}")
    return GitFetchError("invalid", f"{where}: {text or type(error).__name__}")


def _by_id(where: str, sha: str) -> str:
    return (
        f"{where}: commit {sha} is not there, or the server does not allow fetching a commit by id "
        "(name a branch or tag instead)"
    )


def _auth_message(where: str, source: GitSource) -> str:
    if source.username is None:
        return f"{where} needs credentials (set the registry's credentialsSecret)"
    return f"{where} refused the credentials of the registry's credentialsSecret"
