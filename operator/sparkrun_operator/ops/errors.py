"""The daemon API's error vocabulary: one exception per HTTP status, with the daemon's envelope.

:class:`DaemonError` is the ops layer's branch of the product's one error tree
(``sparkrun_operator.errors.SparkrunError``, drawn in ``docs/architecture.md``, "Errors"); every
other error an operation raises is mapped onto it by class (``ops.runner.as_daemon_error``).

Transport errors have the shape ``{"detail": str, "error": {"type", "retryable", "attrs"}}``;
authentication (401) and permission (403) errors carry only ``detail``, as in the reference
daemon, except :class:`FeatureDisabled`, whose typed error names why the operation is disabled
and what to use instead. ``type`` keeps the reference daemon's names (``ValueError`` for 422,
``LookupError``/``KeyError`` for 404, ``Conflict`` for 409, ``ReplayGap`` for 410,
``ResultContractError`` for an invalid operation result, ``TimeoutError`` for 504) so clients
dispatching on them keep working; ``KubernetesUnavailable`` (503) is this daemon's own: the
Kubernetes API it keeps its state in did not answer, or throttled it. A ``detail`` (often
quoting a tool's report or an upstream's words) is cut at :data:`MAX_DETAIL` characters with an
ellipsis: a job's error and a response body stay bounded whatever a hostile server wrote.

Hierarchy::

    DaemonError (500, InternalError)
    ├── Unauthenticated (401, detail only, WWW-Authenticate: Bearer)
    ├── Forbidden (403, detail only)
    │   └── FeatureDisabled (403, typed: reason, alternative, feature_flag)
    ├── NotFound (404)
    ├── RequestTimeout (408, detail only)
    ├── Conflict (409)
    ├── Gone (410, ReplayGap)
    ├── PreconditionFailed (412, revision_conflict, retryable: If-Match named a stale ETag)
    ├── BodyTooLarge (413, detail only)
    ├── TooManyRequests (429, RateLimited, retryable, Retry-After)
    ├── Invalid (422, ValueError)
    ├── ResultContractError (500, attrs.code = invalid_operation_result)
    ├── Unreachable (502)
    ├── KubernetesUnavailable (503, retryable, Retry-After when the apiserver advised one)
    └── OperationTimeout (504, retryable)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.errors import SparkrunError

__all__ = [
    "BodyTooLarge",
    "Conflict",
    "DaemonError",
    "FeatureDisabled",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubernetesUnavailable",
    "NotFound",
    "OperationTimeout",
    "PreconditionFailed",
    "RequestTimeout",
    "ResultContractError",
    "TooManyRequests",
    "Unauthenticated",
    "Unreachable",
    "error_body",
]

#: The most characters of a daemon error's ``detail`` (and so of a job's ``error.message``).
MAX_DETAIL: Final = MESSAGE_MAX


class DaemonError(SparkrunError):
    """An error with an HTTP status and the daemon's JSON envelope."""

    status: ClassVar[int] = 500
    type_name: ClassVar[str] = "InternalError"
    #: Whether the body carries the typed ``error`` object (401/403/408/413 carry only detail).
    typed: ClassVar[bool] = True
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        detail: str,
        *,
        attrs: Mapping[str, Any] | None = None,
        retryable: bool | None = None,
        type_name: str | None = None,
    ) -> None:
        detail = clip(str(detail), MAX_DETAIL)
        super().__init__(detail)
        self.detail = detail
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.retryable = self.default_retryable if retryable is None else retryable
        self.error_type = type_name or self.type_name

    def body(self) -> dict[str, Any]:
        """The response body."""
        if not self.typed:
            return {"detail": self.detail}
        return {
            "detail": self.detail,
            "error": {"type": self.error_type, "retryable": self.retryable, "attrs": self.attrs},
        }

    def headers(self) -> dict[str, str]:
        """Extra response headers."""
        return {}


class Unauthenticated(DaemonError):
    status = 401
    type_name = "AuthenticationError"
    typed = False

    def __init__(self, detail: str = "Authentication required") -> None:
        super().__init__(detail)

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(DaemonError):
    status = 403
    type_name = "PermissionError"
    typed = False

    def __init__(self, detail: str = "Insufficient permission") -> None:
        super().__init__(detail)


class FeatureDisabled(Forbidden):
    """A registered operation that does not run here; the typed error says why."""

    type_name = "FeatureDisabled"
    typed = True

    def __init__(self, detail: str, *, attrs: Mapping[str, Any]) -> None:
        DaemonError.__init__(self, detail, attrs=attrs)


class NotFound(DaemonError):
    status = 404
    type_name = "LookupError"


class RequestTimeout(DaemonError):
    status = 408
    typed = False


class Conflict(DaemonError):
    status = 409
    type_name = "Conflict"


class Gone(DaemonError):
    status = 410
    type_name = "ReplayGap"


class PreconditionFailed(DaemonError):
    """412: ``If-Match`` named an ETag the object no longer has (ADR 0049); ``attrs`` say the
    current ``etag``, the ``if_match`` given, the ``kind`` and ``name``. Retryable: read the
    object again (its matching query answers the ETag) and decide again."""

    status = 412
    type_name = "revision_conflict"
    default_retryable = True


class BodyTooLarge(DaemonError):
    status = 413
    typed = False


class TooManyRequests(DaemonError):
    """429: a quota or rate limit of the caller (``Retry-After`` says when to try again)."""

    status = 429
    type_name = "RateLimited"
    default_retryable = True

    def __init__(
        self, detail: str, *, retry_after: float = 1.0, attrs: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(detail, attrs=attrs)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class Invalid(DaemonError):
    status = 422
    type_name = "ValueError"


class ResultContractError(DaemonError):
    type_name = "ResultContractError"
    code: ClassVar[str] = "invalid_operation_result"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, attrs={"code": self.code})


class Unreachable(DaemonError):
    status = 502
    type_name = "HostsUnreachable"


class KubernetesUnavailable(DaemonError):
    """503: the Kubernetes API did not answer (timeout, refused, reset, 5xx) or throttled the daemon
    (429, after the client's own retries): the daemon's backing store, not the caller, is at fault;
    retryable. The apiserver's advised delay is ``attrs.retry_after_seconds``, never a
    ``Retry-After`` header: clients such as client-go resend any verb, POST included, on a 5xx
    that carries one, and an operation may have written before the call that was throttled."""

    status = 503
    type_name = "KubernetesUnavailable"
    default_retryable = True

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        attrs = {} if retry_after is None else {"retry_after_seconds": max(1, math.ceil(retry_after))}
        super().__init__(detail, attrs=attrs)
        self.retry_after = retry_after


class OperationTimeout(DaemonError):
    status = 504
    type_name = "TimeoutError"
    default_retryable = True


def error_body(error: BaseException) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and headers for any exception; unexpected ones become an opaque 500."""
    if isinstance(error, DaemonError):
        return error.status, error.body(), error.headers()
    internal = DaemonError("Operation failed; see daemon diagnostics")
    return internal.status, internal.body(), {}
