"""The workload controller's actions: carry out a plan (``plan/workload/``) against the API.

Serving revisions first (their JobSets are rendered from them, and wait for the next pass when
one was not made as planned), then server-side apply of the
JobSets, the Service and the NetworkPolicy (a rollout gate's InferenceBenchmark is created once),
suspend patches, deletes with UID preconditions (highest replica first, one after the other),
the served-from/until annotations of ControllerRevisions, and the engines' sleep/wake calls. A
refusal of the apiserver (422/403) is returned for the status (``finalize``), never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.resources import INFERENCE_BENCHMARK
from sparkrun_operator.controllers import gate
from sparkrun_operator.controllers.engine import Engine
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import (
    CONTROLLER_REVISIONS,
    JOBSETS,
    NETWORK_POLICIES,
    SERVICES,
    Resource,
    resource_of,
)
from sparkrun_operator.plan.workload import Plan
from sparkrun_operator.render import keys

BENCHMARKS: Resource = resource_of(INFERENCE_BENCHMARK)
#: The resource of each kind the workload planner applies or deletes.
_CHILDREN: Mapping[str, Resource] = {
    "JobSet": JOBSETS,
    "Service": SERVICES,
    "InferenceBenchmark": BENCHMARKS,
    "NetworkPolicy": NETWORK_POLICIES,
    "ControllerRevision": CONTROLLER_REVISIONS,
}

log = logging.getLogger("sparkrun.operator.workload")


async def execute(ctx: Memo, p: Plan, *, namespace: str) -> list[str]:
    """Carry out ``p``'s actions; the messages of actions the apiserver refused (422/403)."""
    refused: list[str] = []

    async def guarded(coro: Any, what: str) -> None:
        try:
            async with ctx.write_gate.slot(gate.ACTION):
                await coro
        except errors.KubeConflict:
            pass  # a UID precondition failed: the object was replaced; the next pass sees it
        except (errors.KubeInvalid, errors.KubeForbidden) as error:
            quiet = what.startswith("ControllerRevision ")
            refused.append(f"{what}: {refusal(error) if quiet else error.message}")

    # NB: a new serving revision first: its JobSets (in p.apply) are rendered from it
    made: list[str] = []
    for doc in p.revisions:
        await guarded(_create_revision(ctx, doc, made), f"ControllerRevision {doc['metadata']['name']}")
    # NB: a revision not made as planned (refused, or another pass made that number with other
    # data): its JobSets would run settings no revision keeps; the next pass plans from the index
    apply = [d for d in p.apply if d["kind"] != "JobSet" or len(made) == len(p.revisions)]
    await asyncio.gather(
        *(guarded(_put(ctx, doc), f"{doc['kind']} {doc['metadata']['name']}") for doc in apply)
    )
    await asyncio.gather(
        *(
            guarded(
                ctx.kube.merge_patch(JOBSETS, s.name, {"spec": {"suspend": s.suspend}}, namespace),
                f"JobSet {s.name}",
            )
            for s in p.suspend
        )
    )
    # NB: highest replica first (the planner's order), one after the other: a scale-down that
    # is interrupted leaves the lowest indices serving.
    for d in p.delete:
        propagation = "Background" if d.kind == "ControllerRevision" else "Foreground"
        await guarded(
            ctx.kube.delete(_CHILDREN[d.kind], d.name, namespace, uid=d.uid, propagation=propagation),
            f"{d.kind} {d.name}",
        )
    await asyncio.gather(
        *(
            guarded(
                _annotate_revision(ctx, a.name, dict(a.annotations), namespace),
                f"ControllerRevision {a.name}",
            )
            for a in p.annotate
        )
    )
    engine = Engine(ctx.http, timeout=ctx.config.engine_timeout)
    engine_errors = await asyncio.gather(*(engine.call(call.url, call.action) for call in p.engine))
    for message in engine_errors:
        if message:
            log.warning("%s", message)
    return refused


class NameTaken(errors.KubeInvalid):
    """A serving revision's name is another object's (:func:`_create_revision`); its message is ours."""


