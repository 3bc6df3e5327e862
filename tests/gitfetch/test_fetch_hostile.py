"""``gitfetch.fetch_tree`` against hostile git servers (review R1 of issue 32): a real git server on
loopback serving objects git itself would refuse to make (trees written with ``git hash-object
--literally``), and a small protocol-v2 server that answers a fetch with ``packfile-uris`` naming
another host. Nothing here is mocked: the fetches go over real sockets to real servers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkrun_operator.gitfetch import FetchLimits, GitFetchError, GitSource, fetch_tree
from sparkrun_operator.gitfetch import pack as gitpack
from sparkrun_operator.gitfetch.source import MIB
from sparkrun_operator.recipe.registry_tree import read_registry
from tests.gitserver import GIT, GitServer, RepoHandle, _git_env

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def _git(repo: RepoHandle, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        [GIT, *args],
        cwd=repo.bare,
        env={
            **_git_env(repo.server.root),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t.test",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t.test",
        },
        input=stdin,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.decode().strip()


def _blob(repo: RepoHandle, data: bytes) -> str:
    return _git(repo, "hash-object", "-w", "--stdin", stdin=data)


def _tree(repo: RepoHandle, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree object written as given (``(mode, name, sha)``; names git would refuse included)."""
    raw = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries)
    return _git(repo, "hash-object", "--literally", "-t", "tree", "-w", "--stdin", stdin=raw)


def _publish(repo: RepoHandle, tree: str) -> str:
    """Commit ``tree`` and point the served repository's main (its HEAD) at it."""
    commit = _git(repo, "commit-tree", tree, "-m", "hostile")
    _git(repo, "update-ref", "refs/heads/main", commit)
    return commit


async def test_a_tree_that_repeats_itself_is_too_large_and_frees_its_slot(git_server: GitServer) -> None:
    """64 directories, each the same tree of 64 directories, four levels deep: a pack of five small
    trees that walks as 16 million directories. The walk is bounded in entries (and ends with the
    fetch: no worker thread left spinning, holding one of the process's fetch slots)."""
    repo = git_server.create_repo("tree-bomb")
    level = EMPTY_TREE
    for _ in range(4):
        level = _tree(repo, [("40000", f"d{i:02d}".encode(), level) for i in range(64)])
    _publish(repo, _tree(repo, [("40000", b"recipes", level)]))
    good, _ = _good_registry(git_server, "after-bomb")
    started = time.monotonic()
    for _ in range(3):  # more than the slots: a slot held by a spinning thread would starve the rest
        failed = await _fails(GitSource(repo.url_http, None, "recipes"), FetchLimits(timeout_s=20))
        assert failed.kind == "too_large", failed.message
        assert "entries" in failed.message
    assert time.monotonic() - started < 20
    tree = await fetch_tree(GitSource(good.url_http, None, "recipes"), FetchLimits(timeout_s=10))
    assert "recipes/a.yaml" in tree.files


async def test_tree_entries_git_would_refuse_are_skipped_not_returned(git_server: GitServer) -> None:
    """Names with a slash, ``.``/``..``, ``.git``, a control character or bytes that are not UTF-8
    never become file paths (a mod's file named ``../../x`` would be a path out of its directory)."""
    repo = git_server.create_repo("hostile-names")
    recipe = _blob(repo, b"model: org/a\nruntime: vllm\n")
    run = _blob(repo, b"#!/bin/sh\necho hi\n")
    inner = _tree(repo, [("100644", b"x.yaml", recipe)])
    hostile: list[tuple[str, bytes, str]] = [
        ("100644", b"a.yaml", recipe),
        ("100644", b"../../escape.yaml", recipe),
        ("100644", b"sub/slash.yaml", recipe),
        ("40000", b"..", inner),
        ("40000", b".", inner),
        ("40000", b".GIT", inner),
        ("100644", b"new\nline.yaml", recipe),
        ("100644", b"\xff\xfe.yaml", recipe),
    ]
    mod = _tree(repo, [("100755", b"run.sh", run), ("100644", b"../../../etc/evil", run)])
    mods = _tree(repo, [("40000", b"fix", mod)])
    manifest = _blob(repo, b"registries:\n- name: r\n  recipes: recipes\n  mods: mods\n")
    sparkrun = _tree(repo, [("100644", b"registry.yaml", manifest)])
    root = _tree(
        repo,
        [
            ("40000", b".sparkrun", sparkrun),
            ("40000", b"mods", mods),
            ("40000", b"recipes", _tree(repo, hostile)),
        ],
    )
    _publish(repo, root)
    tree = await fetch_tree(GitSource(repo.url_git, None, "recipes"))
    assert set(tree.files) == {"recipes/a.yaml", ".sparkrun/registry.yaml", "mods/fix/run.sh"}
    assert len(tree.skipped) == 8
    assert all("unsafe name" in why for why in tree.skipped.values())
    assert all("\n" not in path and "\ufffd" not in path for path in tree.skipped)
    contents = read_registry(tree.files, "recipes", tree.modes)
    assert [m.files for m in contents.mods] == [{"run.sh": b"#!/bin/sh\necho hi\n"}]


