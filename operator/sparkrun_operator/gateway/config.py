"""Gateway settings (limits and timeouts); every field has a safe default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Limits and timeouts. Seconds unless the name says otherwise."""

    max_body_bytes: int = 16 * 1024 * 1024
    """Request bodies above this are refused with 413 (checked on Content-Length and while reading)."""
    body_timeout: float = 30.0
    """A client must deliver its whole body within this time (408 otherwise)."""
    header_timeout: float = 10.0
    """A client must deliver its request head within this time after connecting, or it is cut off."""
    connect_timeout: float = 5.0
    """Default upstream connect timeout (a workload's ``timeouts.connect`` overrides it)."""
    read_timeout: float = 600.0
    """Default upstream read timeout: the longest silence between two upstream bytes."""
    wake_timeout: float = 300.0
    """How long a request for a Sleeping/Stopped workload is held while it wakes."""
    max_attempts: int = 3
    """Distinct backends tried when connecting fails (never retried after the first byte)."""
    eject_base: float = 1.0
    """First ejection of a failing backend, in seconds (doubles per ejection up to ``eject_max``)."""
    eject_max: float = 30.0
    consecutive_failures: int = 5
    """A backend is ejected after this many failures in a row (5xx, timeout, broken response);
    a refused connection ejects at once (it cannot be the request's fault)."""
    max_ejected_percent: int = 50
    """At most this share of a workload's endpoints is ejected at once (at least one may be)."""
    max_in_flight: int = 1024
    """Inference requests in flight at once; more are refused with 503 and ``Retry-After``."""
    max_in_flight_per_key: int = 256
    """Inference requests in flight at once per API key (when keys are configured); 429 beyond."""
    max_in_flight_per_tenant: int | None = None
    """Inference requests in flight at once per tenant: the namespace of a Secret's key or of a
    ServiceAccount (a tenant issues itself keys and accounts at will); 429 beyond. ``None``:
    half of ``max_in_flight``, so no one tenant takes every slot."""
    max_header_bytes: int = 32 * 1024
    """A request head (request line and headers) larger than this is refused with 431."""
    max_buffered_body_bytes: int = 256 * 1024 * 1024
    """Request-body bytes buffered by all requests together; a request waits (at most
    ``body_timeout``, then 503) until its declared size fits."""
    max_event_bytes: int = 256 * 1024
    """Largest SSE event a translated stream (Anthropic, Ollama) parses; larger ends the stream
    with an error (real chat events are a few KiB). OpenAI streams pass through without holding
    whole events."""
    max_answer_bytes: int = 4 * 1024 * 1024
    """Largest non-streamed answer an Anthropic or Ollama route decodes (then 502)."""
    total_timeout: float = 1800.0
    """The whole upstream exchange of one request, from connecting to the last byte (a
    workload's ``timeouts.total`` overrides it); then 504, or an in-band error in a stream."""
    max_upstream_body_bytes: int = 64 * 1024 * 1024
    """Largest non-streamed upstream body the gateway buffers on OpenAI routes (then 502)."""
    version: str = "0.1.0"

    @property
    def tenant_limit(self) -> int:
        """:attr:`max_in_flight_per_tenant`, its default resolved."""
        per_tenant = self.max_in_flight_per_tenant
        return per_tenant if per_tenant is not None else max(1, self.max_in_flight // 2)
