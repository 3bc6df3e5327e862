"""dulwich's git clients with the bounds a fetch needs (blocking: run in a worker thread).

- every socket has a connect and a read timeout, and is registered with the fetch's
  :class:`Session`, which shuts them all down when the deadline passes (so a server that
  trickles bytes cannot hold the worker thread past it);
- every byte received is counted: past the pack limit (plus :data:`OVERHEAD` for the ref
  advertisement) the fetch stops with ``too_large``;
- HTTP: a redirect is followed only to the same origin, for a ``GET`` (a credential never rides
  to another host, and the fetch never reaches a host it was not pointed at); no request at all
  leaves the URL's origin (a protocol v2 server's ``packfile-uris`` names a pack anywhere: not
  fetched, so a registry server cannot point the operator at another host); only the smart
  protocol is spoken (a server that answers otherwise is refused); Basic credentials go only to
  the URL's origin; no proxy from the environment or git configuration is read.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, Final
from urllib.parse import urljoin, urlsplit

import urllib3
from dulwich.client import TCPGitClient, Urllib3HttpGitClient
from dulwich.protocol import TCP_GIT_PORT, Protocol
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from sparkrun_operator.gitfetch.source import FetchLimits, GitFetchError, shown

#: Bytes allowed on top of the pack limit: the ref advertisement, negotiation, sideband framing.
OVERHEAD: Final = 1024 * 1024
CONNECT_TIMEOUT_S: Final = 10.0
READ_TIMEOUT_S: Final = 30.0
MAX_REDIRECTS: Final = 3
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_local = threading.local()


class Aborted(Exception):
    """The fetch's deadline passed (its sockets were shut down)."""


class TooMuch(Exception):
    """More bytes than the limits allow."""


class GitTransportRefused(Exception):
    """The server answered in a way a fetch does not follow (a redirect elsewhere, dumb HTTP)."""


class Session:
    """One fetch's sockets, byte count and deadline; :meth:`abort` may be called from any thread."""

    def __init__(self, limits: FetchLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_s
        self.received = 0
        self._aborted = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._protocols: list[Protocol] = []

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if not self._aborted.is_set():
                return
        _shut(sock)
        raise Aborted

    def abort(self) -> None:
        with self._lock:
            self._aborted.set()
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def adopt(self, proto: Protocol) -> None:
        with self._lock:
            self._protocols.append(proto)

    def close(self) -> None:
        """Close every socket of the fetch (at its end, whatever happened)."""
        with self._lock:
            self._aborted.set()
            sockets, self._sockets = self._sockets, []
            protocols, self._protocols = self._protocols, []
        for proto in protocols:
            with contextlib.suppress(Exception):
                proto.close()
        for sock in sockets:
            # NB: detached, then closed: a response dulwich left open (a 401's) still holds the
            # socket through its file object, and close() alone would wait for that file
            with contextlib.suppress(OSError):
                fd = sock.detach()
                if fd >= 0:
                    os.close(fd)

    def check(self) -> None:
        if self._aborted.is_set() or time.monotonic() > self.deadline:
            raise Aborted

    def count(self, n: int) -> None:
        self.received += n
        if self.received > self.limits.max_pack_bytes + OVERHEAD:
            raise TooMuch(f"the server sent more than {self.limits.max_pack_bytes + OVERHEAD} bytes")
        self.check()

    def counted(self, read: Callable[..., bytes]) -> Callable[..., bytes]:
        def counting(*args: Any) -> bytes:
            self.check()
            data = read(*args)
            self.count(len(data))
            return data

        return counting

    def timeout(self, limit: float) -> float:
        return max(0.1, min(limit, self.deadline - time.monotonic()))


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def current(session: Session) -> Iterator[None]:
    """Connections opened by this thread in the block belong to ``session``."""
    _local.session = session
    try:
        yield
    finally:
        _local.session = None


def _register(sock: Any) -> None:
    session: Session | None = getattr(_local, "session", None)
    if session is None:
        raise Aborted  # NB: a connection outside a fetch: never
    session.track(sock)


class _TrackedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _register(self.sock)


class _TrackedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _register(self.sock)


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


class _Pool(urllib3.PoolManager):
    """Timeouts, no retries, same-origin ``GET`` redirects only, sockets tracked."""

    def __init__(self, session: Session) -> None:
        timeout = urllib3.Timeout(
            connect=session.timeout(CONNECT_TIMEOUT_S), read=session.timeout(READ_TIMEOUT_S)
        )
        super().__init__(num_pools=2, maxsize=2, timeout=timeout, retries=False)
        self.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}

    def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> Any:  # type: ignore[override]
        for _ in range(MAX_REDIRECTS + 1):
            response = super().urlopen(method, url, redirect=False, **kw)
            if response.status not in _REDIRECTS:
                return response
            location = urljoin(url, response.headers.get("Location") or "")
            response.drain_conn()
            response.release_conn()
            if method != "GET" or _origin(location) != _origin(url):
                raise GitTransportRefused(
                    f"the server redirected {method} {shown(url)} to {shown(location)}: not followed"
                )
            url = location
        raise GitTransportRefused(f"more than {MAX_REDIRECTS} redirects from {shown(url)}")


