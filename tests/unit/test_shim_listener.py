"""The shim's listeners (``shim/listener.py``), served by uvicorn on loopback, probed with raw sockets.

Tested: a request head trickled byte by byte (slowloris) is cut off with 408 at the head
deadline, on a new connection and on a kept-alive one; a connection that sends nothing is closed
at the deadline; a head above the size limit (a header flood) is 431 and closed, while a head
just under it, and a small head followed by a large body in the same packet, are served; TLS uses
Python's default cipher list (not uvicorn's ``"TLSv1"`` list, which enables NULL suites); a rotated
certificate is served to new connections without a restart, a half-written rotation changes
nothing, and connections opened before keep working.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from sparkrun_operator.shim.listener import Limits, ReloadingTls, listener_config
from sparkrun_testbed.pki import CertificateAuthority

LIMITS = Limits(head_timeout=1.0, max_head_bytes=8 * 1024, keep_alive=30)


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while True:
        message = await receive()
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def _serve(tls: ReloadingTls | None = None) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    config = listener_config(_app, host="127.0.0.1", port=port, limits=LIMITS, tls=tls)
    config.log_level = "warning"
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):  # NB: uvicorn offers no event to wait on
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


async def _read_all(reader: asyncio.StreamReader, within: float) -> bytes:
    return await asyncio.wait_for(reader.read(1 << 20), within)


async def test_slowloris_head_is_cut_off_with_408() -> None:
    async with _serve() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        start = time.monotonic()
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: shim\r\n")
        answer = b""
        for i in range(30):  # one header every 0.1 s, never the blank line (3 s at most)
            try:
                writer.write(f"X-Slow-{i}: a\r\n".encode())
                await writer.drain()
            except ConnectionError:
                break
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(reader.read(4096), 0.1)
                if answer:
                    break
        elapsed = time.monotonic() - start
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"Request head timed out" in answer
    assert 0.9 <= elapsed < 2.0


async def test_slowloris_on_a_kept_alive_connection_and_idle_connections() -> None:
    async with _serve() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: shim\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"ok"), 2)
        assert first.startswith(b"HTTP/1.1 200 ")
        writer.write(b"GET / HTTP/1.1\r\nHost: sh")  # the second head never completes
        assert (await _read_all(reader, 3)).startswith(b"HTTP/1.1 408 ")
        writer.close()
        # A connection that sends nothing at all is closed at the deadline (no answer owed).
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        start = time.monotonic()
        assert await _read_all(reader, 3) == b""
        assert time.monotonic() - start < 2.0
        writer.close()


async def test_header_flood_is_431_and_heads_under_the_limit_are_served() -> None:
    async with _serve() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        flood = b"".join(f"X-Flood-{i}: {'v' * 40}\r\n".encode() for i in range(1000))  # ~50 KiB
        writer.write(b"GET / HTTP/1.1\r\nHost: shim\r\n" + flood + b"\r\n")
        answer = await _read_all(reader, 3)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        near = b"X-Big: " + b"v" * (LIMITS.max_head_bytes - 200) + b"\r\n"
        writer.write(b"GET / HTTP/1.1\r\nHost: shim\r\n" + near + b"\r\n")
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), 3)).startswith(b"HTTP/1.1 200 ")
        body = b"x" * (256 * 1024)  # a large body in the same packet as a small head
        writer.write(b"POST / HTTP/1.1\r\nHost: shim\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert (await asyncio.wait_for(reader.readuntil(b"ok"), 3)).startswith(b"HTTP/1.1 200 ")
        writer.close()


def _pair(ca: CertificateAuthority, name: str, directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    ca.issue(name, hosts=("127.0.0.1",)).write(cert, key)
    return cert, key


def _client(ca: CertificateAuthority, directory: Path) -> ssl.SSLContext:
    bundle = directory / "ca.crt"
    bundle.write_bytes(ca.cert_pem)
    return ssl.create_default_context(cafile=str(bundle))


async def _peer(port: int, context: ssl.SSLContext) -> tuple[str, tuple[str, str, int]]:
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    ssl_object = writer.get_extra_info("ssl_object")
    subject = dict(item[0] for item in ssl_object.getpeercert()["subject"])
    cipher = ssl_object.cipher()
    writer.close()
    return subject["commonName"], cipher


async def test_tls_default_ciphers_and_rotation_without_restart(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("listener-test-ca")
    cert, key = _pair(ca, "first", tmp_path)
    tls = ReloadingTls(str(cert), str(key), poll=0.1)
    client = _client(ca, tmp_path)
    tls12 = _client(ca, tmp_path)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    async with _serve(tls) as port:
        watcher = asyncio.create_task(tls.watch())
        try:
            name, cipher = await _peer(port, tls12)
            assert name == "first"
            assert cipher[1] == "TLSv1.2"
            assert "GCM" in cipher[0] or "CHACHA20" in cipher[0], cipher
            default = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            assert [c["name"] for c in tls.context.get_ciphers()] == [
                c["name"] for c in default.get_ciphers()
            ]
            # uvicorn's "TLSv1" string would enable NULL (unencrypted) and SHA-1 CBC suites.
            assert not [c["name"] for c in tls.context.get_ciphers() if "NULL" in c["name"]]

            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            # A half-written rotation (new certificate, key not yet replaced) changes nothing.
            ca.issue("second", hosts=("127.0.0.1",)).write(cert, tmp_path / "pending.key")
            await asyncio.sleep(0.4)
            assert (await _peer(port, client))[0] == "first"
            (tmp_path / "pending.key").replace(key)
            for _ in range(50):
                if tls.reloads:
                    break
                await asyncio.sleep(0.1)
            assert tls.reloads == 1
            assert (await _peer(port, client))[0] == "second"
            writer.write(b"GET / HTTP/1.1\r\nHost: shim\r\n\r\n")  # the connection from before
            assert (await asyncio.wait_for(reader.readuntil(b"ok"), 3)).startswith(b"HTTP/1.1 200 ")
            writer.close()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def test_reload_needs_both_files_to_match() -> None:
    with pytest.raises(FileNotFoundError):
        ReloadingTls("/nonexistent.crt", "/nonexistent.key")
