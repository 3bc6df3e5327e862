"""The one status write of every controller.

- :func:`write_status`: one merge patch of the status subresource, skipped when nothing
  changed (idle objects cost no API writes); top-level fields that disappeared are nulled.
- :func:`current_status` reads a status back as its model; :class:`StatusMemory` remembers what
  a controller last wrote, so a pass compares against its own write, not a stale cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import Resource

S = TypeVar("S", bound=BaseModel)


def current_status(body: Mapping[str, Any], model: type[S]) -> S:
    """The object's status as ``model``, or a fresh one when it does not parse (a hand-edited
    status: the planner starts over rather than failing the pass)."""
    try:
        return model.model_validate(body.get("status") or {})
    except ValueError:
        return model()


def status_patch(current: Mapping[str, Any] | None, desired: BaseModel) -> dict[str, Any] | None:
    """The merge patch turning ``current`` (the raw status) into ``desired``; ``None`` if equal.

    Compared after normalising ``current`` through the same model, so formatting differences
    (timestamps, omitted defaults) never cause a write.
    """
    wire = desired.model_dump(by_alias=True, exclude_none=True, mode="json")
    normalised: dict[str, Any] | None
    try:
        normalised = (
            type(desired)
            .model_validate(dict(current))
            .model_dump(by_alias=True, exclude_none=True, mode="json")
            if current
            else {}
        )
    except ValueError:
        normalised = None
    if normalised == wire:
        return None
    patch: dict[str, Any] = _nulling(current or {}, wire)
    return patch


def _nulling(current: Mapping[str, Any], wire: dict[str, Any]) -> dict[str, Any]:
    """``wire`` with ``None`` for every key of ``current`` it lacks, at every depth where both
    hold an object: a merge patch merges nested objects, so a field that went away inside one
    (``status.scaling.wake`` once a wake ended) stays unless it is nulled."""
    patch: dict[str, Any] = {}
    for key, value in wire.items():
        before = current.get(key)
        patch[key] = (
            _nulling(before, value) if isinstance(before, Mapping) and isinstance(value, dict) else value
        )
    for key in current:
        if key not in wire:
            patch[key] = None
    return patch


async def write_status(
    ctx: Memo,
    *,
    resource: Resource,
    name: str,
    namespace: str | None,
    current: Mapping[str, Any] | None,
    desired: BaseModel,
) -> bool:
    """Write ``desired`` as the status when it differs from ``current``; whether it wrote."""
    patch = status_patch(current, desired)
    if patch is None:
        return False
    try:
        await ctx.kube.merge_patch(resource, name, {"status": patch}, namespace, subresource="status")
    except errors.KubeNotFound:
        return False  # deleted meanwhile: nothing to report on
    return True


class StatusMemory:
    """The last status one object's loop wrote, so that a pass running before the watch has
    delivered that write does not write the same status again.

    With ``version`` (the ``resourceVersion`` of the object the pass looked at), a repeat is
    only skipped while the object is still the one the last write was planned from: once the
    watch delivered anything newer (our write, or someone else's), ``current`` is compared.
    """

    def __init__(self, *, patience: float = 10.0) -> None:
        self.patience = patience
        self.wire: dict[str, Any] | None = None
        self.at = 0.0
        self.version: str | None = None

    async def write(
        self,
        ctx: Memo,
        *,
        resource: Resource,
        name: str,
        namespace: str | None,
        current: Mapping[str, Any] | None,
        desired: BaseModel,
        version: str | None = None,
    ) -> bool:
        """Like :func:`write_status`, skipping a repeat of a write younger than ``patience``."""
        wire = desired.model_dump(by_alias=True, exclude_none=True, mode="json")
        now = asyncio.get_running_loop().time()
        if wire == self.wire and now - self.at < self.patience and version == self.version:
            return False
        wrote = await write_status(
            ctx, resource=resource, name=name, namespace=namespace, current=current, desired=desired
        )
        if wrote:
            self.wire, self.at, self.version = wire, now, version
        return wrote
