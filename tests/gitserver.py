"""A real git server on loopback: bare repositories in a temporary directory, served over smart
HTTP (``git http-backend`` run as CGI by a small threaded HTTP server) and over ``git://``
(``git daemon``), for tests of what fetches from a git registry.

``GitServer(auth=None)`` is a context manager; the ``git_server`` fixture (module scope, no
auth) is one, registered from tests/conftest.py. ``GitServer(auth=("user", "secret"))`` refuses
HTTP requests without that Basic authorization (401); ``git://`` has no authentication.

``server.create_repo(name)`` returns a :class:`RepoHandle`: ``write(path, data)``,
``remove(path)``, ``symlink(path, target)``, ``gitlink(path, sha)``, ``commit(msg) -> sha``
(committed on ``main`` and pushed to the served repository), ``tag(name)``,
``force_push_to(ref, sha)`` (rewrite history), ``delete_repo()`` (the repository disappears),
``url_http``, ``url_git``. Commits are deterministic (fixed author, a clock that ticks one
second per commit). ``server.redirect(prefix, base)`` answers every HTTP request under
``/<prefix>`` with a 302 to ``base`` + the rest of the path; ``server.seen`` records each
HTTP request's method, path and ``Authorization`` header. :class:`StallServer` accepts
connections and never answers (for timeouts).
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

import pytest

from sparkrun_testbed.ports import LOOPBACK, free_ports

GIT = shutil.which("git") or "/usr/bin/git"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_SEEN = 4096
CGI_TIMEOUT_S = 60.0
_EPOCH = 1_700_000_000


def _git_env(home: Path) -> dict[str, str]:
    """An environment that ignores the user's and the system's git configuration."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }


@dataclass(frozen=True)
class Seen:
    """One HTTP request: method, path (with query) and ``Authorization`` header ("" if none)."""

    method: str
    path: str
    authorization: str


