"""Anthropic Messages and Ollama chat/generate routes: translated to OpenAI chat and back.

The request is translated (``messages_api`` / ``ollama_api``) into an OpenAI chat completion, sent
to the engine, and the answer relayed through the family's translator. Every stream ends in the
client's protocol, with an in-band error when the upstream dies or answers an error event.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from sparkrun_operator.plan.served import TEXT_GENERATION

from . import enginejson, messages_api, ollama_api
from .admission import model_of
from .errors import GatewayError, render, upstream_message
from .openai_api import affinity_key, read_all
from .request import JSON, NDJSON, Ctx
from .routing import Workload
from .services import Services
from .sse import DONE, SSEParser
from .upstream import UpstreamBodyTooLarge, UpstreamError, UpstreamResponse

MAX_ERROR_BODY_BYTES = 64 * 1024
"""Of an upstream's error body only this much is read, for its message; a larger one is not
read further (the client gets the status and a message naming it)."""

_UNEXPECTED = (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError)
"""What JSON of an unexpected shape (or nested deeper than the decoder recurses) raises when it is
decoded and translated."""


async def messages(svc: Services, ctx: Ctx) -> None:
    doc = ctx.parse_json()
    messages_api.validate(doc)
    doc["model"] = model_of(ctx, doc)  # the body's, or X-Gateway-Model-Name's
    workload = await svc.admission.admit(ctx, doc["model"], TEXT_GENERATION)
    stream = bool(doc.get("stream"))
    body = messages_api.to_openai(doc)
    translator = messages_api.Translator(model=doc["model"], rid=ctx.rid)
    await forward(svc, ctx, body, workload, translator, stream)


async def ollama_chat(svc: Services, ctx: Ctx) -> None:
    doc = ctx.parse_json()
    ollama_api.validate_chat(doc)
    doc["model"] = model_of(ctx, doc)  # the body's, or X-Gateway-Model-Name's
    workload = await svc.admission.admit(ctx, doc["model"], TEXT_GENERATION)
    stream = doc.get("stream", True) is not False
    translator = ollama_api.Translator(model=doc["model"], mode="chat", stream=stream)
    await forward(svc, ctx, ollama_api.chat_to_openai(doc, stream), workload, translator, stream)


async def ollama_generate(svc: Services, ctx: Ctx) -> None:
    doc = ctx.parse_json()
    ollama_api.validate_generate(doc)
    doc["model"] = model_of(ctx, doc)  # the body's, or X-Gateway-Model-Name's
    workload = await svc.admission.admit(ctx, doc["model"], TEXT_GENERATION)
    stream = doc.get("stream", True) is not False
    if not doc.get("prompt") and not doc.get("system") and not doc.get("images"):
        # Ollama answers an empty prompt by loading the model: done at once, done_reason "load".
        await ctx.respond(200, ollama_api.load_reply(doc["model"]), NDJSON if stream else JSON)
        return
    translator = ollama_api.Translator(model=doc["model"], mode="generate", stream=stream)
    await forward(svc, ctx, ollama_api.generate_to_openai(doc, stream), workload, translator, stream)


async def forward(
    svc: Services, ctx: Ctx, upstream_body: dict[str, Any], workload: Workload, translator: Any, stream: bool
) -> None:
    """Forward a translated chat request; relay the answer through ``translator``.

    ``translator`` offers ``content_type``, ``start()``, ``feed(chunk) -> bytes``, ``finish()``,
    ``fail(message) -> bytes`` for streams and ``whole(completion) -> bytes`` otherwise.
    """
    upstream_body["model"] = workload.served_name
    payload = json.dumps(upstream_body, separators=(",", ":"), ensure_ascii=False).encode()
    affinity = affinity_key(upstream_body) if workload.prefix_affinity else None

    response = await svc.connector.connect(ctx, workload, "/v1/chat/completions", payload, affinity)
    try:
        if response.status >= 400:
            await upstream_error(ctx, svc, response)
            return
        if not stream:
            # NB: the answer is decoded whole, on the loop: its size is capped, and what it holds
            # is counted before it is decoded (enginejson: a worker thread would not help, the
            # decoder holds the GIL).
            raw = await read_all(svc, ctx, response, svc.settings.max_answer_bytes)
            svc.accounting.first_byte(ctx)
            svc.accounting.usage(ctx, raw[-512:])
            try:
                body = translator.whole(enginejson.loads(raw))
            except _UNEXPECTED as exc:
                raise GatewayError(502, f"Upstream answered something unexpected: {exc}") from None
            await ctx.respond(200, body)
            return
        await relay(svc, ctx, response, translator)
    finally:
        response.close()


async def upstream_error(ctx: Ctx, svc: Services, response: UpstreamResponse) -> None:
    """Relay an upstream error status in the client's family (its message, when the body is
    JSON of at most :data:`MAX_ERROR_BODY_BYTES`)."""
    try:
        raw = await response.read(MAX_ERROR_BODY_BYTES)
    except UpstreamBodyTooLarge:
        raw = b""
    except UpstreamError as exc:
        raise GatewayError(502, svc.connector.failed(ctx, exc)) from None
    message = f"Upstream answered {response.status}"
    with contextlib.suppress(*_UNEXPECTED):
        err = enginejson.loads(raw)
        error = err.get("error")
        message = upstream_message(error["message"] if isinstance(error, dict) else error or err)
    await ctx.respond(response.status, render(ctx.family, response.status, message))


async def relay(svc: Services, ctx: Ctx, response: UpstreamResponse, translator: Any) -> None:
    """Translate an upstream stream; the response starts with the first translated bytes.

    NB: vLLM-style servers (llm-d-inference-sim among them) answer some refusals, such as a
    prompt over the context window, with ``200`` and a first event ``{"error": {..., "code":
    400}}``. Nothing has been sent then, so the client gets that status and an error body in its
    own protocol, as it would from the upstream's plain ``400``, not a stream with an in-band
    ``api_error``.
    """
    ctx.stream_end = translator.fail
    parser = SSEParser(svc.settings.max_event_bytes)
    first = True
    done = False
    try:
        async for chunk in response.chunks():
            if first:
                svc.accounting.first_byte(ctx)
                first = False
            out = bytearray()
            for event in parser.feed(chunk):
                if event is DONE:
                    done = True
                    continue
                if isinstance(event, dict) and "error" in event:
                    await _stream_error(ctx, translator, event["error"], bytes(out))
                    return
                try:
                    if event.get("usage"):
                        svc.accounting.usage(ctx, json.dumps(event["usage"]).encode())
                    out += translator.feed(event)
                except _UNEXPECTED as exc:
                    await _send(ctx, translator, bytes(out) + translator.fail(_unexpected(exc)), more=False)
                    return
            if out:
                await _send(ctx, translator, bytes(out))
    except (UpstreamError, ValueError) as exc:
        message = svc.connector.failed(ctx, exc) if isinstance(exc, UpstreamError) else str(exc)
        await _send(ctx, translator, translator.fail(message), more=False)
        return
    if not done:
        message = "Upstream ended the stream before it completed"
        await _send(ctx, translator, translator.fail(message), more=False)
        return
    try:
        end = translator.finish()
    except _UNEXPECTED as exc:  # e.g. a "usage" of an unexpected shape, kept for the end
        end = translator.fail(_unexpected(exc))
    await _send(ctx, translator, end, more=False)


def _unexpected(exc: Exception) -> str:
    """The in-band message for an event the translator could not use."""
    if isinstance(exc, ValueError):  # NB: the translators' own bounds say what they are
        return str(exc)
    return f"Upstream sent an event of an unexpected shape: {exc!r}"


async def _send(ctx: Ctx, translator: Any, data: bytes, more: bool = True) -> None:
    """Send ``data``, starting the stream (headers and the translator's opening) if need be."""
    if not ctx.started:
        await ctx.start_response(200, translator.content_type, [(b"cache-control", b"no-cache")])
        data = translator.start() + data
    await ctx.body_part(data, more=more)


async def _stream_error(ctx: Ctx, translator: Any, err: Any, pending: bytes) -> None:
    """An upstream error event: a status of its own before the stream started, else in-band."""
    text = upstream_message(err)
    code = err.get("code") if isinstance(err, dict) else None
    if not ctx.started and not pending and isinstance(code, int) and 400 <= code < 600:
        await ctx.respond(code, render(ctx.family, code, text))
        return
    await _send(ctx, translator, pending + translator.fail(text), more=False)
