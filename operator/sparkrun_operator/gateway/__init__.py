"""The inference gateway: OpenAI, Anthropic Messages and Ollama APIs in front of vLLM servers.

Contract:

- Routes by model name or alias to ready endpoints of a workload, from a :class:`RoutingSource`
  snapshot (no per-request lookups elsewhere). Least outstanding requests, optional prefix
  affinity, passive health (connect errors, timeouts and 5xx eject a backend for a backoff);
  connect errors are retried on another backend, nothing is retried after the upstream answered.
- Sleeping/Stopped workloads are woken through a :class:`Waker` and requests held (bounded) until
  the source shows them ready; concurrent requests share one wake.
- The compatibility surface and errors of ``docs/gateway.md``: ``404 No instance found for model
  X``, ``400`` for a model without the endpoint's capability, bodies shaped per API family,
  ``x-request-id`` on every response, ``POST /v1/cancel/{id}``.
- OpenAI responses pass through byte for byte; Anthropic and Ollama are translated; every stream
  ends in its protocol even when the upstream dies; a client disconnect cancels the upstream
  request.
- Never imports a Kubernetes client: a Kubernetes routing source or waker is passed in.

Entry point: :func:`main` (``python -m sparkrun_operator.gateway``); :class:`Gateway` is the ASGI
application for embedding.
"""

from .app import Gateway
from .auth import Grant, KeySource, MergedKeySource, StaticKeySource
from .config import GatewaySettings
from .metrics import GatewayMetrics
from .routing import RoutingSource, RoutingTable, StaticRoutingSource, TablePublisher, Workload
from .server import main
from .wake import NoopWaker, Waker

__all__ = [
    "Gateway",
    "GatewayMetrics",
    "GatewaySettings",
    "Grant",
    "KeySource",
    "MergedKeySource",
    "NoopWaker",
    "RoutingSource",
    "RoutingTable",
    "StaticKeySource",
    "StaticRoutingSource",
    "TablePublisher",
    "Waker",
    "Workload",
    "main",
]
