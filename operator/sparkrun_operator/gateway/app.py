"""The gateway ASGI application: routes, admission, forwarding and relaying.

Request path (pure ASGI, no middleware stack):

1. read the body (bounded by size and time), decode the JSON once with the C decoder to read
   ``model``/``stream`` and validate the few fields seed 004 makes the gateway refuse;
2. check the API key (when keys are configured) and the model's capability;
3. resolve the model in the routing snapshot; hold the request while a Sleeping/Stopped workload
   wakes;
4. connect to a backend (least outstanding / prefix affinity; another backend on connect errors);
5. relay: OpenAI responses pass through byte for byte (streams are cut only at event boundaries so
   an in-band error can always follow a complete event); Anthropic and Ollama responses are
   translated. A dead upstream ends every stream with an in-band error in the client's protocol.

A client disconnect, or ``POST /v1/cancel/{id}``, cancels the request's task, which closes the
upstream response (and with it the upstream connection, which makes vLLM abort the request).
Every response carries ``x-request-id``; it is also the command id that ``/v1/cancel`` takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import messages_api, ollama_api
from .auth import Grant, KeySource, extract_key
from .balancer import Backend, Balancer
from .config import GatewaySettings
from .errors import Family, GatewayError, bad_request, lacks_capability, no_instance, render
from .metrics import GatewayMetrics
from .routing import EMBEDDING, TEXT_GENERATION, RoutingSource, Workload
from .sse import DONE, SSEParser
from .upstream import ConnectFailed, UpstreamError, UpstreamPool, UpstreamResponse, UpstreamTimeout
from .wake import NoopWaker, WakeCoordinator, Waker

log = logging.getLogger("sparkrun.gateway")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = b"application/json"
_SSE = b"text/event-stream; charset=utf-8"
_NDJSON = b"application/x-ndjson"
_USAGE_IN = re.compile(rb'"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)')
_USAGE_OUT = re.compile(rb'"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)')
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_Headers = Sequence[tuple[bytes, bytes]]


class _Cancelled(Exception):
    """Raised inside a request task that ``/v1/cancel`` or a disconnect stopped."""


@dataclass(eq=False)
class Ctx:
    """Per-request state."""

    scope: Scope
    receive: Receive
    send: Send
    rid: str
    family: Family
    route: str
    start: float
    headers: dict[bytes, bytes]
    task: asyncio.Task[Any] | None = None
    body: bytes = b""
    doc: dict[str, Any] = field(default_factory=dict)
    model_label: str = "unknown"
    status: int = 0
    started: bool = False
    finished: bool = False
    cancel_reason: str | None = None
    backend: Backend | None = None
    stream_end: Callable[[str], bytes] | None = None
    """Bytes that end the current stream with an in-band error in the family's protocol."""

    async def start_response(self, status: int, ctype: bytes, extra: _Headers = ()) -> None:
        self.status = status
        self.started = True
        headers = [(b"content-type", ctype), (b"x-request-id", self.rid.encode()), *extra]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def body_part(self, data: bytes, more: bool = True) -> None:
        if not more:
            self.finished = True
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def respond(self, status: int, body: bytes, ctype: bytes = _JSON, extra: _Headers = ()) -> None:
        self.finished = True
        await self.start_response(status, ctype, ((b"content-length", str(len(body)).encode()), *extra))
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def error(self, exc: GatewayError) -> None:
        extra: _Headers = ()
        if exc.retry_after is not None:
            extra = ((b"retry-after", str(round(exc.retry_after)).encode()),)
        await self.respond(exc.status, exc.body(self.family), extra=extra)


