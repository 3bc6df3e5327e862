"""What an operation executor gets: Kubernetes access, settings, identity, feedback and prompts.

An executor is ``async def run(ctx: OperationContext, arguments: dict) -> result``. It acts on
Kubernetes resources through ``ctx.rest`` in ``ctx.settings.namespace``, reports progress with
:meth:`OperationContext.feedback` (job events; dropped for queries), asks the caller with
:meth:`OperationContext.ask` (jobs only: a query has no input channel and the call raises
``Invalid``), and returns a JSON value that must satisfy the operation's result schema (the
runner checks it). It raises :class:`~sparkrun_operator.ops.errors.DaemonError` subclasses for
expected failures; anything else is reported as an internal error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.settings import Settings


class Prompter(Protocol):
    async def __call__(self, kind: str, message: str, *, default: Any = None) -> Any: ...


async def _no_events(kind: str, data: Mapping[str, Any]) -> None:
    return None


@dataclass
class OperationContext:
    """One invocation's view of the world."""

    rest: Kube
    settings: Settings
    principal: str
    manager: str = "daemon"
    operation: str = ""
    #: The DaemonJob (``None`` for queries).
    job_id: str | None = None
    job_uid: str | None = None
    #: The principal's full identity (groups included), for SubjectAccessReviews of what it may
    #: do outside the API's namespace (``ops.authz.require_access``); ``None``: unknown.
    user: UserInfo | None = None
    #: The resourceVersion the job's write of its target must still find (the DaemonJob's
    #: ``spec.ifMatch``, ADR 0049; ``ops/ifmatch.py``); ``None``: an unconditional write.
    if_match: str | None = None
    #: Set by a query that answers one object: its ETag (``"<resourceVersion>"``), which the daemon
    #: API sends as the ``ETag`` header (``plugins.sparkrun-k8s.objects.get``, ``workloads.history``).
    etag: str | None = None
    emit: Callable[[str, Mapping[str, Any]], Awaitable[None]] = _no_events
    prompt: Prompter | None = None
    clock: Callable[[], dt.datetime] = field(default=utcnow)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    async def feedback(self, message: str, **fields: Any) -> None:
        """A structured progress event (``type: feedback``, ``feedback_version: 1``)."""
        await self.emit("feedback", {"feedback_version": 1, "message": message, **fields})

    async def ask(self, kind: str, message: str, *, default: Any = None) -> Any:
        """Ask the caller (approval/decision: bool; secret: str). Raises ``Invalid`` for queries."""
        if self.prompt is None:
            raise Invalid("This operation requires a worker input channel")
        return await self.prompt(kind, message, default=default)


Executor = Callable[[OperationContext, dict[str, Any]], Coroutine[Any, Any, Any]]

#: A pure check of one job operation's arguments: raises ``Invalid`` for what its executor would
#: refuse before touching the cluster, so the daemon API answers 422 at submission instead of a
#: job that fails after its 202. The executor runs the same check (a DaemonJob can be created
#: without the daemon API).
ArgumentCheck = Callable[[Mapping[str, Any], Settings], None]
