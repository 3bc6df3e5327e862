"""Catalog and utility routes: model listings (OpenAI and Ollama), cancel, metrics and health."""

from __future__ import annotations

import json
from typing import Any

from . import ollama_api
from .errors import GatewayError, bad_request
from .request import JSON, Ctx
from .services import Services
from .workers import worker_index


async def models(svc: Services, ctx: Ctx) -> None:
    data = []
    for name, wl in await svc.admission.visible(ctx):
        where = f"{wl.namespace}/{wl.name}"
        data.append(
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": wl.namespace,
                "root": wl.served_name,
                "parent": None if name == wl.served_name else wl.served_name,
                # NB: a foreign InferencePool's name (gateway/pools.py) names the pool instead.
                "workload": None if wl.pool else where,
                **({"inferencePool": where} if wl.pool else {}),
                "state": wl.state,
                "ready": wl.routable,
                "capabilities": sorted(wl.capabilities),
                "aliases": list(wl.aliases),
            }
        )
    await ctx.respond(200, dumps({"object": "list", "data": data}))


async def ollama_tags(svc: Services, ctx: Ctx) -> None:
    await ctx.respond(
        200, dumps({"models": [ollama_api.tag(name, wl) for name, wl in await svc.admission.visible(ctx)]})
    )


async def ollama_ps(svc: Services, ctx: Ctx) -> None:
    models = [ollama_api.running(name, wl) for name, wl in await svc.admission.visible(ctx) if wl.routable]
    await ctx.respond(200, dumps({"models": models}))


async def ollama_show(svc: Services, ctx: Ctx) -> None:
    doc = ctx.parse_json()
    name = doc.get("name") or doc.get("model")  # name wins (docs/gateway.md)
    if not isinstance(name, str) or not name:
        raise bad_request("name or model is required")
    wl = await svc.admission.granted(ctx, name)
    if wl is None:
        raise GatewayError(404, f"model '{name}' not found")
    await ctx.respond(200, dumps(ollama_api.show(name, wl)))


async def ollama_version(svc: Services, ctx: Ctx) -> None:
    body = dumps({"version": svc.settings.version})
    if ctx.scope["method"] == "HEAD":
        ctx.finished = True
        await ctx.start_response(200, JSON, [(b"content-length", str(len(body)).encode())])
        await ctx.body_part(b"", more=False)
        return
    await ctx.respond(200, body)


async def ollama_root(svc: Services, ctx: Ctx) -> None:
    body = b"Ollama is running"
    if ctx.scope["method"] == "HEAD":
        ctx.finished = True
        await ctx.start_response(200, b"text/plain; charset=utf-8", [(b"content-length", b"17")])
        await ctx.body_part(b"", more=False)
        return
    await ctx.respond(200, body, b"text/plain; charset=utf-8")


async def cancel(svc: Services, ctx: Ctx) -> None:
    command_id = ctx.scope["path"].removeprefix("/v1/cancel/")
    await svc.admission.identify(ctx)  # 401 without a valid key or token when authentication is on
    if not svc.cancellation.cancel(ctx.caller, command_id):
        raise GatewayError(404, "Command not found or already completed")
    await ctx.respond(200, dumps({"message": "Command cancelled.", "command_id": command_id}))


async def metrics(svc: Services, ctx: Ctx) -> None:
    """Prometheus text. With keys on, only an administrator key (every model of every namespace)
    reads it here, with Kubernetes tokens a user that may ``get`` ``/metrics``; scrapers use the
    key-less ``--metrics-port`` listener instead."""
    if not await svc.admission.may_read_metrics(ctx):
        raise GatewayError(403, "Metrics need an administrator key (or the --metrics-port listener)")
    await ctx.respond(200, svc.accounting.metrics.render(), b"text/plain; version=0.0.4; charset=utf-8")


async def health(svc: Services, ctx: Ctx) -> None:
    worker = worker_index()
    await ctx.respond(200, b'{"status":"ok"}' if worker is None else b'{"status":"ok","worker":%d}' % worker)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
