"""The local Hub: repositories, tokens, fault knobs and counters behind one loopback server."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import asdict
from types import TracebackType
from typing import Any

from sparkrun_testbed.hfhub.faults import Fault, Faults, PathStats
from sparkrun_testbed.hfhub.repo import Repo, RepoType, _FileMeta
from sparkrun_testbed.hfhub.server import HubHTTPServer


class Hub:
    """A small Hugging Face-compatible Hub on loopback, serving :class:`Repo` objects.

    ``tokens`` are the tokens the Hub accepts. ``lfs_redirect`` answers LFS files with a 302 to a
    second listener on ``cdn_host`` (127.0.0.2: another host, as a real CDN, so the library drops
    the Authorization header and does not follow the HEAD's redirect); otherwise LFS bytes come
    straight from ``/resolve/``. Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        repos: Iterable[Repo] = (),
        *,
        tokens: Iterable[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        lfs_redirect: bool = False,
        cdn_host: str = "127.0.0.2",
        tree_page_size: int = 1000,
        verbose: bool = False,
    ) -> None:
        self.repos: dict[tuple[RepoType, str], Repo] = {}
        self.tokens: set[str] = set(tokens)
        self.faults = Faults()
        self.host, self.port = host, port
        self.lfs_redirect, self.cdn_host = lfs_redirect, cdn_host
        self.tree_page_size = tree_page_size
        self.verbose = verbose
        self.cdn_authorization_seen = 0
        self._servers: list[HubHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.url = ""
        self.cdn_url: str | None = None
        for repo in repos:
            self.add_repo(repo)

    # -- repositories and tokens ---------------------------------------------------------------

    def add_repo(self, repo: Repo) -> Repo:
        self.repos[(repo.repo_type, repo.repo_id)] = repo
        return repo

    def repo(self, repo_id: str, repo_type: RepoType = "model") -> Repo:
        return self.repos[(repo_type, repo_id)]

    def add_token(self, token: str) -> None:
        self.tokens.add(token)

    def token_valid(self, token: str | None) -> bool:
        return token is not None and token in self.tokens

    def token_granted(self, repo: Repo, token: str | None) -> bool:
        if not self.token_valid(token):
            return False
        return repo.granted is None or token in repo.granted

    def lfs_blob(self, sha256: str) -> tuple[_FileMeta, str] | None:
        """The LFS file with this sha256 in any commit, and its counter key (for the CDN)."""
        for repo in self.repos.values():
            for commit in repo.commits.values():
                for path, meta in commit.files.items():
                    if meta.file.lfs and meta.sha256 == sha256:
                        return meta, f"{repo.repo_id}/{path}"
        return None

    # -- faults (Python API; the same as POST /_admin/faults) ----------------------------------

    def add_fault(self, fault: Fault) -> Fault:
        return self.faults.add(fault)

    def drop(self, path: str = "*", *, after_bytes: int, times: int | None = 1) -> Fault:
        """Close the connection after ``after_bytes`` body bytes of the next ``times`` GETs."""
        return self.faults.add(Fault("drop", path, times, after_bytes=after_bytes, method="GET"))

    def corrupt(self, path: str = "*", *, offset: int = 0, times: int | None = None) -> Fault:
        """Flip the byte at ``offset`` of the file in served bodies."""
        return self.faults.add(Fault("corrupt", path, times, offset=offset, method="GET"))

    def slow(self, path: str = "*", *, rate: float, times: int | None = None) -> Fault:
        """Serve bodies at ``rate`` bytes per second."""
        return self.faults.add(Fault("slow", path, times, rate=rate, method="GET"))

    def fail(
        self,
        path: str = "*",
        *,
        status: int = 500,
        retry_after: float | None = None,
        times: int | None = 1,
        method: str | None = None,
    ) -> Fault:
        """Answer ``status`` (429 with ``retry_after``, 500, ...) to the next ``times`` requests."""
        return self.faults.add(
            Fault("status", path, times, status=status, retry_after=retry_after, method=method)
        )

    def ignore_range(self, path: str = "*", *, times: int | None = None) -> Fault:
        """Answer 200 with the whole file to Range requests."""
        return self.faults.add(Fault("ignore_range", path, times, method="GET"))

    def clear_faults(self) -> None:
        self.faults.clear()

    # -- counters ------------------------------------------------------------------------------

    def stats(self) -> dict[str, PathStats]:
        """Per key (``<repo>/<file>`` or ``api:<repo>``): requests, HEADs, GETs, body bytes, statuses."""
        return self.faults.stats()

    def bytes_served(self, key: str | None = None) -> int:
        stats = self.faults.stats()
        if key is not None:
            return stats[key].bytes if key in stats else 0
        return sum(s.bytes for k, s in stats.items() if not k.startswith("api:"))

    def reset_stats(self) -> None:
        self.faults.reset_stats()

    def stats_json(self) -> dict[str, Any]:
        return {k: asdict(v) for k, v in self.faults.stats().items()}

    # -- lifecycle -----------------------------------------------------------------------------

    def _serve(self, host: str, port: int, *, cdn: bool) -> str:
        server = HubHTTPServer((host, port), self, cdn=cdn)
        thread = threading.Thread(target=server.serve_forever, name=f"hfhub-{host}", daemon=True)
        thread.start()
        self._servers.append(server)
        self._threads.append(thread)
        return f"http://{host}:{server.server_address[1]}"

    def start(self) -> str:
        """Start listening (``port`` 0 picks a free port) and return the endpoint URL."""
        if self._servers:
            return self.url
        self.url = self._serve(self.host, self.port, cdn=False)
        if self.lfs_redirect:
            self.cdn_url = self._serve(self.cdn_host, 0, cdn=True)
        return self.url

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> Hub:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
