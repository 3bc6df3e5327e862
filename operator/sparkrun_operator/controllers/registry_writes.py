"""Carrying out a RecipeRegistry sync's plan: create, replace and delete its objects.

- create: a name taken meanwhile by an object the registry does not control is reported, never
  touched;
- replace: a PUT of the whole object with the ``resourceVersion`` it was planned from (a
  precondition: a concurrent edit makes the pass run again), keeping the metadata others set;
  the registry is the authority for the whole spec, so fields someone added go away;
- delete: with the UID precondition (a new object that reused the name is left alone).

At most :data:`PARALLEL` writes at once. What the apiserver refuses (422, 403, a namespace that
does not exist) becomes a problem in status, not a failed pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.registry import RegisteredConfigMap, RegistryProblem, RegistryRecipeEntry
from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONFIG_MAPS, Resource, resource_of
from sparkrun_operator.plan.registry import Delete, SyncPlan, Write, finish
from sparkrun_operator.recipe.trust import registry_owner
from sparkrun_operator.render.registry import RegistryRef

PARALLEL: Final = 8
_RESOURCES: Final[Mapping[str, Resource]] = {"Recipe": resource_of(RECIPE), "ConfigMap": CONFIG_MAPS}
_REFUSED: Final = (errors.KubeInvalid, errors.KubeBadRequest, errors.KubeForbidden, errors.KubeNotFound)


def _replacement(write: Write) -> dict[str, Any]:
    """``write.body`` over the live object: its metadata kept (kopf's annotations, others'
    labels), ours set, its resourceVersion the precondition."""
    assert write.live is not None
    live_meta = dict(write.live.get("metadata") or {})
    want = write.body["metadata"]
    meta = {
        **live_meta,
        "labels": {**(live_meta.get("labels") or {}), **want["labels"]},
        "annotations": {**(live_meta.get("annotations") or {}), **want["annotations"]},
        "ownerReferences": want["ownerReferences"],
    }
    meta.pop("managedFields", None)
    body = {k: v for k, v in write.body.items() if k != "metadata"}
    return {**body, "metadata": meta}


async def _write(kube: Kube, ref: RegistryRef, write: Write) -> dict[str, Any]:
    resource = _RESOURCES[write.resource]
    if write.live is not None:
        return await kube.replace(resource, write.name, _replacement(write), ref.namespace)
    try:
        return await kube.create(resource, write.body, ref.namespace)
    except errors.KubeAlreadyExists:
        found = await kube.get(resource, write.name, ref.namespace)
        owner = registry_owner(found) if found is not None else None
        if found is None or owner is None or owner[1] != ref.uid:
            raise _Taken() from None
        return await kube.replace(
            resource, write.name, _replacement(Write(write.resource, write.body, found)), ref.namespace
        )


class _Taken(SparkrunError):
    """The name is taken by an object the registry does not control."""


async def _delete(kube: Kube, ref: RegistryRef, delete: Delete) -> None:
    # NB: a conflict is a new object under the name (not ours to delete) or one changed meanwhile
    with contextlib.suppress(errors.KubeConflict):
        await kube.delete(
            _RESOURCES[delete.resource], delete.name, ref.namespace, uid=delete.uid, propagation="Background"
        )


async def _bounded(jobs: list[Callable[[], Awaitable[None]]]) -> None:
    gate = asyncio.Semaphore(PARALLEL)

    async def run(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(run(job) for job in jobs))


async def carry_out(
    kube: Kube, ref: RegistryRef, planned: SyncPlan
) -> tuple[list[RegistryRecipeEntry], list[RegisteredConfigMap], list[RegistryProblem]]:
    """Write and delete what ``planned`` says; the status lists (:func:`.plan.registry.finish`)."""
    written: dict[str, dict[str, Any]] = {}
    refused: dict[tuple[str, str], str] = {}

    def writer(write: Write) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            try:
                stored = await _write(kube, ref, write)
            except _Taken:
                refused[(write.resource, write.name)] = "name taken by an object this registry does not own"
                return
            except _REFUSED as error:
                refused[(write.resource, write.name)] = f"refused by the apiserver: {clip(str(error), 1000)}"
                return
            if write.resource == "Recipe":
                written[write.name] = stored

        return job

    def deleter(delete: Delete) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            await _delete(kube, ref, delete)

        return job

    await _bounded([writer(w) for w in planned.writes])
    await _bounded([deleter(d) for d in planned.deletes])
    return finish(planned, written=written, refused=refused)