def refusal(error: errors.KubeError) -> str:
    """A refusal of a ControllerRevision write without the apiserver's message: that message
    quotes the object's ``data`` (``Invalid value: ...: field is immutable``), the frozen serving
    inputs with their literal env values, and it would reach the Ready condition, an Event and the
    log. Only the status, the reason and the fields named in ``details.causes`` are kept."""
    if isinstance(error, NameTaken):
        return error.message
    body = error.body if isinstance(error.body, Mapping) else {}
    details = body.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    fields: list[str] = []
    for cause in causes[:8] if isinstance(causes, list) else ():
        where = cause.get("field") if isinstance(cause, Mapping) else None
        if isinstance(where, str) and where and where[:64] not in fields:
            fields.append(where[:64])
    text = f"{error.status or 'refused'} {str(error.reason or type(error).__name__)[:64]}"
    return text + (f" (fields: {', '.join(fields)})" if fields else "")


async def _put(ctx: Memo, doc: Mapping[str, Any]) -> None:
    """Apply a JobSet, the Service or the NetworkPolicy; create a rollout gate's InferenceBenchmark
    (its spec is immutable: one made by an earlier pass, perhaps for another pod address, stays
    as it is)."""
    if doc["kind"] == "InferenceBenchmark":
        with contextlib.suppress(errors.KubeAlreadyExists):
            await ctx.kube.create(BENCHMARKS, doc)
        return
    await ctx.kube.apply(_CHILDREN[doc["kind"]], doc)


async def _create_revision(ctx: Memo, doc: Mapping[str, Any], made: list[str]) -> None:
    """Make a serving revision's ControllerRevision, by server-side apply.

    NB: not a POST: the apiserver compares a ControllerRevision's ``data`` byte for byte on every
    later write, and re-encodes it (compact, HTML-escaped) when it applies a patch; data created
    from our own JSON encoding would then read as changed, and the served-from/until annotations
    could never be set ("field is immutable"). Applied, it is stored in the apiserver's encoding.
    Its name is deterministic (``<workload>-<number>``): when that number exists with other data
    (another pass or operator made it), the apiserver refuses the change and the next pass plans
    from what the index shows. Its name goes into ``made`` when it holds this pass's settings."""
    meta = doc["metadata"]
    try:
        await ctx.kube.apply(CONTROLLER_REVISIONS, doc)
    except errors.KubeInvalid:
        found = await ctx.kube.get(CONTROLLER_REVISIONS, meta["name"], meta["namespace"])
        if found is None:
            raise
        owner = meta["ownerReferences"][0]["uid"]
        refs = (found.get("metadata") or {}).get("ownerReferences") or ()
        if not any(isinstance(r, Mapping) and r.get("controller") and r.get("uid") == owner for r in refs):
            # NB: not another pass's: a name the workload does not own; the next pass cannot see
            # it (not labelled as the workload's), so say so rather than retry in silence
            raise NameTaken(
                "the name is taken by a ControllerRevision this workload does not own; delete it",
                status=409,
                reason="AlreadyExists",
            ) from None
        labels = (found.get("metadata") or {}).get("labels") or {}
        if labels.get(keys.LABEL_REVISION) != meta["labels"][keys.LABEL_REVISION]:
            return  # NB: another pass made this number with other settings
    made.append(meta["name"])


async def _annotate_revision(ctx: Memo, name: str, annotations: dict[str, str], namespace: str) -> None:
    """Set served-from/until on a ControllerRevision (gone meanwhile: nothing to stamp). They
    only inform: a revision the apiserver will not annotate (one made by hand, whose ``data``
    it re-encodes: see :func:`_create_revision`) is logged, not a refused child."""
    try:
        await ctx.kube.merge_patch(
            CONTROLLER_REVISIONS, name, {"metadata": {"annotations": annotations}}, namespace
        )
    except errors.KubeNotFound:
        pass
    except errors.KubeInvalid as error:
        log.warning("ControllerRevision %s/%s not annotated: %s", namespace, name, refusal(error))