class RepoHandle:
    """One served repository and the working tree its commits are made in."""

    def __init__(self, server: GitServer, name: str) -> None:
        self.server = server
        self.name = name
        self.bare = server.repos / f"{name}.git"
        self.work = server.root / "work" / name
        self._ticks = 0
        self._git("init", "-q", "--bare", "-b", "main", str(self.bare), cwd=server.root)
        self._git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=self.bare)
        self._git("config", "http.receivepack", "false", cwd=self.bare)
        self._git("config", "uploadpack.allowFilter", "true", cwd=self.bare)
        self.work.mkdir(parents=True)
        self._git("init", "-q", "-b", "main", cwd=self.work)
        self._git("remote", "add", "origin", str(self.bare), cwd=self.work)

    @property
    def url_http(self) -> str:
        return f"http://{LOOPBACK}:{self.server.http_port}/{self.name}.git"

    @property
    def url_git(self) -> str:
        return f"git://{LOOPBACK}:{self.server.git_port}/{self.name}.git"

    def _git(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            [GIT, *args],
            cwd=cwd,
            env={**_git_env(self.server.root), **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
        return result.stdout.strip()

    def write(self, path: str, data: str | bytes, *, executable: bool = False) -> None:
        """Write ``path`` (POSIX, relative to the repository root) in the working tree."""
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        target.chmod(0o755 if executable else 0o644)

    def remove(self, path: str) -> None:
        """Remove a file or a directory from the working tree (and so from the next commit)."""
        self._git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", path, cwd=self.work)
        target = self.work / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()

    def symlink(self, path: str, target: str) -> None:
        link = self.work / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)

    def gitlink(self, path: str, sha: str) -> None:
        """A submodule entry (mode 160000) at ``path`` pointing at commit ``sha``."""
        (self.work / path).mkdir(parents=True, exist_ok=True)
        self._git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}", cwd=self.work)

    def commit(self, message: str = "change", *, branch: str = "main") -> str:
        """Commit everything in the working tree onto ``branch`` and push it; returns the sha."""
        self._ticks += 1
        stamp = f"{_EPOCH + self._ticks} +0000"
        env = {
            "GIT_AUTHOR_NAME": "Test Author",
            "GIT_AUTHOR_EMAIL": "author@example.test",
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_NAME": "Test Author",
            "GIT_COMMITTER_EMAIL": "author@example.test",
            "GIT_COMMITTER_DATE": stamp,
        }
        self._git("add", "-A", cwd=self.work)
        self._git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work, env=env)
        sha = self._git("rev-parse", "HEAD", cwd=self.work)
        self._git("push", "-q", "--force", "origin", f"HEAD:refs/heads/{branch}", cwd=self.work)
        return sha

    def tag(self, name: str, sha: str | None = None, *, annotated: bool = True) -> None:
        """Tag ``sha`` (default: the last commit) and push the tag."""
        target = sha or self._git("rev-parse", "HEAD", cwd=self.work)
        env = {
            "GIT_COMMITTER_NAME": "Test Author",
            "GIT_COMMITTER_EMAIL": "author@example.test",
            "GIT_COMMITTER_DATE": f"{_EPOCH} +0000",
        }
        args = ["tag", "-f", *(["-a", "-m", name] if annotated else []), name, target]
        self._git(*args, cwd=self.work, env=env)
        self._git("push", "-q", "--force", "origin", f"refs/tags/{name}", cwd=self.work)

    def force_push_to(self, ref: str, sha: str) -> None:
        """Point ``ref`` (``main`` means ``refs/heads/main``) at ``sha`` in the served repository,
        whatever it held (history rewritten); the working tree follows when ``ref`` is main."""
        full = ref if ref.startswith("refs/") else f"refs/heads/{ref}"
        self._git("push", "-q", "--force", "origin", f"{sha}:{full}", cwd=self.work)
        if full == "refs/heads/main":
            self._git("reset", "-q", "--hard", sha, cwd=self.work)

    def set_head(self, branch: str) -> None:
        """Make the served repository's HEAD point at ``refs/heads/<branch>``."""
        self._git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=self.bare)

    def delete_repo(self) -> None:
        """The served repository disappears (the working tree stays)."""
        shutil.rmtree(self.bare)


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline(64).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(64)
                    return b"".join(chunks)
                total += size
                if total > MAX_REQUEST_BYTES:
                    return None
                chunks.append(self.rfile.read(size))
                self.rfile.readline(64)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            return None
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        owner = self.server.owner
        authorization = self.headers.get("Authorization", "")
        owner.record(Seen(self.command, self.path, authorization))
        for prefix, base in owner.redirects.items():
            if self.path == f"/{prefix}" or self.path.startswith(f"/{prefix}/"):
                self._answer(302, headers={"Location": base + self.path[len(prefix) + 1 :]})
                return
        if owner.auth is not None and not owner.authorized(authorization):
            self._answer(401, b"authentication required\n", {"WWW-Authenticate": 'Basic realm="git"'})
            return
        body = self._read_body()
        if body is None:
            self._answer(413, b"request too large\n")
            return
        path, _, query = self.path.partition("?")
        env = {
            **_git_env(owner.root),
            "GIT_PROJECT_ROOT": str(owner.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": owner.auth[0] if owner.auth else "",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        try:
            done = subprocess.run(
                [GIT, "http-backend"],
                input=body,
                env=env,
                capture_output=True,
                timeout=CGI_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self._answer(504, b"git http-backend timed out\n")
            return
        head, sep, payload = done.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, sep, payload = done.stdout.partition(b"\n\n")
        if not sep:
            self._answer(500, b"git http-backend gave no CGI headers\n" + done.stderr[-2000:])
            return
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "status":
                status = int(value.strip().split()[0])
            elif key.strip():
                headers[key.strip()] = value.strip()
        self._answer(status, payload, headers)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: GitServer) -> None:
        self.owner = owner
        super().__init__((LOOPBACK, 0), _Handler)


class GitServer:
    """Bare repositories under a temporary directory, served over smart HTTP and ``git://``."""

    def __init__(self, auth: tuple[str, str] | None = None) -> None:
        self.auth = auth
        self.redirects: dict[str, str] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="gitserver-")
        self.root = Path(self._tmp.name)
        self.repos = self.root / "repos"
        self.repos.mkdir()
        self._http = _HttpServer(self)
        self.http_port = int(self._http.server_address[1])
        self._thread = threading.Thread(target=self._http.serve_forever, name="gitserver-http", daemon=True)
        self._thread.start()
        self._daemon: subprocess.Popen[bytes] | None = None
        self.git_port = 0
        try:
            self._start_daemon()
        except BaseException:
            self.close()
            raise

    def _start_daemon(self) -> None:
        for _ in range(5):
            port = free_ports(1)[0]
            proc = subprocess.Popen(
                [
                    GIT,
                    "daemon",
                    "--export-all",
                    "--informative-errors",
                    "--reuseaddr",
                    f"--base-path={self.repos}",
                    f"--listen={LOOPBACK}",
                    f"--port={port}",
                    str(self.repos),
                ],
                env=_git_env(self.root),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=1):
                    self._daemon, self.git_port = proc, port
                    return
                time.sleep(0.05)
            proc.kill()
            proc.wait()
        raise RuntimeError("git daemon did not start on loopback")

    def record(self, seen: Seen) -> None:
        with self._lock:
            if len(self.seen) < MAX_SEEN:
                self.seen.append(seen)

    def authorized(self, header: str) -> bool:
        if self.auth is None:
            return True
        expected = "Basic " + base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        return hmac.compare_digest(header.encode(), expected.encode())

    def redirect(self, prefix: str, base: str) -> None:
        """HTTP requests under ``/<prefix>`` get a 302 to ``base`` + the rest of their path."""
        self.redirects[prefix.strip("/")] = base.rstrip("/")

    def create_repo(self, name: str) -> RepoHandle:
        return RepoHandle(self, name)

    @property
    def base_http(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def close(self) -> None:
        if self._daemon is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._daemon.pid, 15)
            try:
                self._daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._daemon.pid, 9)
                self._daemon.wait()
            self._daemon = None
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)
        self._tmp.cleanup()

    def __enter__(self) -> GitServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class StallServer:
    """A loopback TCP listener that accepts every connection and never answers a byte."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="stall-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    @property
    def url_http(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/stalled.git"

    @property
    def url_git(self) -> str:
        return f"git://{LOOPBACK}:{self.port}/stalled.git"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> StallServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@pytest.fixture(scope="module")
def git_server() -> Iterator[GitServer]:
    """A :class:`GitServer` without authentication, shared by one test module."""
    if shutil.which("git") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("prerequisite missing under CI=true: git (Debian's git)", pytrace=False)
        pytest.skip("git is not installed")
    with GitServer() as server:
        yield server
