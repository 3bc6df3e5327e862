"""The gateway's route table: (method, path) -> :class:`Route`, a handler and how to dispatch it.

A handler is ``async (services, ctx) -> None``: it gets the request and the gateway's
:class:`~.services.Services`, never the application (the request path goes one way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sparkrun_operator.plan.served import EMBEDDING, TEXT_GENERATION

from . import listing, openai_api, translated
from .errors import Family
from .request import Ctx
from .services import Services

Handler = Callable[[Services, Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    handler: Handler
    family: Family
    name: str
    reads_body: bool = True
    inference: bool = False
    """Counted against the in-flight limits, cancellable, and watched for client disconnects
    while the handler runs (it may wait on an upstream)."""


CANCEL = Route(listing.cancel, "openai", "cancel", reads_body=False)
"""``POST /v1/cancel/{id}``: matched by prefix, outside the table."""


def table() -> dict[tuple[str, str], Route]:
    routes: dict[tuple[str, str], Route] = {}
    for path, cap in (
        ("/v1/chat/completions", TEXT_GENERATION),
        ("/v1/completions", TEXT_GENERATION),
        ("/v1/responses", TEXT_GENERATION),
        ("/v1/embeddings", EMBEDDING),
    ):
        handler = openai_api.handler(cap, path)
        routes["POST", path] = Route(handler, "openai", path.removeprefix("/v1/"), inference=True)
    routes["POST", "/v1/messages"] = Route(translated.messages, "anthropic", "messages", inference=True)
    for path in ("/v1/models", "/models"):
        routes["GET", path] = Route(listing.models, "openai", "models", reads_body=False)
    routes["GET", "/metrics"] = Route(listing.metrics, "openai", "metrics", reads_body=False)
    routes["GET", "/healthz"] = Route(listing.health, "openai", "health", reads_body=False)
    routes["GET", "/readyz"] = Route(listing.health, "openai", "health", reads_body=False)
    routes["GET", "/health"] = Route(listing.health, "openai", "health", reads_body=False)
    _ollama(routes)
    return routes


def _ollama(routes: dict[tuple[str, str], Route]) -> None:
    # Ollama: /api/... as Ollama itself serves it, and /ollama/api/... with its aliases (docs/gateway.md)
    # ("/ollama/api/api/..." and "/ollama/api/v1/..." for clients that join base URLs differently).
    chat = Route(translated.ollama_chat, "ollama", "ollama_chat", inference=True)
    generate = Route(translated.ollama_generate, "ollama", "ollama_generate", inference=True)
    tags = Route(listing.ollama_tags, "ollama", "ollama_tags", reads_body=False)
    show = Route(listing.ollama_show, "ollama", "ollama_show")
    ps = Route(listing.ollama_ps, "ollama", "ollama_ps", reads_body=False)
    version = Route(listing.ollama_version, "ollama", "ollama_version", reads_body=False)
    root = Route(listing.ollama_root, "ollama", "ollama_root", reads_body=False)
    for prefix in ("/api", "/ollama/api", "/ollama/api/api", "/ollama/api/v1"):
        routes["POST", f"{prefix}/chat"] = chat
        routes["POST", f"{prefix}/generate"] = generate
        routes["GET", f"{prefix}/tags"] = tags
        routes["POST", f"{prefix}/show"] = show
        routes["GET", f"{prefix}/ps"] = ps
        for method in ("GET", "HEAD"):
            routes[method, f"{prefix}/version"] = version
    for method in ("GET", "HEAD"):
        routes[method, "/ollama"] = root
        routes[method, "/ollama/"] = root
