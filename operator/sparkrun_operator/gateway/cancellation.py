"""Cancellation: the in-flight requests ``POST /v1/cancel/{id}`` can stop, per caller.

Every inference request is registered under (caller, request id) while it runs; ids are scoped
to their caller (ADR 0019: the key's digest, or the Kubernetes user's uid with
``--auth=kubernetes``; one caller without authentication), so one caller cannot cancel
another's request, even knowing its id. Cancelling cancels the
request's task, which closes the upstream response (and with it the upstream connection, which
makes the engine abort the generation); the dispatch answers the request as cancelled.

A service below the route handlers: it knows requests (:class:`~.request.Ctx`), never a handler or
the application.
"""

from __future__ import annotations

from .request import Ctx

Slot = tuple[str, str]
"""(caller, request id)."""


class Cancellation:
    """The registry of cancellable requests of one gateway."""

    def __init__(self) -> None:
        self._running: dict[Slot, Ctx] = {}

    def track(self, ctx: Ctx) -> Slot:
        """Register ``ctx`` until :meth:`forget` (a later request with its id replaces it)."""
        slot = (ctx.caller, ctx.rid)
        self._running[slot] = ctx
        return slot

    def forget(self, slot: Slot, ctx: Ctx) -> None:
        if self._running.get(slot) is ctx:
            del self._running[slot]

    def cancel(self, caller: str, command_id: str) -> bool:
        """Cancel ``caller``'s in-flight request ``command_id``; False when it has none."""
        target = self._running.get((caller, command_id))
        if target is None or target.finished or target.task is None or target.cancel_reason is not None:
            return False
        target.cancel_reason = "cancelled"
        target.task.cancel()
        return True
