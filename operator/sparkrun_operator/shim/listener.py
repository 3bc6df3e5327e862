"""The shim's HTTP listeners: bounded request heads, and TLS that follows certificate rotation.

- :class:`GuardedProtocol` (uvicorn's h11 protocol with two bounds): a request head (request
  line and headers) must arrive complete within ``head_timeout`` seconds of the moment the
  connection starts waiting for it (a new connection, or the end of the previous response),
  whatever trickles in meanwhile (slowloris), else ``408`` and the connection is closed; a head
  larger than ``max_head_bytes`` is ``431`` and closed (header floods), before h11 would buffer
  more. Bodies are bounded by the application (``Boundary``: 413/408).
- :class:`ReloadingTls`: the listener's ``SSLContext`` is Python's server default
  (``ssl.create_default_context(Purpose.CLIENT_AUTH)``: TLS 1.2 or newer, OpenSSL's default
  cipher list, not uvicorn's ``"TLSv1"`` cipher string). Every ``poll`` seconds the certificate
  and key files' modification times are checked; after a change the pair is loaded into a new
  context first (a half-written rotation fails there and is retried at the next poll, nothing is
  changed), then into the listener's context, which new connections use; open connections keep
  the certificate they were established with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["GuardedProtocol", "Limits", "ReloadingTls", "guarded", "listener_config"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Bounds of one listener's connections."""

    #: Seconds a request head may take to arrive (408 after).
    head_timeout: float = 10.0
    #: Largest request head (request line + headers) in bytes (431 beyond).
    max_head_bytes: int = 32 * 1024
    #: Seconds an idle keep-alive connection stays open.
    keep_alive: float = 5.0


def _raw_response(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedProtocol(H11Protocol):
    """h11 with a request-head deadline and a request-head size limit (see the module docstring)."""

    limits: Limits = Limits()

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._track_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._head_too_large(data):
            self._refuse(431, "Request Header Fields Too Large", "Request head exceeds limit")
            return
        super().data_received(data)
        self._track_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track_head()

    def _head_too_large(self, data: bytes) -> bool:
        buffered = self.conn.trailing_data[0]
        if len(buffered) + len(data) <= self.limits.max_head_bytes:
            return False
        head = (buffered + data)[: self.limits.max_head_bytes + 4]
        end = head.find(b"\r\n\r\n")
        return end < 0 or end + 4 > self.limits.max_head_bytes

    def _track_head(self) -> None:
        """Arm the head deadline while waiting for a head; disarm once one has arrived."""
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_expired)
        elif not waiting:
            self._disarm()

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:  # part of a head arrived: tell the client why
            self._refuse(408, "Request Timeout", "Request head timed out")
        else:  # an idle connection: just close it
            self.transport.close()

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        self._disarm()
        self._unset_keepalive_if_required()
        with contextlib.suppress(Exception):
            self.transport.write(_raw_response(status, reason, detail))
        self.transport.close()


def guarded(base: type[H11Protocol], limits: Limits) -> type[H11Protocol]:
    """``base`` (a :class:`GuardedProtocol`) bound to ``limits``."""
    return type(f"Bound{base.__name__}", (base,), {"limits": limits})


def server_context(cert: str, key: str, *, client_ca: str | None = None) -> ssl.SSLContext:
    """Python's default server context with ``cert``/``key`` (and client certificates from ``client_ca``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ReloadingTls:
    """A server ``SSLContext`` that follows rotation of its certificate files."""

    def __init__(self, cert: str, key: str, *, client_ca: str | None = None, poll: float = 2.0) -> None:
        self.cert, self.key, self.client_ca, self.poll = cert, key, client_ca, poll
        self.context = server_context(cert, key, client_ca=client_ca)
        self._stamp = self._mtimes()
        self.reloads = 0

    def _mtimes(self) -> tuple[int, int]:
        return os.stat(self.cert).st_mtime_ns, os.stat(self.key).st_mtime_ns

    def check(self) -> bool:
        """Reload when the files changed; ``True`` when a new certificate was installed."""
        try:
            stamp = self._mtimes()
        except OSError:
            return False  # mid-rotation (a file replaced): look again at the next poll
        if stamp == self._stamp:
            return False
        try:
            server_context(self.cert, self.key)  # validate the pair in a scratch context first
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as error:
            log.warning("TLS certificate %s not reloaded yet: %s", self.cert, error)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate %s reloaded", self.cert)
        return True

    async def watch(self) -> None:
        """Check every ``poll`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.poll)
            self.check()


def listener_config(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    limits: Limits,
    tls: ReloadingTls | None,
    protocol: type[H11Protocol] = GuardedProtocol,
) -> uvicorn.Config:
    """The uvicorn configuration of one shim listener."""
    extra: dict[str, Any] = {}
    if tls is not None:
        context = tls.context
        extra["ssl_context_factory"] = lambda _config, _default: context
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        access_log=False,
        ws="none",
        http=guarded(protocol, limits),
        # NB: above the head limit, so the guard (431) speaks before h11 (400) would.
        h11_max_incomplete_event_size=limits.max_head_bytes * 2,
        timeout_keep_alive=max(1, int(limits.keep_alive)),
        timeout_graceful_shutdown=5,
        **extra,
    )
