"""The one shape of a resource controller's pass: observe -> plan -> execute -> one status write -> events.

:func:`run_pass` runs the steps of one pass in this order and nothing else; each controller
supplies its steps (``docs/architecture.md``, "Controller shape"):

1. ``observe()``: what the planner looks at (from the object, kopf's indexes or API reads), or
   ``None`` when there is nothing to do (the object is being deleted): the pass ends there;
2. ``plan(observed)``: pure, no I/O: the actions and the status;
3. ``execute(observed, plan)``: carries out the actions and returns the :class:`Outcome`: the
   status to write (folding in what the apiserver refused), the events and when to look again;
4. ``write_status(outcome)``: the pass's one status write (skipped when ``outcome.write`` is
   false: the object is going); whether it wrote;
5. ``emit_events(outcome, wrote)``: after the write succeeded or was not needed (a failed
   write raises and emits nothing): the Ready gauge and the Kubernetes Events.

The pass returns ``outcome.requeue`` for :func:`.loop.run_loop` (seconds until the next pass
is needed regardless of events). Errors propagate: the loop decides what a conflict or an
unavailable apiserver means.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import kopf
from pydantic import BaseModel

from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.status import write_status
from sparkrun_operator.k8s.resources import Resource

ObservedT = TypeVar("ObservedT")
PlanT = TypeVar("PlanT")
StatusT = TypeVar("StatusT", bound=BaseModel)


@dataclass(frozen=True, kw_only=True)
class Event:
    """A Kubernetes Event to emit on the object once its status is written."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Outcome(Generic[StatusT]):
    """What a pass leaves once its actions are carried out: the status (written unless
    ``write`` is false), the events to emit after it, and when to look again."""

    status: StatusT
    write: bool = True
    events: tuple[Event, ...] = ()
    requeue: float | None = None


OutcomeT = TypeVar("OutcomeT", bound="Outcome[Any]")


async def run_pass(
    *,
    observe: Callable[[], Awaitable[ObservedT | None]],
    plan: Callable[[ObservedT], PlanT],
    execute: Callable[[ObservedT, PlanT], Awaitable[OutcomeT]],
    write_status: Callable[[OutcomeT], Awaitable[bool]],
    emit_events: Callable[[OutcomeT, bool], None],
) -> float | None:
    """One pass: observe, plan, execute, write the status once, emit; the requeue delay."""
    observed = await observe()
    if observed is None:
        return None
    planned = plan(observed)
    outcome = await execute(observed, planned)
    wrote = await write_status(outcome) if outcome.write else False
    emit_events(outcome, wrote)
    return outcome.requeue


def writes_status(
    ctx: Memo, resource: Resource, body: Mapping[str, Any]
) -> Callable[[Outcome[Any]], Awaitable[bool]]:
    """The write step of a controller whose pass writes its object's own status subresource in
    one merge patch (:func:`.status.write_status`; a cluster-scoped kind has no namespace)."""
    meta = body.get("metadata") or {}
    name, namespace = str(meta["name"]), meta.get("namespace")

    async def write(outcome: Outcome[Any]) -> bool:
        return await write_status(
            ctx,
            resource=resource,
            name=name,
            namespace=str(namespace) if namespace else None,
            current=body.get("status"),
            desired=outcome.status,
        )

    return write


async def nothing_to_execute(observed: object, planned: StatusT) -> Outcome[StatusT]:
    """The execute step of a controller whose plan is its status alone (no children)."""
    return Outcome(status=planned)


def no_events(outcome: object, wrote: bool) -> None:
    """The emit step of a controller that reports through its status alone."""


def post(body: kopf.Body, events: Iterable[Event]) -> None:
    """Emit ``events`` on ``body`` (kopf posts them in the background)."""
    for event in events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
