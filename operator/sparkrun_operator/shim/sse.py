"""Server-sent events as a pure ASGI response.

:class:`EventStream` sends the headers, then each chunk its producer yields, while a second task
waits for ``http.disconnect``: a disconnect cancels the producer at once (log readers stop, no
work continues for a client that left), and the producer is always closed (``aclose``) and its
subscription slot released, whatever ended the stream.

:func:`frame` encodes one event (``id:`` line when the payload has an ``id``), :data:`HEARTBEAT`
is a comment line that keeps idle connections and proxies alive. :class:`Subscriptions` bounds
the number of concurrent streams (409 when full) and those of one principal (429 ``RateLimited``
with ``attrs.quota = "streams"`` beyond ``per_principal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from sparkrun_operator.ops.errors import Conflict, DaemonError, TooManyRequests, error_body

__all__ = ["HEARTBEAT", "EventStream", "Subscriptions", "frame"]

log = logging.getLogger(__name__)

HEARTBEAT = b": heartbeat\n\n"


def frame(event: dict[str, Any]) -> bytes:
    """One SSE frame: ``id: N`` (for durable events) and ``data: <json>``."""
    prefix = f"id: {event['id']}\n" if "id" in event else ""
    return (prefix + "data: " + json.dumps(event, allow_nan=False) + "\n\n").encode()


class Subscriptions:
    """A bounded set of live streams, bounded per principal too."""

    def __init__(self, maximum: int, *, per_principal: int | None = None) -> None:
        self.maximum = maximum
        self.per_principal = per_principal if per_principal is not None else maximum
        self.active = 0
        self.by_principal: dict[str, int] = {}

    def acquire(self, principal: str = "") -> Callable[[], None]:
        """Take a slot (``Conflict`` when none is left); returns its release function."""
        if self.active >= self.maximum:
            raise Conflict("Subscriber limit reached", retryable=True)
        held = self.by_principal.get(principal, 0)
        if held >= self.per_principal:
            raise TooManyRequests(
                f"Stream quota reached ({self.per_principal} concurrent streams per principal)",
                retry_after=5.0,
                attrs={"quota": "streams", "limit": self.per_principal},
            )
        self.active += 1
        self.by_principal[principal] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.active -= 1
                left = self.by_principal[principal] - 1
                if left:
                    self.by_principal[principal] = left
                else:
                    del self.by_principal[principal]

        return release


class EventStream:
    """A ``text/event-stream`` response fed by an async iterator of bytes."""

    def __init__(
        self,
        producer: AsyncIterator[bytes],
        *,
        release: Callable[[], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.producer = producer
        self.release = release
        self.headers = {"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        *((k.encode(), v.encode()) for k, v in self.headers.items()),
                    ],
                }
            )
            pump = asyncio.create_task(self._pump(send))
            gone = asyncio.create_task(self._disconnected(receive))
            try:
                await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (pump, gone):
                    task.cancel()
                for task in (pump, gone):
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await task
            if pump.done() and not pump.cancelled():
                with contextlib.suppress(OSError):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with contextlib.suppress(Exception):
                aclose = getattr(self.producer, "aclose", None)
                if aclose is not None:
                    await aclose()
            if self.release is not None:
                self.release()

    async def _pump(self, send: Send) -> None:
        try:
            async for chunk in self.producer:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (asyncio.CancelledError, OSError):
            raise
        except Exception as error:
            # Headers are gone already: report the failure in-band and end the stream.
            if not isinstance(error, DaemonError):
                log.exception("event stream failed")
            _, body, _ = error_body(error)
            await send(
                {"type": "http.response.body", "body": frame({"type": "error", **body}), "more_body": True}
            )

    @staticmethod
    async def _disconnected(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
