"""The OpenAI stream relay on the fast path: upstream bytes go to the client from the callbacks.

The general relay (:func:`.openai_api.relay`) runs each upstream read through the request's task:
wake the task, resume an async generator, one ASGI ``send`` (a coroutine) per write, a new
future and timer per read. At high fan-in that per-event cost is the gateway's whole CPU (decision
0028). Here the upstream connection calls :meth:`Splice.on_upstream` as bytes arrive (after
httptools de-chunked everything one socket read held, so what arrived together leaves in one
write) and the bytes are written to the client's transport at once, re-chunked; the task only
sleeps until the stream ends, the client's socket is full, or the read timeout passes.

Same semantics as the general relay: streams are cut at event boundaries (LF, CRLF or CR) while
an unfinished event stays under ``HOLD_BYTES``, the ``: command_id`` comment leaves with the
first bytes, a broken or silent upstream ends the stream with an in-band error, a slow client
stops reading from the upstream (TCP back-pressure) instead of buffering, and a cancelled task
(client disconnect, ``/v1/cancel``, total deadline) stops the relay where it is.
"""

from __future__ import annotations

import asyncio

from .accounting import stream_tail
from .request import Ctx, DirectBody
from .services import Services
from .upstream import UpstreamError, UpstreamResponse, UpstreamTimeout

HOLD_BYTES = 64 * 1024
"""The longest unfinished SSE event a relay holds back (to cut streams at event ends only)."""

_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")


def event_end(data: bytes, start: int = 0) -> int:
    """The offset just after the last SSE event separator in ``data[start:]`` (LF, CRLF or CR),
    or -1."""
    end = data.rfind(b"\n\n", start)
    if end >= 0:
        end += 2
    if data.find(b"\r", start) >= 0:
        for sep in _SEPARATORS[1:]:
            i = data.rfind(sep, start)
            if i >= 0:
                end = max(end, i + len(sep))
    return end


def cut(tail: bytes, chunk: bytes, passing: bool) -> tuple[bytes, bytes, bool]:
    """Where a relay cuts its stream: ``(out, tail, passing)``, the bytes to send now (``b""``:
    none yet), the unfinished event it holds, and whether part of that event already went out
    (it was over ``HOLD_BYTES``).

    Linear in the bytes relayed: a held tail never contains an event end, so only its last three
    bytes (a separator may straddle the tail and the chunk) and the chunk are searched.
    """
    if tail:
        data = tail + chunk
        end = event_end(data, max(0, len(tail) - 3))
    else:
        data = chunk
        end = event_end(data)
    if end == len(data):
        return data, b"", False
    if end >= 0 and len(data) - end <= HOLD_BYTES:
        return data[:end], data[end:], False
    if end < 0 and not passing and len(data) <= HOLD_BYTES:
        return b"", data, False
    return data, b"", True  # an event too large to hold: its bytes pass on as they come


class Splice:
    """One stream's relay from the upstream connection's callbacks to the client's transport."""

    def __init__(
        self, svc: Services, ctx: Ctx, response: UpstreamResponse, out: DirectBody, opening: bytes
    ) -> None:
        self.accounting, self.connector = svc.accounting, svc.connector
        self.ctx, self.response, self.out = ctx, response, out
        self.opening = opening
        self.tail = b""
        self.last = b""
        self.first = True
        self.passing = False  # part of an unfinished event already went out (over HOLD_BYTES)
        self.outcome: UpstreamError | bool | None = None
        self.paused = False
        self._loop = asyncio.get_running_loop()
        self._timeout = response.read_timeout
        self._seen = self._loop.time()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        """Relay until the upstream body ended (or broke); then write the stream's end."""
        read_timeout = self._timeout
        self.response.listen(self.on_upstream)
        self._timer = self._loop.call_later(read_timeout, self._check_timeout)
        try:
            self.on_upstream()  # what arrived with the response head
            while self.outcome is None:
                self._waiter = self._loop.create_future()
                await self._waiter
                if self.paused and self.outcome is None:
                    await self.out.drain()
                    self.paused = False
                    self.response.pause(False)
                    self.on_upstream()
        finally:
            self.response.listen(None)
            self._timer.cancel()
            self._waiter = None
        await self._end()

    def on_upstream(self) -> None:
        """Bytes arrived, the body completed or the connection broke (upstream callback)."""
        try:
            data = self.response.take()
            if data:
                self._seen = self._loop.time()
                self._forward(data)
            if self.outcome is None:
                self.outcome = self.response.state()
        except Exception as exc:  # NB: never raise into the upstream protocol's callbacks
            self.outcome = UpstreamError(f"relay failed: {exc}")
        if self.outcome is not None or (self.out.paused and not self.paused):
            if self.outcome is None:
                self.paused = True
                self.response.pause(True)
            self._resolve()

    def _forward(self, chunk: bytes) -> None:
        if self.first:
            self.accounting.first_byte(self.ctx)
            self.first = False
        out, self.tail, self.passing = cut(self.tail, chunk, self.passing)
        if not out:
            return
        self.last = stream_tail(self.last, out)
        if self.opening:
            out, self.opening = self.opening + out, b""
        self.out.write(out)

    def _resolve(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _check_timeout(self) -> None:
        # NB: one timer per stream, re-armed for what is left, instead of one per upstream read.
        if self.outcome is not None:
            return
        left = self._seen + self._timeout - self._loop.time()
        if self.paused:  # a paused relay waits on the client, not on the upstream
            left = self._timeout
        if left > 0:
            self._timer = self._loop.call_later(max(left, 0.001), self._check_timeout)
            return
        self.outcome = UpstreamTimeout(f"no data for {self._timeout}s")
        self._resolve()

    async def _end(self) -> None:
        ctx, outcome = self.ctx, self.outcome
        after = b"\n\n" if self.passing else b""  # ends the unfinished event that went out
        assert ctx.stream_end is not None
        if isinstance(outcome, UpstreamError):
            message = self.connector.failed(ctx, outcome)
            await ctx.body_part(self.opening + after + ctx.stream_end(message), more=False)
            return
        if self.tail.strip() or self.passing:
            message = "Upstream ended the stream in the middle of an event"
            await ctx.body_part(self.opening + after + ctx.stream_end(message), more=False)
            return
        self.accounting.usage(ctx, self.last)
        await ctx.body_part(self.opening, more=False)
