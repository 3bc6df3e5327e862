"""Errors of the Kubernetes API, as a small typed hierarchy with the transport error chained.

``KubeError`` is the k8s layer's branch of the product's one error tree (``SparkrunError``,
``docs/architecture.md`` "Errors"); the daemon API maps each class onto its own vocabulary
(``ops.runner.as_daemon_error``), by class, never by status number.

::

    KubeError                     any failed call (``status`` 0 when no HTTP answer came back)
    ├── KubeBadRequest            400: the request itself was malformed (a selector, a patch, a log
    │                             read of a container not started)
    ├── KubeNotFound              404
    ├── KubeConflict              409: the object changed, or a UID/resourceVersion precondition failed
    │   └── KubeAlreadyExists     409 on create
    ├── KubeInvalid               422: the apiserver (schema, CEL, webhook) refused the object
    ├── KubeForbidden             403: RBAC
    ├── KubeGone                  410: a watch's or a list's resourceVersion / continue token expired
    └── KubeUnavailable           5xx, timeouts and connection errors: retry later
        └── KubeTooManyRequests   429 (priority and fairness): ``retry_after`` seconds advised

Every instance carries the HTTP ``status``, the apiserver's ``reason`` and ``message`` (from its
``Status`` body) and what was being done (``method`` and ``path``); ``raise ... from cause`` keeps
the underlying aiohttp/kubernetes_asyncio exception as ``__cause__``. :func:`from_transport` is
the one place that turns a transport failure (no HTTP answer) into :class:`KubeUnavailable`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sparkrun_operator.errors import SparkrunError


class KubeError(SparkrunError):
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


class KubeBadRequest(KubeError):
    """400: the apiserver could not accept the request as sent (a selector, a patch, a parameter)."""


class KubeNotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class KubeConflict(KubeError):
    """409: a concurrent change or a failed precondition; re-read and retry."""


class KubeAlreadyExists(KubeConflict):
    """409 on create: an object with that name exists."""


class KubeInvalid(KubeError):
    """422: the object was refused (schema, CEL rule, admission webhook)."""


class KubeForbidden(KubeError):
    """403: the operator's service account lacks a permission."""


class KubeGone(KubeError):
    """410: the resourceVersion (of a watch) or the continue token (of a list) expired; relist."""


class KubeUnavailable(KubeError):
    """The apiserver could not answer now (429, 5xx, timeout, connection error)."""


class KubeTooManyRequests(KubeUnavailable):
    """429: not processed; try again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


#: The longest ``Retry-After`` believed (seconds): a larger, infinite or NaN advice is cut to it.
RETRY_AFTER_MAX = 600.0


def retry_after_of(value: str | None) -> float:
    """Seconds of a ``Retry-After`` header (delta-seconds; 1 when absent or unparsable), at most
    :data:`RETRY_AFTER_MAX` (``inf``, ``1e999`` or NaN from a proxy in front of the apiserver
    must not become an unbounded wait or an unprintable number)."""
    try:
        seconds = float(value) if value else 1.0
    except ValueError:
        return 1.0
    if not math.isfinite(seconds):
        return RETRY_AFTER_MAX if seconds > 0 else 1.0
    return min(RETRY_AFTER_MAX, max(0.0, seconds))


def from_transport(error: BaseException, *, method: str, path: str) -> KubeUnavailable:
    """The typed error for a call that got no HTTP answer (timeout, refused, reset, TLS)."""
    text = str(error) or "no answer"
    return KubeUnavailable(f"{type(error).__name__}: {text}", method=method, path=path)


def from_response(
    *,
    status: int,
    body: bytes | str | dict[str, Any] | None,
    method: str,
    path: str,
    retry_after: str | None = None,
) -> KubeError:
    """The typed error for an HTTP answer ``status`` with the apiserver's ``Status`` ``body``
    (raw, or already decoded as in a watch's ``ERROR`` event)."""
    parsed: Any = None
    if isinstance(body, dict):
        parsed, text = body, ""
    else:
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
    if status == 400:
        return KubeBadRequest(message, **kwargs)
    if status == 404:
        return KubeNotFound(message, **kwargs)
    if status == 409:
        if reason == "AlreadyExists":
            return KubeAlreadyExists(message, **kwargs)
        return KubeConflict(message, **kwargs)
    if status == 422:
        return KubeInvalid(message, **kwargs)
    if status == 403:
        return KubeForbidden(message, **kwargs)
    if status == 410:
        return KubeGone(message, **kwargs)
    if status == 429:
        return KubeTooManyRequests(message, retry_after=retry_after_of(retry_after), **kwargs)
    if status >= 500:
        return KubeUnavailable(message, **kwargs)
    return KubeError(message, **kwargs)