Handler = Callable[["Gateway", Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    handler: Handler
    family: Family
    name: str
    reads_body: bool = True
    inference: bool = False
    """Watch for client disconnects while the handler runs (it may wait on upstream)."""


class Gateway:
    """The ASGI application. Construct, then serve it with any ASGI server (lifespan "on")."""

    def __init__(
        self,
        source: RoutingSource,
        *,
        settings: GatewaySettings | None = None,
        waker: Waker | None = None,
        keys: KeySource | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.source = source
        self.settings = settings or GatewaySettings()
        self.keys = keys
        self.metrics = metrics or GatewayMetrics()
        self.balancer = Balancer(eject_base=self.settings.eject_base, eject_max=self.settings.eject_max)
        self.wakes = WakeCoordinator(
            source, waker or NoopWaker(), timeout=self.settings.wake_timeout, on_wake=self._on_wake
        )
        self._pool: UpstreamPool | None = None
        self._inflight: dict[str, Ctx] = {}
        self._routes = _routes()
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    async def startup(self) -> None:
        """Open the upstream client and start the routing source (idempotent)."""
        if self._started:
            return
        self._pool = UpstreamPool()
        await self.source.start()
        start_keys = getattr(self.keys, "start", None)  # watch-fed key sources (Secrets)
        if start_keys is not None:
            await start_keys()
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.source.close()
        close_keys = getattr(self.keys, "close", None)
        if close_keys is not None:
            await close_keys()
        if self._pool is not None:
            await self._pool.aclose()

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("gateway startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        path: str = scope["path"]
        method: str = scope["method"]
        route = self._routes.get((method, path))
        family: Family = "ollama" if path.startswith(("/api/", "/ollama")) else "openai"
        if route is None and method == "POST" and path.startswith("/v1/cancel/"):
            route = Route(_cancel, "openai", "cancel", reads_body=False)
        if route is not None:
            family = route.family
        ctx = Ctx(
            scope, receive, send, rid, family, route.name if route else "none", time.perf_counter(), headers
        )
        if route is None:
            allowed = any(p == path for (_, p) in self._routes)
            exc = (
                GatewayError(405, "Method Not Allowed")
                if allowed
                else GatewayError(404, f"Not Found: {path}")
            )
            await ctx.error(exc)
            return
        ctx.task = asyncio.current_task()
        watcher: asyncio.Future[Message] | None = None
        try:
            if route.reads_body:
                ctx.body = await self._read_body(ctx)
            if route.inference:
                self._inflight[rid] = ctx
                watcher = self._watch_disconnect(ctx)
            await route.handler(self, ctx)
        except GatewayError as exc:
            if not ctx.started:
                await ctx.error(exc)
            elif not ctx.finished:
                await ctx.body_part(b"", more=False)
        except _Cancelled:
            pass
        except asyncio.CancelledError:
            # Ours (a disconnect or /v1/cancel) ends this request only; anything else propagates.
            if ctx.cancel_reason is None or ctx.task is None:
                raise
            ctx.task.uncancel()
            if ctx.cancel_reason == "cancelled" and not ctx.finished:
                await self._cancelled_response(ctx)
        finally:
            if watcher is not None:
                watcher.cancel()
            self.release(ctx)
            self._inflight.pop(rid, None)
            if route.name not in {"metrics", "health"}:
                self.metrics.requests.labels(ctx.model_label, route.name, str(ctx.status)).inc()
                self.metrics.duration.labels(ctx.model_label, route.name).observe(
                    time.perf_counter() - ctx.start
                )

    def cancel(self, command_id: str) -> bool:
        """Cancel an in-flight request by its id; False when none is in flight."""
        target = self._inflight.get(command_id)
        if target is None or target.finished or target.task is None or target.cancel_reason is not None:
            return False
        target.cancel_reason = "cancelled"
        target.task.cancel()
        return True

    async def _read_body(self, ctx: Ctx) -> bytes:
        limit = self.settings.max_body_bytes
        declared = ctx.headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise bad_request("Invalid Content-Length header") from None
            if size > limit:
                raise GatewayError(413, f"Request body of {size} bytes exceeds the limit of {limit} bytes")
        parts: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout):
                while True:
                    message = await ctx.receive()
                    if message["type"] == "http.disconnect":
                        raise _Cancelled()
                    chunk = message.get("body", b"")
                    total += len(chunk)
                    if total > limit:
                        raise GatewayError(413, f"Request body exceeds the limit of {limit} bytes")
                    parts.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise GatewayError(408, "Timed out reading the request body") from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # -- admission --------------------------------------------------------------------------

    def parse_json(self, ctx: Ctx) -> dict[str, Any]:
        """Decode the body once (C decoder); 400 unless it is a JSON object."""
        if not ctx.body:
            raise bad_request("Request body is empty; expected a JSON object")
        try:
            doc = json.loads(ctx.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad_request(f"Invalid JSON in request body: {exc}") from None
        if not isinstance(doc, dict):
            raise bad_request("Request body must be a JSON object")
        ctx.doc = doc
        return doc

    def authorize(self, ctx: Ctx) -> Grant | None:
        """The caller's grant; 401 when keys are configured and the key is missing or unknown."""
        if self.keys is None:
            return None
        key = extract_key(ctx.headers)
        if not key:
            raise GatewayError(401, "Missing API key (send Authorization: Bearer <key> or x-api-key)")
        grant = self.keys.lookup(key)
        if grant is None:
            raise GatewayError(401, "Invalid API key", code="invalid_api_key")
        return grant

    async def admit(self, ctx: Ctx, model: Any, capability: str) -> Workload:
        """Resolve ``model`` to a routable workload, waking it if needed (seed 004 admission)."""
        if not isinstance(model, str) or not model:
            raise bad_request("'model' is required and must be a non-empty string", param="model")
        grant = self.authorize(ctx)
        workload = self.source.snapshot().lookup(model)
        if workload is None or (grant is not None and not grant.allows(model)):
            raise no_instance(model)
        ctx.model_label = model
        if capability not in workload.capabilities:
            nice = "TextGeneration" if capability == TEXT_GENERATION else "TextEmbedding"
            raise lacks_capability(model, nice)
        if workload.routable:
            return workload
        if workload.state == "Running":
            raise no_instance(model)
        return await self.wakes.ready(workload, model)

    def _on_wake(self, workload: Workload, outcome: str) -> None:
        self.metrics.wakes.labels(workload.key, outcome).inc()

    # -- upstream ---------------------------------------------------------------------------

    async def connect(
        self, ctx: Ctx, workload: Workload, path: str, payload: bytes, affinity: bytes | None
    ) -> UpstreamResponse:
        """Send the request to a backend; tries others while connecting fails.

        On return ``ctx.backend`` is the backend that answered (its outstanding count is held
        until :meth:`release`). Raises :class:`GatewayError` 502/504 when no backend answers.
        """
        assert self._pool is not None, "gateway not started"
        tried: list[str] = []
        connect_timeout = workload.connect_timeout or self.settings.connect_timeout
        read_timeout = workload.read_timeout or self.settings.read_timeout
        headers = b"x-request-id: " + ctx.rid.encode() + b"\r\n"
        last = ""
        for _ in range(self.settings.max_attempts):
            backend = self.balancer.pick(
                workload.endpoints, affinity_key=affinity if workload.prefix_affinity else None, exclude=tried
            )
            if backend is None:
                break
            tried.append(backend.url)
            self._hold(ctx, backend)
            try:
                response = await self._pool.request(
                    backend.url,
                    path,
                    payload,
                    headers,
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                )
            except ConnectFailed as exc:
                self._fail(backend, "connect")
                self.release(ctx)
                last = str(exc)
                log.warning("request %s: %s; trying another backend", ctx.rid, last)
                continue
            except UpstreamTimeout:
                self._fail(backend, "timeout")
                self.release(ctx)
                raise GatewayError(504, f"Upstream {backend.url} timed out before answering") from None
            except UpstreamError as exc:
                self._fail(backend, "read")
                self.release(ctx)
                raise GatewayError(502, f"Upstream {backend.url} failed: {exc}") from None
            if response.status >= 500:
                self._fail(backend, "status")
            else:
                self.balancer.success(backend)
            return response
        raise GatewayError(502, f"No backend of model {workload.served_name} could be reached ({last})")

    def _hold(self, ctx: Ctx, backend: Backend) -> None:
        ctx.backend = backend
        backend.outstanding += 1
        self.metrics.in_flight.labels(backend.url).inc()

    def release(self, ctx: Ctx) -> None:
        backend, ctx.backend = ctx.backend, None
        if backend is not None:
            backend.outstanding -= 1
            self.metrics.in_flight.labels(backend.url).dec()

    def _fail(self, backend: Backend, kind: str) -> None:
        self.metrics.upstream_errors.labels(backend.url, kind).inc()
        backoff = self.balancer.failure(backend)
        self.metrics.ejections.labels(backend.url).inc()
        log.warning("backend %s ejected for %.1fs after a %s failure", backend.url, backoff, kind)

    def upstream_failed(self, ctx: Ctx, exc: BaseException) -> str:
        """Record a failure after the upstream answered; returns a message for the client."""
        backend = ctx.backend
        if backend is None:
            return "upstream failed"
        kind = exc.kind if isinstance(exc, UpstreamError) else "read"
        self._fail(backend, kind)
        what = "timed out" if kind == "timeout" else "went away"
        return f"Upstream {backend.url} {what} in the middle of the response"

    def record_usage(self, ctx: Ctx, tail: bytes) -> None:
        m_in = _USAGE_IN.findall(tail)
        m_out = _USAGE_OUT.findall(tail)
        if m_in:
            self.metrics.tokens.labels(ctx.model_label, "in").inc(int(m_in[-1]))
        if m_out:
            self.metrics.tokens.labels(ctx.model_label, "out").inc(int(m_out[-1]))

    def first_byte(self, ctx: Ctx) -> None:
        self.metrics.ttfb.labels(ctx.model_label, ctx.route).observe(time.perf_counter() - ctx.start)

    def _watch_disconnect(self, ctx: Ctx) -> asyncio.Future[Message]:
        """Cancel the request's task when the client disconnects before the response finished.

        NB: after the body is read, ``receive()`` only returns on disconnect (or once the
        response completed, which ``ctx.finished`` tells apart).
        """
        watcher = asyncio.ensure_future(ctx.receive())

        def on_done(fut: asyncio.Future[Message]) -> None:
            if fut.cancelled() or fut.exception() is not None or ctx.finished:
                return
            if fut.result().get("type") == "http.disconnect" and ctx.task is not None:
                ctx.cancel_reason = ctx.cancel_reason or "disconnect"
                ctx.task.cancel()

        watcher.add_done_callback(on_done)
        return watcher

    async def _cancelled_response(self, ctx: Ctx) -> None:
        # Seed 004: a cancelled stream ends with an error event (then [DONE]); a non-streamed
        # request gets an error body instead of a partial answer.
        message = "The generation was cancelled before it completed"
        if not ctx.started:
            await ctx.respond(499, render(ctx.family, 499, message, code="cancelled"))
        elif ctx.stream_end is not None:
            await ctx.body_part(ctx.stream_end(message), more=False)
        else:
            await ctx.body_part(b"", more=False)


# -- OpenAI ---------------------------------------------------------------------------------


async def _openai(gw: Gateway, ctx: Ctx, capability: str, path: str) -> None:
    doc = gw.parse_json(ctx)
    if capability == TEXT_GENERATION:
        _validate_generation(doc, path)
    elif path == "/v1/embeddings":
        _validate_embeddings(doc)
    workload = await gw.admit(ctx, doc.get("model"), capability)
    affinity = _affinity_key(doc) if workload.prefix_affinity else None
    payload = ctx.body
    if doc["model"] != workload.served_name:
        # An alias: the engine knows only the served name, so the body is re-encoded once.
        payload = json.dumps({**doc, "model": workload.served_name}, ensure_ascii=False).encode()
    response = await gw.connect(ctx, workload, path, payload, affinity)
    try:
        await _relay_openai(gw, ctx, response, path)
    finally:
        response.close()


def _validate_generation(doc: dict[str, Any], path: str) -> None:
    # Seed 004: "an empty messages array or a non-positive max_tokens returns 400 Bad Request".
    if path == "/v1/chat/completions":
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty array", param="messages")
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = doc.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise bad_request(f"'{key}' must be a positive integer", param=key)


def _validate_embeddings(doc: dict[str, Any]) -> None:
    # Seed 004: "an empty list returns 400"; "dimensions: Not supported. Any value returns 400".
    raw = doc.get("input")
    if raw is None or raw == [] or raw == "":
        raise bad_request("'input' must be a non-empty string or array", param="input")
    if "dimensions" in doc:
        raise bad_request(
            "'dimensions' is not supported; embeddings use the model's native size", param="dimensions"
        )


def _affinity_key(doc: dict[str, Any]) -> bytes | None:
    """The prompt prefix that decides prefix affinity (system prompt + first user turn)."""
    messages = doc.get("messages")
    if isinstance(messages, list) and messages:
        head = json.dumps(messages[:2], sort_keys=True, separators=(",", ":"))
        return head[:2048].encode()
    for key in ("prompt", "input", "instructions"):
        value = doc.get(key)
        if isinstance(value, str):
            return value[:2048].encode()
    return None


async def _relay_openai(gw: Gateway, ctx: Ctx, response: UpstreamResponse, path: str) -> None:
    ctype = response.headers.get(b"content-type", b"application/json")
    if not ctype.startswith(b"text/event-stream"):
        body = await _read_all(gw, ctx, response)
        gw.first_byte(ctx)
        if response.status < 400:
            gw.record_usage(ctx, body[-512:])
        await ctx.respond(response.status, body, ctype)
        return
    responses_api = path == "/v1/responses"
    ctx.stream_end = _responses_stream_error if responses_api else _openai_stream_error
    await ctx.start_response(response.status, ctype, [(b"cache-control", b"no-cache")])
    # Seed 004: "streaming chat completions open with the SSE comment line : command_id <id>".
    # NB: it leaves with the first upstream bytes, one write less on the time-to-first-token path.
    opening = b"" if responses_api else b": command_id " + ctx.rid.encode() + b"\n\n"
    tail = b""
    last = b""
    first = True
    try:
        async for chunk in response.chunks():
            if first:
                gw.first_byte(ctx)
                first = False
            data = tail + chunk if tail else chunk
            cut = data.rfind(b"\n\n")
            if cut < 0:
                tail = data
                continue
            if cut + 2 == len(data):
                out, tail = data, b""
            else:
                out, tail = data[: cut + 2], data[cut + 2 :]
            last = out
            if opening:
                out, opening = opening + out, b""
            await ctx.body_part(out)
    except UpstreamError as exc:
        message = gw.upstream_failed(ctx, exc)
        await ctx.body_part(opening + ctx.stream_end(message), more=False)
        return
    if tail.strip():
        message = "Upstream ended the stream in the middle of an event"
        await ctx.body_part(opening + ctx.stream_end(message), more=False)
        return
    gw.record_usage(ctx, last[-1024:])
    await ctx.body_part(opening, more=False)


def _openai_stream_error(message: str) -> bytes:
    # Seed 004: "a data: frame carrying the error object, followed by data: [DONE]".
    err = render("openai", 502, message, code="upstream_error")
    return b"data: " + err + b"\n\ndata: [DONE]\n\n"


def _responses_stream_error(message: str) -> bytes:
    err = json.dumps({"type": "error", "code": "upstream_error", "message": message, "param": None})
    return b"event: error\ndata: " + err.encode() + b"\n\n"


async def _read_all(gw: Gateway, ctx: Ctx, response: UpstreamResponse) -> bytes:
    try:
        return await response.read(gw.settings.max_upstream_body_bytes)
    except UpstreamError as exc:
        raise GatewayError(502, gw.upstream_failed(ctx, exc)) from None


async def _upstream_error(ctx: Ctx, gw: Gateway, response: UpstreamResponse) -> None:
    """Relay an upstream error status in the client's family (translated routes)."""
    raw = await _read_all(gw, ctx, response)
    message = f"Upstream answered {response.status}"
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        err = json.loads(raw)
        message = str(
            err["error"]["message"] if isinstance(err.get("error"), dict) else err.get("error") or err
        )
    await ctx.respond(response.status, render(ctx.family, response.status, message))


# -- translated families ---------------------------------------------------------------------


async def _translated(
    gw: Gateway, ctx: Ctx, upstream_body: dict[str, Any], workload: Workload, translator: Any, stream: bool
) -> None:
    """Forward a translated chat request; relay the answer through ``translator``.

    ``translator`` offers ``content_type``, ``start()``, ``feed(chunk) -> bytes``, ``finish()``,
    ``fail(message) -> bytes`` for streams and ``whole(completion) -> bytes`` otherwise.
    """
    upstream_body["model"] = workload.served_name
    payload = json.dumps(upstream_body, separators=(",", ":"), ensure_ascii=False).encode()
    affinity = _affinity_key(upstream_body) if workload.prefix_affinity else None

    response = await gw.connect(ctx, workload, "/v1/chat/completions", payload, affinity)
    try:
        if response.status >= 400:
            await _upstream_error(ctx, gw, response)
            return
        if not stream:
            raw = await _read_all(gw, ctx, response)
            gw.first_byte(ctx)
            gw.record_usage(ctx, raw[-512:])
            try:
                body = translator.whole(json.loads(raw))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise GatewayError(502, f"Upstream answered something unexpected: {exc}") from None
            await ctx.respond(200, body)
            return
        await _relay_translated(gw, ctx, response, translator)
    finally:
        response.close()


async def _relay_translated(gw: Gateway, ctx: Ctx, response: UpstreamResponse, translator: Any) -> None:
    ctx.stream_end = translator.fail
    await ctx.start_response(200, translator.content_type, [(b"cache-control", b"no-cache")])
    opening = translator.start()
    if opening:
        await ctx.body_part(opening)
    parser = SSEParser()
    first = True
    done = False
    try:
        async for chunk in response.chunks():
            if first:
                gw.first_byte(ctx)
                first = False
            out = bytearray()
            for event in parser.feed(chunk):
                if event is DONE:
                    done = True
                    continue
                if isinstance(event, dict) and "error" in event:
                    err = event["error"]
                    text = err.get("message") if isinstance(err, dict) else str(err)
                    await ctx.body_part(translator.fail(str(text)), more=False)
                    return
                if isinstance(event, dict) and event.get("usage"):
                    gw.record_usage(ctx, json.dumps(event["usage"]).encode())
                out += translator.feed(event)
            if out:
                await ctx.body_part(bytes(out))
    except (UpstreamError, ValueError) as exc:
        message = gw.upstream_failed(ctx, exc) if isinstance(exc, UpstreamError) else str(exc)
        await ctx.body_part(translator.fail(message), more=False)
        return
    if not done:
        await ctx.body_part(translator.fail("Upstream ended the stream before it completed"), more=False)
        return
    await ctx.body_part(translator.finish(), more=False)


async def _messages(gw: Gateway, ctx: Ctx) -> None:
    doc = gw.parse_json(ctx)
    messages_api.validate(doc)
    workload = await gw.admit(ctx, doc.get("model"), TEXT_GENERATION)
    stream = bool(doc.get("stream"))
    body = messages_api.to_openai(doc)
    translator = messages_api.Translator(model=doc["model"], rid=ctx.rid)
    await _translated(gw, ctx, body, workload, translator, stream)


async def _ollama_chat(gw: Gateway, ctx: Ctx) -> None:
    doc = gw.parse_json(ctx)
    ollama_api.validate_chat(doc)
    workload = await gw.admit(ctx, doc.get("model"), TEXT_GENERATION)
    stream = doc.get("stream", True) is not False
    translator = ollama_api.Translator(model=doc["model"], mode="chat", stream=stream)
    await _translated(gw, ctx, ollama_api.chat_to_openai(doc, stream), workload, translator, stream)


async def _ollama_generate(gw: Gateway, ctx: Ctx) -> None:
    doc = gw.parse_json(ctx)
    ollama_api.validate_generate(doc)
    workload = await gw.admit(ctx, doc.get("model"), TEXT_GENERATION)
    stream = doc.get("stream", True) is not False
    if not doc.get("prompt") and not doc.get("system") and not doc.get("images"):
        # Ollama answers an empty prompt by loading the model: done at once, done_reason "load".
        await ctx.respond(200, ollama_api.load_reply(doc["model"]), _NDJSON if stream else _JSON)
        return
    translator = ollama_api.Translator(model=doc["model"], mode="generate", stream=stream)
    await _translated(gw, ctx, ollama_api.generate_to_openai(doc, stream), workload, translator, stream)


# -- catalog and utility routes --------------------------------------------------------------


def _visible(gw: Gateway, ctx: Ctx) -> list[tuple[str, Workload]]:
    grant = gw.authorize(ctx)
    table = gw.source.snapshot()
    out = []
    for wl in table.workloads:
        for name in wl.names:
            if grant is None or grant.allows(name):
                out.append((name, wl))
    return out


async def _models(gw: Gateway, ctx: Ctx) -> None:
    data = []
    for name, wl in _visible(gw, ctx):
        data.append(
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": wl.namespace,
                "root": wl.served_name,
                "parent": None if name == wl.served_name else wl.served_name,
                "workload": wl.key,
                "state": wl.state,
                "ready": wl.routable,
                "capabilities": sorted(wl.capabilities),
                "aliases": list(wl.aliases),
            }
        )
    await ctx.respond(200, _dumps({"object": "list", "data": data}))


async def _ollama_tags(gw: Gateway, ctx: Ctx) -> None:
    await ctx.respond(200, _dumps({"models": [ollama_api.tag(name, wl) for name, wl in _visible(gw, ctx)]}))


async def _ollama_ps(gw: Gateway, ctx: Ctx) -> None:
    models = [ollama_api.running(name, wl) for name, wl in _visible(gw, ctx) if wl.routable]
    await ctx.respond(200, _dumps({"models": models}))


async def _ollama_show(gw: Gateway, ctx: Ctx) -> None:
    doc = gw.parse_json(ctx)
    name = doc.get("name") or doc.get("model")  # seed 004: "name takes precedence"
    if not isinstance(name, str) or not name:
        raise bad_request("name or model is required")
    grant = gw.authorize(ctx)
    wl = gw.source.snapshot().lookup(name)
    if wl is None or (grant is not None and not grant.allows(name)):
        raise GatewayError(404, f"model '{name}' not found")
    await ctx.respond(200, _dumps(ollama_api.show(name, wl)))


async def _ollama_version(gw: Gateway, ctx: Ctx) -> None:
    body = _dumps({"version": gw.settings.version})
    if ctx.scope["method"] == "HEAD":
        ctx.finished = True
        await ctx.start_response(200, _JSON, [(b"content-length", str(len(body)).encode())])
        await ctx.body_part(b"", more=False)
        return
    await ctx.respond(200, body)


async def _ollama_root(gw: Gateway, ctx: Ctx) -> None:
    body = b"Ollama is running"
    if ctx.scope["method"] == "HEAD":
        ctx.finished = True
        await ctx.start_response(200, b"text/plain; charset=utf-8", [(b"content-length", b"17")])
        await ctx.body_part(b"", more=False)
        return
    await ctx.respond(200, body, b"text/plain; charset=utf-8")


async def _cancel(gw: Gateway, ctx: Ctx) -> None:
    command_id = ctx.scope["path"].removeprefix("/v1/cancel/")
    gw.authorize(ctx)
    if not gw.cancel(command_id):
        raise GatewayError(404, "Command not found or already completed")
    await ctx.respond(200, _dumps({"message": "Command cancelled.", "command_id": command_id}))


async def _metrics(gw: Gateway, ctx: Ctx) -> None:
    await ctx.respond(200, gw.metrics.render(), b"text/plain; version=0.0.4; charset=utf-8")


async def _health(gw: Gateway, ctx: Ctx) -> None:
    await ctx.respond(200, b'{"status":"ok"}')


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _routes() -> dict[tuple[str, str], Route]:
    def openai(capability: str, path: str) -> Handler:
        async def handler(gw: Gateway, ctx: Ctx) -> None:
            await _openai(gw, ctx, capability, path)

        return handler

    routes: dict[tuple[str, str], Route] = {}
    for path, cap in (
        ("/v1/chat/completions", TEXT_GENERATION),
        ("/v1/completions", TEXT_GENERATION),
        ("/v1/responses", TEXT_GENERATION),
        ("/v1/embeddings", EMBEDDING),
    ):
        routes["POST", path] = Route(openai(cap, path), "openai", path.removeprefix("/v1/"), inference=True)
    routes["POST", "/v1/messages"] = Route(_messages, "anthropic", "messages", inference=True)
    for path in ("/v1/models", "/models"):
        routes["GET", path] = Route(_models, "openai", "models", reads_body=False)
    routes["GET", "/metrics"] = Route(_metrics, "openai", "metrics", reads_body=False)
    routes["GET", "/healthz"] = Route(_health, "openai", "health", reads_body=False)
    routes["GET", "/readyz"] = Route(_health, "openai", "health", reads_body=False)
    # Ollama: /api/... as Ollama itself serves it, and seed 004's /ollama/api/... with its aliases
    # ("/ollama/api/api/..." and "/ollama/api/v1/..." for clients that join base URLs differently).
    for prefix in ("/api", "/ollama/api", "/ollama/api/api", "/ollama/api/v1"):
        routes["POST", f"{prefix}/chat"] = Route(_ollama_chat, "ollama", "ollama_chat", inference=True)
        routes["POST", f"{prefix}/generate"] = Route(
            _ollama_generate, "ollama", "ollama_generate", inference=True
        )
        routes["GET", f"{prefix}/tags"] = Route(_ollama_tags, "ollama", "ollama_tags", reads_body=False)
        routes["POST", f"{prefix}/show"] = Route(_ollama_show, "ollama", "ollama_show")
        routes["GET", f"{prefix}/ps"] = Route(_ollama_ps, "ollama", "ollama_ps", reads_body=False)
        for method in ("GET", "HEAD"):
            routes[method, f"{prefix}/version"] = Route(
                _ollama_version, "ollama", "ollama_version", reads_body=False
            )
    for method in ("GET", "HEAD"):
        routes[method, "/ollama"] = Route(_ollama_root, "ollama", "ollama_root", reads_body=False)
        routes[method, "/ollama/"] = Route(_ollama_root, "ollama", "ollama_root", reads_body=False)
    return routes
