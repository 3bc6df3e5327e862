"""OpenAI routes: validation, prefix affinity and the byte-for-byte relay of the answer.

Chat/text completions, Responses and embeddings go to the engine as they came (re-encoded only
when the model is an alias). Streams are cut at event boundaries (LF, CRLF or CR framing) so that
an in-band error follows a complete event, as long as an unfinished event stays under
``HOLD_BYTES``; a larger event passes through as it arrives, so no event is ever held whole.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from sparkrun_operator.plan.served import TEXT_GENERATION

from .accounting import stream_tail
from .admission import model_of
from .errors import GatewayError, bad_request, render
from .request import DIRECT_BODY, Ctx, DirectBody
from .services import Services
from .splice import Splice, cut
from .upstream import UpstreamBodyTooLarge, UpstreamError, UpstreamResponse


def handler(capability: str, path: str) -> Callable[[Services, Ctx], Awaitable[None]]:
    """The route handler of the OpenAI endpoint ``path`` (served by models with ``capability``)."""

    async def handle(svc: Services, ctx: Ctx) -> None:
        await forward(svc, ctx, capability, path)

    return handle


async def forward(svc: Services, ctx: Ctx, capability: str, path: str) -> None:
    doc = ctx.parse_json()
    if capability == TEXT_GENERATION:
        validate_generation(doc, path)
    elif path == "/v1/embeddings":
        validate_embeddings(doc)
    named = doc.get("model")
    workload = await svc.admission.admit(ctx, model_of(ctx, doc), capability)
    affinity = affinity_key(doc) if workload.prefix_affinity else None
    payload = ctx.body
    if named != workload.served_name:
        # An alias, or a name from X-Gateway-Model-Name: the engine knows only the served name.
        payload = with_model(ctx.body, doc, workload.served_name)
    response = await svc.connector.connect(ctx, workload, path, payload, affinity)
    try:
        await relay(svc, ctx, response, path)
    finally:
        response.close()


def with_model(body: bytes, doc: dict[str, Any], name: str) -> bytes:
    """``body`` (the JSON object ``doc``) with ``model`` set to ``name``. A body without a
    ``model`` key (its name came from ``X-Gateway-Model-Name``) gets the key spliced in after
    its opening brace, without encoding the rest again (only into UTF-8: JSON may come as
    UTF-16 or UTF-32 too); otherwise it is re-encoded once, as UTF-8, escaping a lone surrogate
    the caller escaped (``"\\ud800"``), which UTF-8 cannot carry."""
    if "model" not in doc and json.detect_encoding(body) == "utf-8":
        start = len(body) - len(body.lstrip())
        if body[start : start + 1] == b"{":
            head = b'{"model":' + json.dumps(name, ensure_ascii=False).encode()
            return head + (b"," if doc else b"") + body[start + 1 :]
    named = {**doc, "model": name}
    try:
        return json.dumps(named, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(named).encode()


def validate_generation(doc: dict[str, Any], path: str) -> None:
    # An empty messages array or a non-positive max_tokens is 400 (docs/gateway.md, "Errors").
    if path == "/v1/chat/completions":
        messages = doc.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty array", param="messages")
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = doc.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise bad_request(f"'{key}' must be a positive integer", param=key)


def validate_embeddings(doc: dict[str, Any]) -> None:
    # An empty input, or any dimensions, is 400 (docs/gateway.md, "Endpoints").
    raw = doc.get("input")
    if raw is None or raw == [] or raw == "":
        raise bad_request("'input' must be a non-empty string or array", param="input")
    if "dimensions" in doc:
        raise bad_request(
            "'dimensions' is not supported; embeddings use the model's native size", param="dimensions"
        )


def affinity_key(doc: dict[str, Any]) -> bytes | None:
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


async def read_all(svc: Services, ctx: Ctx, response: UpstreamResponse, limit: int | None = None) -> bytes:
    """The whole upstream body, at most ``limit`` bytes (default ``max_upstream_body_bytes``);
    502 when it is larger (the rest is not read: the connection is closed) or the upstream fails
    while sending it."""
    try:
        return await response.read(limit or svc.settings.max_upstream_body_bytes)
    except UpstreamBodyTooLarge as exc:
        raise GatewayError(502, str(exc)) from None  # NB: an answer, not a broken backend
    except UpstreamError as exc:
        raise GatewayError(502, svc.connector.failed(ctx, exc)) from None


async def relay(svc: Services, ctx: Ctx, response: UpstreamResponse, path: str) -> None:
    ctype = response.headers.get(b"content-type", b"application/json")
    if not ctype.startswith(b"text/event-stream"):
        body = await read_all(svc, ctx, response)
        svc.accounting.first_byte(ctx)
        if response.status < 400:
            svc.accounting.usage(ctx, body[-512:])
        await ctx.respond(response.status, body, ctype)
        return
    responses_api = path == "/v1/responses"
    ctx.stream_end = responses_stream_error if responses_api else openai_stream_error
    await ctx.start_response(response.status, ctype, [(b"cache-control", b"no-cache")])
    # Streams open with the SSE comment ": command_id <id>" (docs/gateway.md, "Endpoints").
    # NB: it leaves with the first upstream bytes, one write less on the time-to-first-token path.
    opening = b"" if responses_api else b": command_id " + ctx.rid.encode() + b"\n\n"
    direct = ((ctx.scope.get("extensions") or {}).get(DIRECT_BODY) or {}).get("body")
    if isinstance(direct, DirectBody) and direct.chunked:
        # The fast path: relayed from the upstream connection's callbacks (decision 0028).
        await Splice(svc, ctx, response, direct, opening).run()
        return
    await _relay_by_task(svc, ctx, response, opening)


async def _relay_by_task(svc: Services, ctx: Ctx, response: UpstreamResponse, opening: bytes) -> None:
    """The general relay (any ASGI server): the request's task reads and writes each chunk."""
    assert ctx.stream_end is not None
    tail = b""
    last = b""
    first = True
    passing = False  # part of an unfinished event already went out (it was over HOLD_BYTES)
    try:
        async for chunk in response.chunks():
            if first:
                svc.accounting.first_byte(ctx)
                first = False
            out, tail, passing = cut(tail, chunk, passing)
            if not out:
                continue
            last = stream_tail(last, out)
            if opening:
                out, opening = opening + out, b""
            await ctx.body_part(out)
    except UpstreamError as exc:
        message = svc.connector.failed(ctx, exc)
        await ctx.body_part(opening + _after(passing) + ctx.stream_end(message), more=False)
        return
    if tail.strip() or passing:
        message = "Upstream ended the stream in the middle of an event"
        await ctx.body_part(opening + _after(passing) + ctx.stream_end(message), more=False)
        return
    svc.accounting.usage(ctx, last)
    await ctx.body_part(opening, more=False)


def _after(passing: bool) -> bytes:
    # NB: ends the unfinished event that went out, so the error is an event of its own.
    return b"\n\n" if passing else b""


def openai_stream_error(message: str) -> bytes:
    # An error in a stream: a data: frame carrying the error object, then data: [DONE].
    err = render("openai", 502, message, code="upstream_error")
    return b"data: " + err + b"\n\ndata: [DONE]\n\n"


def responses_stream_error(message: str) -> bytes:
    err = json.dumps({"type": "error", "code": "upstream_error", "message": message, "param": None})
    return b"event: error\ndata: " + err.encode() + b"\n\n"
