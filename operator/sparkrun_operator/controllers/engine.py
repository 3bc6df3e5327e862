"""The few engine endpoints the operator calls (``/is_sleeping``, ``/sleep``, ``/wake_up``, ``/metrics``).

Every answer is read up to a cap and within a deadline (a tenant's engine may answer anything).
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import urlsplit

import httpx

from sparkrun_operator.controllers import scrapehttp
from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.plan.enginemetrics import EngineLoad, parse

#: ``GET /is_sleeping``: the most of the answer read (vLLM's ``{"is_sleeping": false}`` is 22
#: bytes), and the deadline of the whole probe, connecting included (a pass waits for it).
IS_SLEEPING_MAX_BYTES = 4 * 1024

IS_SLEEPING_SECONDS = 2.0

#: ``POST /sleep``, ``POST /wake_up``: the most of the answer read (only its status and an
#: excerpt for the log matter); their deadline is the operator's engine timeout (10 s).
ENGINE_ANSWER_MAX_BYTES = 4 * 1024

#: ``GET /metrics``: the most of the answer read (a vLLM engine's is some tens of KB, most of it
#: histogram buckets) and the deadline of the whole scrape, connecting included.
METRICS_MAX_BYTES = 2 * 1024 * 1024

METRICS_SECONDS = 2.0

log = logging.getLogger("sparkrun.operator.engine")


class EngineAnswerRefused(SparkrunError):
    """An engine answer the operator does not read: over its cap, not complete within its
    deadline, or compressed although ``identity`` was asked for."""


async def read_bounded(
    http: httpx.AsyncClient, method: str, url: str, *, limit: int, deadline: float
) -> tuple[int, bytes]:
    """``method url``: the status and body, at most ``limit`` bytes, all within ``deadline``
    seconds from connecting to the last byte (httpx's own timeouts are per read: a body that
    drips a byte at a time would never time out). Raises :class:`EngineAnswerRefused` past a
    bound (the connection is closed, the rest never read) and ``httpx.HTTPError`` when the
    exchange fails."""
    try:
        async with (
            asyncio.timeout(deadline),
            http.stream(method, url, headers={"accept-encoding": "identity"}, timeout=deadline) as response,
        ):
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise EngineAnswerRefused(f"answered with content-encoding {encoding[:40]!r}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise EngineAnswerRefused(f"answer of {int(declared)} bytes, over {limit}")
            body = bytearray()
            async for part in response.aiter_raw():
                body += part
                if len(body) > limit:
                    raise EngineAnswerRefused(f"answer larger than {limit} bytes")
            return response.status_code, bytes(body)
    except TimeoutError:
        raise EngineAnswerRefused(f"no complete answer within {deadline:g} s") from None


class Engine:
    """Calls to a leader's vLLM server (dev-mode endpoints included), each bounded in size and
    time (:data:`IS_SLEEPING_MAX_BYTES`, :data:`IS_SLEEPING_SECONDS`,
    :data:`ENGINE_ANSWER_MAX_BYTES`, :data:`METRICS_MAX_BYTES`, :data:`METRICS_SECONDS`, ``timeout``)."""

    def __init__(self, http: httpx.AsyncClient, *, timeout: float) -> None:
        self.http = http
        self.timeout = timeout

    async def is_sleeping(self, url: str) -> bool | None:
        """``GET /is_sleeping``; ``None`` when the engine cannot say (down, no sleep mode, an
        answer over its bounds or not ``{"is_sleeping": <bool>}``)."""
        deadline = min(self.timeout, IS_SLEEPING_SECONDS)
        try:
            status, body = await read_bounded(
                self.http, "GET", f"{url}/is_sleeping", limit=IS_SLEEPING_MAX_BYTES, deadline=deadline
            )
        except EngineAnswerRefused as refused:
            log.warning("engine %s: sleep state unknown: /is_sleeping %s", url, refused)
            return None
        except httpx.HTTPError as error:
            log.debug("engine %s: sleep state unknown: %s: %s", url, type(error).__name__, error)
            return None
        if status != 200:
            return None
        try:
            value = json.loads(body).get("is_sleeping")
        except (ValueError, AttributeError, RecursionError):
            return None
        return value if isinstance(value, bool) else None

    async def call(self, url: str, action: str) -> str | None:
        """``POST /sleep?level=1`` or ``POST /wake_up``; an error message, or ``None`` on success."""
        path = "/sleep?level=1" if action == "sleep" else "/wake_up"
        try:
            status, body = await read_bounded(
                self.http, "POST", f"{url}{path}", limit=ENGINE_ANSWER_MAX_BYTES, deadline=self.timeout
            )
        except EngineAnswerRefused as refused:
            return f"{action} on {url}: {refused}"
        except httpx.HTTPError as error:
            return f"{action} on {url} failed: {type(error).__name__}: {error}"
        if status >= 300:
            excerpt = body[:200].decode("utf-8", "replace")
            return f"{action} on {url} answered {status}: {excerpt!r}"
        return None

    async def load(self, url: str) -> EngineLoad | None:
        """``GET /metrics``: the engine's queue, running requests, KV-cache use and request count
        (``plan/enginemetrics.py``); ``None`` when it cannot say (down, an answer over its bounds,
        not 200, or without vLLM's queue gauges). The autoscaler's hot path: read with the lean
        client of :mod:`.scrapehttp`, not httpx (``url`` is ``http://host:port``, as
        ``controllers/autoscale.py`` builds it)."""
        deadline = min(self.timeout, METRICS_SECONDS)
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            log.warning("engine %s: load unknown: not an http:// address", url)
            return None
        try:
            status, body = await scrapehttp.get(
                parts.hostname, parts.port or 80, "/metrics", limit=METRICS_MAX_BYTES, deadline=deadline
            )
        except scrapehttp.ScrapeRefused as refused:
            log.warning("engine %s: load unknown: /metrics %s", url, refused)
            return None
        except (OSError, ValueError) as error:  # NB: ValueError: an address or port not usable
            log.debug("engine %s: load unknown: %s: %s", url, type(error).__name__, error)
            return None
        if status != 200:
            log.debug("engine %s: load unknown: /metrics answered %d", url, status)
            return None
        return parse(body)
