"""Errors of the Kubernetes API, as a small typed hierarchy with the transport error chained.

::

    KubeError                 any failed call (``status`` 0 when no HTTP answer came back)
    ├── NotFound              404
    ├── Conflict              409: the object changed, or a UID/resourceVersion precondition failed
    │   └── AlreadyExists     409 on create
    ├── Invalid               422: the apiserver (schema, CEL, webhook) refused the object
    ├── Forbidden             403: RBAC
    └── Unavailable           429, 5xx, timeouts and connection errors: retry later

Every instance carries the HTTP ``status``, the apiserver's ``reason`` and ``message`` (from its
``Status`` body) and what was being done (``method`` and ``path``); ``raise ... from cause`` keeps
the underlying aiohttp/kubernetes_asyncio exception as ``__cause__``.
"""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """A Kubernetes API call failed."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        method: str = "",
        path: str = "",
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.method = method
        self.path = path
        self.body = body

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        code = f"{self.status} {self.reason}: " if self.status else ""
        return f"{where}{code}{self.message}"


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: a concurrent change or a failed precondition; re-read and retry."""


class AlreadyExists(Conflict):
    """409 on create: an object with that name exists."""


class Invalid(KubeError):
    """422: the object was refused (schema, CEL rule, admission webhook)."""


class Forbidden(KubeError):
    """403: the operator's service account lacks a permission."""


class Unavailable(KubeError):
    """The apiserver could not answer now (429, 5xx, timeout, connection error)."""


def from_response(*, status: int, body: bytes | str | None, method: str, path: str) -> KubeError:
    """The typed error for an HTTP answer ``status`` with the apiserver's ``Status`` ``body``."""
    parsed: Any = None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    reason = ""
    message = text[:500] or f"HTTP {status}"
    if isinstance(parsed, dict):
        reason = str(parsed.get("reason") or "")
        message = str(parsed.get("message") or message)
    kwargs: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "method": method,
        "path": path,
        "body": parsed,
    }
    if status == 404:
        return NotFound(message, **kwargs)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(message, **kwargs)
        return Conflict(message, **kwargs)
    if status == 422:
        return Invalid(message, **kwargs)
    if status == 403:
        return Forbidden(message, **kwargs)
    if status == 429 or status >= 500:
        return Unavailable(message, **kwargs)
    return KubeError(message, **kwargs)
