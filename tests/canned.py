"""A loopback HTTP server that answers every request the same way and records what it got: the
caller's own server, a hostile endpoint, or a Hub that knows no repository.

``CannedServer(host)`` serves on ``host`` (loopback, or a process node's address when pods must
reach it) from a thread of its own; :attr:`answer` can be changed between requests; used as a
context manager (or :meth:`close`) it stops.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One request: its method, path and ``Authorization`` header ("" when absent)."""

    method: str
    path: str
    authorization: str


@dataclass
class Answer:
    """What every request gets; ``Content-Type: text/plain`` unless ``headers`` say otherwise."""

    status: int = 500
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class CannedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", answer: Answer | None = None) -> None:
        self.answer = answer or Answer()
        self._seen: list[Seen] = []
        self._lock = threading.Lock()
        super().__init__((host, 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, name="canned", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def count(self) -> int:
        with self._lock:
            return len(self._seen)

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    server: CannedServer

    def _answer(self) -> None:
        with self.server._lock:
            self.server._seen.append(Seen(self.command, self.path, self.headers.get("Authorization") or ""))
            answer = self.server.answer
        self.send_response(answer.status)
        for name, value in {"Content-Type": "text/plain", **answer.headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    do_GET = do_HEAD = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        return None
