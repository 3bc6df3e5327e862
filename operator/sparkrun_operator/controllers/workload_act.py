"""The workload controller's actions: carry out a plan (``plan/workload/``) against the API.

Serving revisions first (their JobSets are rendered from them, and wait for the next pass when
one was not made as planned), then server-side apply of the
JobSets, the Service, the NetworkPolicy (a rollout gate's InferenceBenchmark is created once),
the InferencePool and its endpoint picker's objects (:func:`_put_pool_stage`),
suspend patches, deletes with UID preconditions (highest replica first, one after the other),
the served-from/until annotations of ControllerRevisions, and the engines' sleep/wake calls. A
refusal of the apiserver (422/403) is returned for the status (``finalize``), never raised.

The pool stage (issue 30) never fails the workload (the picker's NetworkPolicy is applied
before the rest, and its Deployment not when the policy was not): a refusal of the pool or of a picker's
object, or a name another object holds (``NameTaken``: nothing is applied onto a pool or picker
object the workload does not control), is returned apart (:attr:`Executed.pool`: only
``PoolAccepted`` says it) and remembered for the planner (``Memo.pool_refusals``,
``Memo.picker_refusals``) until the object is applied; a refused delete of one is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.inferencepool import POOL_KIND
from sparkrun_operator.api.resources import INFERENCE_BENCHMARK
from sparkrun_operator.controllers import gate
from sparkrun_operator.controllers.engine import Engine
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.workload_pokes import full_key
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.resources import (
    CONTROLLER_REVISIONS,
    DEPLOYMENTS,
    INFERENCE_POOLS,
    JOBS,
    JOBSETS,
    NETWORK_POLICIES,
    ROLE_BINDINGS,
    SERVICE_ACCOUNTS,
    SERVICES,
    Resource,
    resource_of,
)
from sparkrun_operator.plan.workload import Plan
from sparkrun_operator.plan.workload.model import PoolRefusal
from sparkrun_operator.render import keys

BENCHMARKS: Resource = resource_of(INFERENCE_BENCHMARK)
#: The resource of each kind the workload planner applies or deletes.
_CHILDREN: Mapping[str, Resource] = {
    "JobSet": JOBSETS,
    "Service": SERVICES,
    "InferenceBenchmark": BENCHMARKS,
    "NetworkPolicy": NETWORK_POLICIES,
    "ControllerRevision": CONTROLLER_REVISIONS,
    # the InferencePool and its managed endpoint picker (issue 30)
    "InferencePool": INFERENCE_POOLS,
    "Deployment": DEPLOYMENTS,
    "ServiceAccount": SERVICE_ACCOUNTS,
    "RoleBinding": ROLE_BINDINGS,
    # (and the picker's NetworkPolicy, above)
    "Job": JOBS,  # a recipe's post_commands (issue 32)
}

#: How long a refusal of a picker's object (a name taken, a 403) is remembered: then the next
#: pass that plans the object looks again (one GET), so a foreign object deleted meanwhile (the
#: indexes do not see unlabelled ones) is noticed.
PICKER_RECHECK_SECONDS: Final = 60.0

log = logging.getLogger("sparkrun.operator.workload")


@dataclass
class Executed:
    """What carrying out a plan met: ``refused`` (the messages of actions the apiserver refused,
    422/403: the workload fails), ``pool`` (the pool stage's refusals and names taken, pool
    first: ``PoolAccepted`` says the first) and ``unapplied`` (kinds planned for apply that were
    not applied: the next pass waits for no watch event of them)."""

    refused: list[str] = field(default_factory=list)
    pool: list[PoolRefusal] = field(default_factory=list)
    unapplied: set[str] = field(default_factory=set)


async def execute(ctx: Memo, p: Plan, *, namespace: str) -> Executed:
    """Carry out ``p``'s actions; what the apiserver refused."""
    done = Executed()

    async def guarded(coro: Any, what: str, *, pool: bool = False) -> None:
        try:
            async with ctx.write_gate.slot(gate.ACTION):
                await coro
        except errors.KubeConflict:
            pass  # a UID precondition failed: the object was replaced; the next pass sees it
        except (errors.KubeInvalid, errors.KubeForbidden) as error:
            if pool:  # NB: the pool stage never fails the workload
                log.warning("%s/%s not deleted: %s", namespace, what, clip(error.message))
                return
            quiet = what.startswith("ControllerRevision ")
            done.refused.append(f"{what}: {refusal(error) if quiet else error.message}")

    # NB: a new serving revision first: its JobSets (in p.apply) are rendered from it
    made: list[str] = []
    for doc in p.revisions:
        await guarded(_create_revision(ctx, doc, made), f"ControllerRevision {doc['metadata']['name']}")
    # NB: a revision not made as planned (refused, or another pass made that number with other
    # data): its JobSets would run settings no revision keeps; the next pass plans from the index
    apply = [d for d in p.apply if d["kind"] != "JobSet" or len(made) == len(p.revisions)]
    await asyncio.gather(
        *(
            guarded(_put(ctx, doc), f"{doc['kind']} {doc['metadata']['name']}")
            for doc in apply
            if _pool_stage(doc) is None
        ),
        _put_pool_stage(ctx, [d for d in apply if _pool_stage(d) is not None], done),
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
        # NB: the pool stage's objects have nothing to wait for (a pool's foreground delete would
        # also wait for the garbage collector to learn the CRD's resource)
        propagation = "Background" if d.kind == "ControllerRevision" or d.pool else "Foreground"
        await guarded(
            ctx.kube.delete(_CHILDREN[d.kind], d.name, namespace, uid=d.uid, propagation=propagation),
            f"{d.kind} {d.name}",
            pool=d.pool,
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
    return done


#: The reason of a :class:`NameTaken` refusal (the planner reads it in the refused messages).
NAME_TAKEN = "AlreadyExists"


class NameTaken(errors.KubeInvalid):
    """A serving revision's, pool's or picker object's name is another object's
    (:func:`_create_revision`, :func:`_check_controlled`); its message is ours."""


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


def _pool_stage(doc: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(namespace, workload)`` of an InferencePool or one of its picker's objects (their
    :data:`~sparkrun_operator.render.keys.LABEL_INFERENCE_POOL`), else ``None``."""
    meta = doc["metadata"]
    workload = (meta.get("labels") or {}).get(keys.LABEL_INFERENCE_POOL)
    return None if workload is None else (str(meta["namespace"]), str(workload))


async def _put_pool_stage(ctx: Memo, docs: list[Mapping[str, Any]], done: Executed) -> None:
    """Apply the pool and the picker's objects, each only where no object of its name exists
    that the workload does not control. The picker's are all looked at first and none is
    applied when one name is taken (nor the pool): its pods would run as someone else's
    ServiceAccount, or be reached through someone else's Service. The picker's NetworkPolicy
    goes first, and its Deployment not when the policy was not applied. Nothing is raised:
    refusals go into ``done`` and the memos (:func:`_refused`)."""
    picker = [d for d in docs if d["kind"] != POOL_KIND]

    async def free(doc: Mapping[str, Any]) -> bool:
        try:
            async with ctx.write_gate.slot(gate.PROGRESS):  # NB: after every serving write
                await _check_controlled(ctx, _CHILDREN[doc["kind"]], doc)
        except NameTaken as error:
            _refused(ctx, doc, error, done)
            return False
        except (errors.KubeInvalid, errors.KubeForbidden) as error:
            _refused(ctx, doc, error, done)  # NB: a GET refused (403)
            return False
        return True

    if not all(await asyncio.gather(*(free(doc) for doc in picker))):
        # NB: nor the pool, which would name the picker's Service (someone else's) to gateways
        done.unapplied.update(str(doc["kind"]) for doc in docs)
        return
    # NB: the picker's NetworkPolicy first, and no Deployment when it was not applied: its pods
    # never run open to every pod of the cluster
    fences = [d for d in docs if d["kind"] == "NetworkPolicy"]
    fenced = all(await asyncio.gather(*(_put_pool_object(ctx, doc, done) for doc in fences)))
    rest = [d for d in docs if d["kind"] != "NetworkPolicy" and (fenced or d["kind"] != "Deployment")]
    if not fenced:
        done.unapplied.add("Deployment")
    await asyncio.gather(*(_put_pool_object(ctx, doc, done) for doc in rest))


async def _put_pool_object(ctx: Memo, doc: Mapping[str, Any], done: Executed) -> bool:
    """Apply one pool-stage object (the pool after :func:`_check_controlled`: the picker's were
    looked at together); a refusal is remembered (:func:`_refused`), an earlier one of the
    object forgotten once it is applied. Whether it was applied."""
    key = _pool_stage(doc)
    assert key is not None
    kind = str(doc["kind"])
    try:
        async with ctx.write_gate.slot(gate.PROGRESS):  # NB: after every serving write
            if kind == POOL_KIND:
                await _check_controlled(ctx, _CHILDREN[kind], doc)
            await ctx.kube.as_manager(keys.POOL_MANAGER).apply(_CHILDREN[kind], doc)
    except errors.KubeConflict:
        done.unapplied.add(kind)  # NB: as any child's: the next pass sees what changed
        return False
    except (errors.KubeInvalid, errors.KubeForbidden) as error:
        _refused(ctx, doc, error, done)
        return False
    if kind == POOL_KIND:
        ctx.pool_refusals.pop(key, None)
        return True
    remembered = ctx.picker_refusals.get(key)
    if remembered is not None:
        remembered.pop(kind, None)
        if not remembered:
            del ctx.picker_refusals[key]
    return True


def _refused(ctx: Memo, doc: Mapping[str, Any], error: errors.KubeError, done: Executed) -> None:
    """Remember that the apiserver refused a pool-stage object (or that its name is taken) as it
    was rendered (its hash), for the planner, which reports it and does not apply it again (the
    pool until its rendering changes, a picker's object for :data:`PICKER_RECHECK_SECONDS`); and
    poke the workload's next pass, which plans from what is remembered."""
    key = _pool_stage(doc)
    assert key is not None
    meta = doc["metadata"]
    kind = str(doc["kind"])
    found = PoolRefusal(
        hash=str((meta.get("annotations") or {}).get(keys.ANNOTATION_POOL_HASH, "")),
        message=clip(error.message),
        kind=kind,
        name=str(meta["name"]),
        taken=isinstance(error, NameTaken),
        since=time.monotonic(),
    )
    done.pool.insert(0 if kind == POOL_KIND else len(done.pool), found)
    done.unapplied.add(kind)
    log.info("%s/%s: %s %s not applied: %s", key[0], key[1], kind, found.name, found.message)
    if kind != POOL_KIND:
        ctx.picker_refusals.setdefault(key, {})[kind] = found
    elif not found.taken:
        # NB: a pool of that name someone else controls is in the (unfiltered) pool index
        ctx.pool_refusals[key] = found
    ctx.triggers.poke(full_key(*key))


def picker_refusals(ctx: Memo, key: tuple[str, str], now: float) -> tuple[PoolRefusal, ...]:
    """The refusals of workload ``key``'s picker objects recorded less than
    :data:`PICKER_RECHECK_SECONDS` before ``now`` (``time.monotonic()``); older ones are
    forgotten: the next pass that plans the object looks again."""
    remembered = ctx.picker_refusals.get(key)
    if not remembered:
        return ()
    recent = {kind: r for kind, r in remembered.items() if now - r.since < PICKER_RECHECK_SECONDS}
    if not recent:
        del ctx.picker_refusals[key]
    elif len(recent) != len(remembered):
        ctx.picker_refusals[key] = recent
    return tuple(recent.values())


async def _check_controlled(ctx: Memo, resource: Resource, doc: Mapping[str, Any]) -> None:
    """Refuse to apply an InferencePool or a picker object onto one of that name the workload
    does not control (another product's pool, a Deployment someone else made): server-side apply
    with force would take it over. One GET, only when the planner applies (its hash changed)."""
    meta = doc["metadata"]
    found = await ctx.kube.get(resource, meta["name"], meta["namespace"])
    if found is None:
        return
    owner = (meta.get("ownerReferences") or [{}])[0].get("uid")
    refs = (found.get("metadata") or {}).get("ownerReferences") or ()
    if not any(isinstance(r, Mapping) and r.get("controller") and r.get("uid") == owner for r in refs[:16]):
        raise NameTaken(
            f"the name is taken by a {resource.kind} this workload does not control; it is left alone",
            status=409,
            reason=NAME_TAKEN,
        )


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
                reason=NAME_TAKEN,
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
