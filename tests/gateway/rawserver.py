"""Misbehaving upstreams: raw asyncio HTTP servers on loopback, in a thread of the test process.

Each speaks real HTTP over a real socket, but exactly the bytes the test hands it: an endless
header block, an event without separator, an HTTP/1.0 body ended by closing, and so on.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawUpstream:
    """Serves ``handler(reader, writer, n)`` per connection (``n`` counts connections)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raw-upstream", daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            with suppress(ConnectionError, asyncio.IncompleteReadError, OSError):
                await self.handler(reader, writer, self.connections)
        finally:
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()

    def close(self) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request (head and Content-Length body); b"" when the peer closed first."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def chat_completion(content: str = "Hello world") -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        }
    ).encode()


def chunk_event(content: str | None = None, finish: str | None = None, newline: bytes = b"\n") -> bytes:
    delta = {"content": content} if content is not None else {}
    doc = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(doc).encode() + newline + newline


def ok_head(ctype: bytes = b"application/json", length: int | None = None, version: bytes = b"1.1") -> bytes:
    lines = [b"HTTP/" + version + b" 200 OK", b"content-type: " + ctype]
    if length is not None:
        lines.append(b"content-length: %d" % length)
    else:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


@contextmanager
def raw_upstream(handler: Handler) -> Iterator[RawUpstream]:
    server = RawUpstream(handler)
    try:
        yield server
    finally:
        server.close()
