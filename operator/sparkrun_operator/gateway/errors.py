"""Gateway errors and their wire shapes per API family.

One exception, :class:`GatewayError` (HTTP status + message), rendered three ways:

- OpenAI (``/v1/...``): ``{"error": {"message", "type", "param", "code"}}`` -- the shape vLLM
  returns (``docs/gateway.md``, "Errors", lists every status and message).
- Anthropic (``/v1/messages``): ``{"type": "error", "error": {"type", "message"}}``.
- Ollama (``/api/...``): ``{"error": "message"}``.

The fixed messages of ``docs/gateway.md`` are built here: ``No instance found for model X`` (404),
``Command not found or already completed`` (404). An upstream's own error text (up to an event's
or an error body's size) reaches a client clipped to :data:`MAX_ECHO_CHARS` (:func:`clip`, which
:func:`render` applies to every message).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from sparkrun_operator.errors import SparkrunError

MAX_ECHO_CHARS = 1024
"""Characters of a message (an upstream's error text, most of all) an error body carries."""

Family = Literal["openai", "anthropic", "ollama"]

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "cancelled",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    499: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


class GatewayError(SparkrunError):
    """A request the gateway answers with an error of its own (never an upstream body)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        message = clip(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self, family: Family) -> bytes:
        return render(family, self.status, self.message, param=self.param, code=self.code)


def render(
    family: Family, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """The error body of ``family`` for ``status`` and ``message`` (clipped, :func:`clip`)."""
    message = clip(message)
    if family == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return _dumps({"type": "error", "error": {"type": kind, "message": message}})
    if family == "ollama":
        return _dumps({"error": message})
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return _dumps({"error": {"message": message, "type": kind, "param": param, "code": code or status}})


def clip(text: str) -> str:
    """``text`` cut to :data:`MAX_ECHO_CHARS` characters, with an ellipsis when it was longer."""
    return text if len(text) <= MAX_ECHO_CHARS else text[:MAX_ECHO_CHARS] + "\u2026"


def upstream_message(err: Any) -> str:
    """The text of an upstream's ``error`` member (its ``message`` when it is an object), clipped."""
    return clip(str(err.get("message") if isinstance(err, dict) else err))


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def no_instance(model: str) -> GatewayError:
    """An unknown, unplaced or ungranted model: 404 ``No instance found`` (docs/gateway.md, "Errors")."""
    return GatewayError(404, f"No instance found for model {model}", param="model", code="model_not_found")


def lacks_capability(model: str, capability: str) -> GatewayError:
    """A model without the endpoint's capability: 400, before anything is dispatched (docs/gateway.md)."""
    return GatewayError(
        400,
        f"Model {model} does not support {capability}",
        param="model",
        code="model_capability_mismatch",
    )


def bad_request(message: str, *, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param)