def _quiet() -> None:
    """A server that filters no blobs sends them all; the file size limit applies either way."""


class HttpClient(Urllib3HttpGitClient):
    """Smart HTTP only, every read counted."""

    _warn_filter_objects = staticmethod(_quiet)

    def __init__(self, url: str, session: Session, username: str | None, password: str | None) -> None:
        self._session = session
        self._home = _origin(url)
        super().__init__(
            url,
            dumb=False,
            pool_manager=_Pool(session),
            username=username,
            password=password,
            thin_packs=False,
        )

    def _http_request(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        data: bytes | Iterator[bytes] | None = None,
        raise_for_status: bool = True,
    ) -> tuple[Any, Callable[[int], bytes]]:
        self._session.check()
        if _origin(url) != self._home:
            raise GitTransportRefused(
                f"the server sent the fetch to {shown(url)}, another origin: not followed"
            )
        response, read = super()._http_request(url, headers, data, raise_for_status)
        content_type = str(response.headers.get("Content-Type") or "")
        if not content_type.startswith("application/x-git-"):
            response.close()
            raise GitTransportRefused(
                f"{shown(url)} did not answer as a smart git HTTP server (dumb HTTP is not fetched)"
            )
        return response, self._session.counted(read)


class TcpClient(TCPGitClient):
    """``git://`` with timeouts on its socket, every read counted."""

    _warn_filter_objects = staticmethod(_quiet)

    def __init__(self, host: str, port: int | None, session: Session) -> None:
        self._session = session
        #: Where to connect (kept here: dulwich's own copies are private attributes).
        self.address = (host, TCP_GIT_PORT if port is None else port)
        super().__init__(host, port=port, thin_packs=False)

    def _connect(
        self, cmd: bytes, path: str | bytes, protocol_version: int | None = None
    ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
        session = self._session
        session.check()
        sock = socket.create_connection(self.address, timeout=session.timeout(CONNECT_TIMEOUT_S))
        session.track(sock)
        sock.settimeout(session.timeout(READ_TIMEOUT_S))
        reader = sock.makefile("rb", -1)
        writer = sock.makefile("wb", 0)

        def close() -> None:
            reader.close()
            writer.close()
            sock.close()

        def shutdown_write() -> None:
            writer.flush()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)

        proto = Protocol(session.counted(reader.read), writer.write, close, shutdown_write=shutdown_write)
        session.adopt(proto)
        self.protocol_version = 2 if protocol_version is None else protocol_version
        extra = b"\0\0version=%d\0" % self.protocol_version if self.protocol_version == 2 else b""
        raw_path = path if isinstance(path, bytes) else path.encode("utf-8")
        proto.send_cmd(b"git-" + cmd, raw_path, b"host=" + self.address[0].encode("ascii") + extra)
        return proto, lambda: _readable(sock), None


def _readable(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def client_for(url: str, session: Session, username: str | None, password: str | None) -> tuple[Any, str]:
    """The client for ``url`` and the path to pass it (``url`` was checked by ``check_source``)."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "git":
        return TcpClient(parts.hostname or "", parts.port, session), parts.path
    if username is None and password is not None:
        raise GitFetchError("invalid", "a password needs a username")
    return HttpClient(url, session, username, password), ""