async def test_paths_past_the_length_limit_are_skipped(git_server: GitServer) -> None:
    repo = git_server.create_repo("long-paths")
    recipe = _blob(repo, b"model: org/a\nruntime: vllm\n")
    level = _tree(repo, [("100644", b"deep.yaml", recipe)])
    for _ in range(8):
        level = _tree(repo, [("40000", b"d" * 200, level)])
    _publish(
        repo,
        _tree(
            repo,
            [("40000", b"recipes", _tree(repo, [("40000", b"x", level), ("100644", b"a.yaml", recipe)]))],
        ),
    )
    tree = await fetch_tree(GitSource(repo.url_http, None, "recipes"), FetchLimits(max_path_chars=1024))
    assert set(tree.files) == {"recipes/a.yaml"}
    assert len(tree.skipped) == 1
    ((path, why),) = tree.skipped.items()
    assert len(path) <= 1024
    assert "longer than 1024" in why


def test_a_pack_past_the_spool_size_loads_without_a_temporary_directory(
    git_server: GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's root filesystem is read-only with no /tmp: dulwich's MemoryObjectStore spools
    a pack over 16 MiB to a temporary file, which cannot be made there. A pack within the 32 MiB
    limit must load in memory."""
    repo = git_server.create_repo("spool")
    entries = [("100644", f"b{i:02d}.bin".encode(), _blob(repo, _noise(i, 900 * 1024))) for i in range(20)]
    _publish(repo, _tree(repo, [("40000", b"recipes", _tree(repo, entries))]))
    data = subprocess.run(
        [GIT, "pack-objects", "--stdout", "--revs"],
        cwd=repo.bare,
        input=b"refs/heads/main\n",
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout
    assert 16 * MIB < len(data) <= 32 * MIB
    missing = Path(tempfile.gettempdir()) / "r1-no-such-directory" / "tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    gitpack.scan(data, FetchLimits())
    store = gitpack.load(data)
    assert len(list(store)) == 23  # the commit, two trees, twenty blobs


def _noise(seed: int, size: int) -> bytes:
    """Incompressible bytes (a hash chain), deterministic."""
    import hashlib

    out = bytearray()
    block = seed.to_bytes(4, "big")
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def _good_registry(server: GitServer, name: str) -> tuple[RepoHandle, str]:
    repo = server.create_repo(name)
    repo.write("recipes/a.yaml", "model: org/a\nruntime: vllm\n")
    return repo, repo.commit("good")


async def _fails(source: GitSource, limits: FetchLimits) -> GitFetchError:
    with pytest.raises(GitFetchError) as caught:
        await fetch_tree(source, limits)
    return caught.value


# -- a protocol-v2 server that points the fetch elsewhere ------------------------------------------


def _pkt(data: bytes) -> bytes:
    return f"{len(data) + 4:04x}".encode() + data


class _Listener:
    """A loopback TCP listener that counts the connections it is offered."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@contextlib.contextmanager
def _v2_server(packfile_uri: str) -> Iterator[str]:
    """A smart-HTTP protocol-v2 server whose fetch answer is a ``packfile-uris`` section."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, kind: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", f"application/x-git-upload-pack-{kind}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            caps = _pkt(b"version 2\n") + _pkt(b"ls-refs\n") + _pkt(b"fetch=shallow filter\n")
            self._send("advertisement", caps + b"0000")

        def do_POST(self) -> None:
            body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 65536))
            if b"command=ls-refs" in body:
                self._send("result", _pkt(b"1" * 40 + b" HEAD\n") + b"0000")
                return
            uri = _pkt(f"{packfile_uri} sha1 {'0' * 40}\n".encode())
            self._send("result", _pkt(b"packfile-uris\n") + uri + _pkt(b"packfile\n") + b"0000")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/r.git"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def test_a_packfile_uri_to_another_host_is_never_requested() -> None:
    """Protocol v2 lets a server answer a fetch with ``packfile-uris``: URLs anywhere, which dulwich
    downloads from. A registry's server must not make the operator connect to another host."""
    other = _Listener()
    try:
        with _v2_server(f"https://127.0.0.1:{other.port}/p.pack") as url:
            failed = await _fails(GitSource(url), FetchLimits(timeout_s=10))
        await asyncio.sleep(0.3)
        assert failed.kind == "invalid", failed.message
        assert "another origin" in failed.message
        assert other.connections == 0
    finally:
        other.close()


#: The operator container's memory limit (helm values operator.resources.limits.memory), the
#: fetches that may run at once, and what the rest of the operator is given.
OPERATOR_LIMIT = 512 * MIB
OPERATOR_BASELINE = 192 * MIB


def test_the_worst_pack_within_the_default_limits_fits_the_operator() -> None:
    """A pack at the default limits (its objects as many, and inflating to as much, as allowed)
    loads within the operator's memory, with MAX_CONCURRENT_FETCHES of them at once."""
    import tracemalloc

    from dulwich.object_store import MemoryObjectStore
    from dulwich.objects import Blob
    from dulwich.pack import write_pack_objects

    from sparkrun_operator.gitfetch import MAX_CONCURRENT_FETCHES

    limits = FetchLimits()
    count = limits.max_objects
    size = limits.max_inflated_bytes // count - 16
    buf = bytearray()
    blobs = [Blob.from_string(b"%015d" % i + b"\0" * size) for i in range(count)]
    write_pack_objects(
        buf.extend, [(b, None) for b in blobs], object_format=MemoryObjectStore().object_format
    )
    data = bytes(buf)
    del buf, blobs
    assert len(data) <= limits.max_pack_bytes
    gitpack.scan(data, limits)
    tracemalloc.start()
    try:
        store = gitpack.load(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(1 for _ in store) == count
    per_fetch = peak + len(data)  # NB: the received pack is held while it loads
    assert per_fetch * MAX_CONCURRENT_FETCHES <= OPERATOR_LIMIT - OPERATOR_BASELINE, per_fetch // MIB


class _Trickler:
    """A loopback server that answers every connection one byte at a time, each well within the
    read timeout, forever (a ref advertisement that never ends)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conns: list[socket.socket] = []
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = self.sock.accept()
                conns.append(conn)
            for conn in list(conns):
                try:
                    conn.sendall(b"f")  # NB: "ffff" then a 65531-byte pkt-line, a byte at a time
                except OSError:
                    conns.remove(conn)
                    conn.close()
        for conn in conns:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


async def test_a_server_that_trickles_bytes_is_cut_at_the_deadline() -> None:
    trickler = _Trickler()
    try:
        for url in (f"git://127.0.0.1:{trickler.port}/r.git", f"http://127.0.0.1:{trickler.port}/r.git"):
            started = time.monotonic()
            failed = await _fails(GitSource(url), FetchLimits(timeout_s=2))
            assert failed.kind in ("timeout", "unreachable"), failed.message
            assert time.monotonic() - started < 3.5
    finally:
        trickler.close()
