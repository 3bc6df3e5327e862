"""Day two's operations on one workload or cluster, shared by the daemon API and the CLI (ADR 0046,
0048): read a workload's kept revisions, roll back (pin ``spec.rollout.revision``), unpin, and
approve pending drift (``spec.rollout.approve``, an InferenceCluster's ``spec.approve``).

Every function takes a :class:`~sparkrun_operator.k8s.client.Kube` that writes as the caller's
field manager (``sparkrun-daemon-api`` for the daemon API's executors, ``sparkrun-k8s`` for the
CLI) and a namespace; the callers authorize first (the daemon's scope rule, or the user's own
Kubernetes rights for the CLI). Writes are JSON patches whose first operation tests
``metadata.generation``: a spec change made between the read and the write refuses the write
(409, reason ``changed``), never a lost write, while the operator's status writes, which leave the
generation alone, do not (a ``resourceVersion`` precondition would lose to them every few
seconds while pods move). Refusals are the daemon's typed errors
(:mod:`sparkrun_operator.ops.errors`), with ``attrs.reason`` naming the case:

==================== ===== ==========================================================================
reason               HTTP  when
==================== ===== ==========================================================================
(LookupError)        404   no such workload or cluster
revision_not_kept    404   the rollback's revision is not a kept revision of the workload
no_previous_revision 409   a rollback without a revision, and status.history has no previous one
rollback_refused     409   the revision ran as a ServiceAccount, or read a Secret or ConfigMap, the
                           spec no longer names, or spec.state is Sleeping and it ran without sleep
                           mode (the operator would not roll back to it)
no_drift             409   apply_drift, and status.drift is empty (or the cluster has none)
drift_unresolved     409   the drift's desired settings cannot be resolved (no hash to approve)
recipe_revision_pin  409   the drift is spec.recipe.revision's pin: edit that field instead
not_on_request       409   apply_drift on a workload that applies changes Immediately and is unpinned
stale_revision       409   the caller's hash is not the pending drift's (it changed since it looked)
changed              409   the spec changed between the read and the write
==================== ===== ==========================================================================

Given ``if_match`` (the daemon API's If-Match, ADR 0049), every write also tests
``metadata.resourceVersion``, and a write that finds the object changed, or an operation that
writes nothing on an object no longer at it, is ``PreconditionFailed`` (412 ``revision_conflict``).

The ControllerRevisions are the operator's (the chart grants tenants no write on them); a
revision is listed, and may be a rollback target, only when the operator would serve it: read
with the planner's own functions (``plan/workload/revisions.py`` ``revision_from`` and
``usable``: controlled by the workload's UID, ``data`` a
:class:`~sparkrun_operator.api.history.ServingRevision` whose frozen inputs read back).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from sparkrun_operator.api.history import (
    MAX_HISTORY_LIMIT,
    ClusterDrift,
    DriftStatus,
    HistoryStatus,
)
from sparkrun_operator.api.pluginops import (
    ApplyDriftResult,
    ClusterApplyDriftResult,
    HistoryResult,
    RevisionEntry,
    RollbackResult,
)
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONTROLLER_REVISIONS, Resource
from sparkrun_operator.ops import ifmatch, kube
from sparkrun_operator.ops.errors import Conflict, NotFound
from sparkrun_operator.plan.workload import revisions
from sparkrun_operator.plan.workload.model import ObservedRevision
from sparkrun_operator.render import keys

__all__ = [
    "apply_cluster_drift",
    "apply_drift",
    "find_cluster",
    "find_workload",
    "history",
    "kept_revisions",
    "rollback",
]

#: The most revisions read for one workload (the operator keeps at most the history limit plus the
#: pinned one and those with live JobSets).
MAX_REVISIONS_READ: Final = 2 * MAX_HISTORY_LIMIT
#: The most ControllerRevisions labelled with the workload looked at (pages of
#: :data:`_PAGE`): a StatefulSet whose pods carry the workload label has its own, and a namespace
#: may hold many; what is beyond is not read.
MAX_REVISIONS_SCANNED: Final = 2000
_PAGE: Final = 250


def _refuse(detail: str, reason: str, **attrs: Any) -> Conflict:
    return Conflict(detail, attrs={"reason": reason, **attrs})


async def find_workload(rest: Kube, namespace: str, ref: str) -> dict[str, Any]:
    """The InferenceWorkload ``ref`` names in ``namespace``: by name, else by its workload id
    (``status.workloadId``, the daemon's handle). ``NotFound`` when neither finds one."""
    if "_" not in ref and "/" not in ref:
        found = await rest.get(kube.WORKLOADS, kube.check_name(ref, "workload"), namespace)
        if found is not None:
            return found
    else:
        for workload in await rest.list(kube.WORKLOADS, namespace):
            if kube.workload_id_of(workload) == ref:
                return workload
    raise NotFound(f"InferenceWorkload {ref} not found in namespace {namespace}")


async def find_cluster(rest: Kube, name: str) -> dict[str, Any]:
    """The InferenceCluster ``name`` (``NotFound`` when absent)."""
    found = await rest.get(kube.CLUSTERS, kube.check_name(name, "cluster"))
    if found is None:
        raise NotFound(f"InferenceCluster {name} not found")
    return found


async def kept_revisions(
    rest: Kube, workload: Mapping[str, Any]
) -> list[tuple[dict[str, Any], revisions.Kept]]:
    """The workload's revisions the operator would serve, ``(object, kept)``, oldest first: read
    as the planner reads them (``revisions.revision_from``: a number in range, the controller
    owner an InferenceWorkload; ``revisions.usable``: owned by this workload's UID, not being
    deleted, a ServingRevision whose frozen inputs read back and give valid child names). One
    the operator would not serve is neither listed nor a rollback target."""
    meta = workload.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    owned: dict[int, tuple[dict[str, Any], ObservedRevision]] = {}
    selector = f"{keys.LABEL_WORKLOAD}={name}"
    for obj in await _labelled(rest, meta.get("namespace"), selector) if uid else ():
        found = revisions.revision_from(obj)
        if found is not None and found.owner == uid and found.data is not None and not found.deleting:
            owned[found.number] = (obj, found)
    kept: list[tuple[dict[str, Any], revisions.Kept]] = []
    for number in sorted(owned)[-MAX_REVISIONS_READ:]:
        obj, found = owned[number]
        usable = revisions.usable(found, workload=name, uid=uid)
        if usable is not None:
            kept.append((obj, usable))
    return kept


async def _labelled(rest: Kube, namespace: str | None, selector: str) -> list[dict[str, Any]]:
    """The ControllerRevisions ``selector`` matches, page by page, at most
    :data:`MAX_REVISIONS_SCANNED` of them."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while len(items) < MAX_REVISIONS_SCANNED:
        page = await rest.request(
            "GET",
            CONTROLLER_REVISIONS.path(namespace),
            query={"labelSelector": selector, "limit": _PAGE, "continue": token},
        )
        found = (page or {}).get("items") or []
        items.extend(obj for obj in found[:_PAGE] if isinstance(obj, dict))
        token = ((page or {}).get("metadata") or {}).get("continue") or None
        if not token:
            break
    return items[:MAX_REVISIONS_SCANNED]


def _entry(obj: Mapping[str, Any], kept: revisions.Kept, *, current: bool) -> RevisionEntry:
    number, data = kept.number, kept.data
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return RevisionEntry(
        number=number,
        name=str(meta.get("name", ""))[:253],
        hash=data.hash,
        cause=data.cause,
        rollback_of=data.rollback_of,
        created=meta.get("creationTimestamp"),
        served_from=(annotations.get(keys.ANNOTATION_SERVED_FROM) or None)
        and str(annotations[keys.ANNOTATION_SERVED_FROM])[:64],
        served_until=(annotations.get(keys.ANNOTATION_SERVED_UNTIL) or None)
        and str(annotations[keys.ANNOTATION_SERVED_UNTIL])[:64],
        current=current,
        recipe=data.recipe,
        changes=data.changes,
    )


def _rollout(workload: Mapping[str, Any]) -> dict[str, Any]:
    return dict(((workload.get("spec") or {}).get("rollout")) or {})


def _status_part(
    workload: Mapping[str, Any], key: str, model: type[HistoryStatus] | type[DriftStatus]
) -> Any:
    """``status.<key>`` as ``model`` (``None`` when absent or not the operator's shape)."""
    raw = (workload.get("status") or {}).get(key)
    if not raw:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


async def history(rest: Kube, namespace: str, ref: str) -> HistoryResult:
    """The workload's kept revisions (the newest is current), its history and drift status."""
    return await history_of(rest, await find_workload(rest, namespace, ref))


async def history_of(rest: Kube, workload: Mapping[str, Any]) -> HistoryResult:
    """:func:`history` of a workload already read (the daemon API answers its ETag too)."""
    namespace = str(workload["metadata"].get("namespace") or "")
    kept = await kept_revisions(rest, workload)
    rollout = _rollout(workload)
    newest = kept[-1][1].number if kept else None
    return HistoryResult(
        workload=workload["metadata"]["name"],
        namespace=namespace,
        apply=rollout.get("apply") if rollout.get("apply") in ("Immediate", "OnRequest") else "Immediate",
        pinned=rollout.get("revision"),
        approved=rollout.get("approve"),
        revisions=[_entry(obj, found, current=found.number == newest) for obj, found in kept],
        history=_status_part(workload, "history", HistoryStatus),
        drift=_status_part(workload, "drift", DriftStatus),
    )


async def write_spec(
    rest: Kube,
    resource: Resource,
    obj: Mapping[str, Any],
    *,
    sets: Mapping[str, Any],
    removes: tuple[str, ...] = (),
    if_match: str | None = None,
) -> None:
    """A JSON patch of ``spec.<field>`` values (``sets``, ``None`` dropped) and removals, guarded
    by a test of ``metadata.generation``: the spec as read is the spec written over. Status writes
    (the operator's, every few seconds while pods move) leave the generation alone, so they never
    refuse the write; a spec change since the read is a :class:`Conflict` (reason ``changed``).
    ``if_match`` (the daemon API's If-Match, ADR 0049) tests ``metadata.resourceVersion`` too: any
    write since is then a ``PreconditionFailed`` (412 ``revision_conflict``)."""
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/generation", "value": meta.get("generation")}
    ]
    if if_match is not None:
        ops.insert(0, ifmatch.version_test(if_match))
    for path in removes:
        parent, _, key = path.rpartition("/")
        if key in _at(spec, parent):
            ops.append({"op": "remove", "path": f"/spec{path}"})
    for path, value in sets.items():
        parent, _, key = path.rpartition("/")
        if parent and not isinstance(_at(spec, parent, None), Mapping):
            ops.append({"op": "add", "path": f"/spec{parent}", "value": {key: value}})
        else:
            ops.append({"op": "add", "path": f"/spec{path}", "value": value})
    namespace = meta.get("namespace")
    try:
        await rest.request(
            "PATCH",
            resource.path(namespace, meta["name"]),
            body=ops,
            content_type="application/json-patch+json",
        )
    except errors.KubeInvalid as error:
        if if_match is not None and (
            moved := await ifmatch.moved(rest, resource, meta["name"], namespace, if_match)
        ):
            raise moved from error
        current = await rest.get(resource, meta["name"], namespace)
        if current is not None and current["metadata"].get("generation") == meta.get("generation"):
            raise
        raise _refuse(
            f"{resource.kind} {meta['name']} changed since it was read; read it and try again", "changed"
        ) from error


def _at(spec: Mapping[str, Any], parent: str, default: Any = ()) -> Any:
    """The value at ``parent`` (``/a/b``) under ``spec`` (``default`` when absent)."""
    node: Any = spec
    for key in filter(None, parent.split("/")):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def default_revision(workload: Mapping[str, Any]) -> int:
    """Where a rollback goes without a revision: ``status.history.previous``."""
    previous = (((workload.get("status") or {}).get("history")) or {}).get("previous") or {}
    number = previous.get("number")
    if type(number) is not int or number < 1:
        name = workload["metadata"]["name"]
        raise _refuse(
            f"InferenceWorkload {name} has no previous revision to roll back to", "no_previous_revision"
        )
    return number


async def rollback(
    rest: Kube,
    workload: Mapping[str, Any],
    *,
    revision: int | None = None,
    clear: bool = False,
    if_match: str | None = None,
) -> RollbackResult:
    """Pin ``spec.rollout.revision`` to ``revision`` (default: the previous one), which must be
    kept; with ``clear``, remove the pin. Either write removes ``spec.rollout.approve`` in the same
    patch (a rollback forgets earlier approvals). No write when the pin is already so.
    ``if_match``: the resourceVersion the workload must still be at (:func:`write_spec`)."""
    meta = workload["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    before = _rollout(workload).get("revision")
    if clear:
        target = None
    else:
        target = revision if revision is not None else default_revision(workload)
        kept = {found.number: found for _obj, found in await kept_revisions(rest, workload)}
        numbers = list(kept)
        if target not in kept:
            raise NotFound(
                f"InferenceWorkload {name} keeps no revision {target} (kept: {numbers or 'none'})",
                attrs={"reason": "revision_not_kept", "kept": numbers},
            )
        if (why := _refused(workload, target, kept[target])) is not None:
            raise _refuse(f"InferenceWorkload {name}: {why}", "rollback_refused")
    changed = before != target
    if changed:
        # NB: a rollback (or its end) forgets earlier approvals: an approve left in the spec would
        # name a hash the user approved before going back (the planner also honours one only
        # for drift it has shown)
        sets = {} if target is None else {"/rollout/revision": target}
        await write_spec(
            rest,
            kube.WORKLOADS,
            workload,
            sets=sets,
            removes=("/rollout/revision", "/rollout/approve"),
            if_match=if_match,
        )
    else:
        await ifmatch.unchanged(rest, kube.WORKLOADS, workload, if_match)
    return RollbackResult(workload=name, namespace=namespace, revision=target, before=before, changed=changed)


def _refused(workload: Mapping[str, Any], pin: int, target: revisions.Kept) -> str | None:
    """Why the operator would not make a rollback to ``target`` with the spec as it is
    (``revisions.rollback_refused``: an account or env reference the spec does not name, a
    state its settings cannot serve), said before the pin is written; ``None`` when it would
    (or the spec does not read: the operator decides then)."""
    try:
        spec = InferenceWorkloadSpec.model_validate(workload.get("spec") or {})
    except ValueError:
        return None
    return revisions.rollback_refused(pin, target.inputs, spec)


def _pending(present: bool, pending: str | None, given: str | None, what: str) -> str:
    """The hash to approve: the pending drift's, refusing a caller's stale one."""
    if not present:
        raise _refuse(f"{what} has no pending drift", "no_drift")
    if not pending:
        raise _refuse(f"{what}: the drift's desired settings cannot be resolved yet", "drift_unresolved")
    if given is not None and given != pending:
        raise _refuse(
            f"{what}: the pending drift is {pending}, not {given} (it changed since it was read)",
            "stale_revision",
            pending=pending,
        )
    return pending


async def apply_drift(
    rest: Kube, workload: Mapping[str, Any], *, revision: str | None = None, if_match: str | None = None
) -> ApplyDriftResult:
    """Approve the workload's pending drift (``spec.rollout.approve``); while a rollback pins it,
    the pin is removed in the same write (applying drift means following the spec again)."""
    meta = workload["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    what = f"InferenceWorkload {name}"
    rollout = _rollout(workload)
    drift: DriftStatus | None = _status_part(workload, "drift", DriftStatus)
    if drift is not None and drift.reason == "RecipeRevisionPinned":
        raise _refuse(
            f"{what}: spec.recipe.revision pins an older Recipe revision; edit it", "recipe_revision_pin"
        )
    pinned = rollout.get("revision")
    if rollout.get("apply") != "OnRequest" and pinned is None:
        raise _refuse(
            f"{what} applies changes Immediately and holds no rollback: nothing to approve", "not_on_request"
        )
    pending = _pending(drift is not None, drift.revision if drift is not None else None, revision, what)
    changed = rollout.get("approve") != pending or pinned is not None
    if changed:
        await write_spec(
            rest,
            kube.WORKLOADS,
            workload,
            sets={"/rollout/approve": pending},
            removes=("/rollout/revision",),
            if_match=if_match,
        )
    else:
        await ifmatch.unchanged(rest, kube.WORKLOADS, workload, if_match)
    changes = drift.changes if drift is not None else []
    return ApplyDriftResult(
        workload=name,
        namespace=namespace,
        approved=pending,
        unpinned=pinned,
        changes=changes,
        changed=changed,
    )


async def apply_cluster_drift(
    rest: Kube, cluster: Mapping[str, Any], *, revision: str | None = None, if_match: str | None = None
) -> ClusterApplyDriftResult:
    """Approve an InferenceCluster's pending drift (``spec.approve``)."""
    name = cluster["metadata"]["name"]
    raw = (cluster.get("status") or {}).get("drift")
    try:
        drift = ClusterDrift.model_validate(raw) if raw else None
    except ValidationError:
        drift = None
    pending = _pending(
        drift is not None, drift.revision if drift is not None else None, revision, f"InferenceCluster {name}"
    )
    changed = (cluster.get("spec") or {}).get("approve") != pending
    if changed:
        await write_spec(rest, kube.CLUSTERS, cluster, sets={"/approve": pending}, if_match=if_match)
    else:
        await ifmatch.unchanged(rest, kube.CLUSTERS, cluster, if_match)
    items = drift.items if drift is not None else []
    return ClusterApplyDriftResult(cluster=name, approved=pending, items=items, changed=changed)
