"""Raw InferencePools and endpoint-picker objects -> the workload planner's observed records
(issue 30). Pure and total, like ``plan/observe.py`` (which re-exports these): a malformed object
gives ``None``, and everything read from a pool's status (a gateway wrote it) is bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from sparkrun_operator.api.clip import SERVER_TEXT_MAX, clip
from sparkrun_operator.api.meta import GROUP
from sparkrun_operator.plan.workload.model import ObservedPickerObject, ObservedPool, PoolParent
from sparkrun_operator.render import keys

Obj = Mapping[str, Any]
#: The most parents read from a pool's status (the CRD's own bound).
MAX_PARENTS: Final = 32
#: The most conditions read per parent (the CRD's own bound).
MAX_PARENT_CONDITIONS: Final = 8
#: A parent's name, its kind and namespace, and a reason: characters kept (a parent reads at
#: most 381 characters, within ``status.inferencePool.parents[].parent``'s bound).
NAME_MAX: Final = 253
LABEL_MAX: Final = 63
REASON_MAX: Final = 128
#: The kinds of a Managed picker's objects.
PICKER_KINDS: Final = frozenset({"ServiceAccount", "RoleBinding", "Deployment", "Service", "NetworkPolicy"})

_Status = Literal["True", "False", "Unknown"]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any, limit: int) -> list[Any]:
    return list(value[:limit]) if isinstance(value, list) else []


def _str(value: Any, limit: int = NAME_MAX) -> str:
    return clip(value, limit) if isinstance(value, str) else ""


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The UID of the InferenceWorkload (of our group: another product's kind of that name is
    not ours) that controls the object (its controller owner reference), else ``None``."""
    for ref in _list(meta.get("ownerReferences"), 16):
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == "InferenceWorkload"
            and str(ref.get("apiVersion") or "").partition("/")[0] == GROUP
        ):
            uid = ref.get("uid")
            return uid if isinstance(uid, str) else None
    return None


def _hash(meta: Mapping[str, Any]) -> str | None:
    value = _map(meta.get("annotations")).get(keys.ANNOTATION_POOL_HASH)
    return value if isinstance(value, str) and len(value) <= 64 else None


def _identity(obj: Obj) -> tuple[Mapping[str, Any], str, str] | None:
    meta = _map(obj.get("metadata"))
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str) or not name or not uid:
        return None
    return meta, name, uid


def _status_of(value: Any) -> _Status:
    return value if value in ("True", "False") else "Unknown"


def parent_from(entry: Any, *, namespace: str) -> PoolParent | None:
    """One ``status.parents[]`` entry: ``Kind/namespace/name`` (Gateway and the pool's
    namespace when unset), its Accepted and ResolvedRefs, the reason and message of the first
    of them that is not True (else Accepted's)."""
    if not isinstance(entry, Mapping):
        return None
    ref = _map(entry.get("parentRef"))
    name = _str(ref.get("name"))
    if not name:
        return None
    kind = _str(ref.get("kind"), LABEL_MAX) or "Gateway"
    parent = f"{kind}/{_str(ref.get('namespace'), LABEL_MAX) or namespace}/{name}"
    found: dict[str, Mapping[str, Any]] = {}
    for cond in _list(entry.get("conditions"), MAX_PARENT_CONDITIONS):
        if isinstance(cond, Mapping) and cond.get("type") in ("Accepted", "ResolvedRefs"):
            found.setdefault(str(cond.get("type")), cond)
    accepted = _status_of(found.get("Accepted", {}).get("status"))
    resolved = _status_of(found.get("ResolvedRefs", {}).get("status"))
    why = (
        found.get("ResolvedRefs", {})
        if accepted == "True" and resolved != "True"
        else found.get("Accepted", {})
    )
    return PoolParent(
        parent=parent,
        accepted=accepted,
        resolved_refs=resolved,
        reason=_str(why.get("reason"), REASON_MAX),
        message=_str(why.get("message"), SERVER_TEXT_MAX),
    )


def pool_from(obj: Obj) -> ObservedPool | None:
    """An InferencePool (any maker's): name, UID, hash, controller and its parents."""
    found = _identity(obj)
    if found is None or obj.get("kind") not in (None, "InferencePool"):
        return None
    meta, name, uid = found
    namespace = _str(meta.get("namespace"))
    parents = (
        parent_from(entry, namespace=namespace)
        for entry in _list(_map(obj.get("status")).get("parents"), MAX_PARENTS)
    )
    return ObservedPool(
        name=name,
        uid=uid,
        hash=_hash(meta),
        controller=controller_uid(meta),
        parents=tuple(p for p in parents if p is not None),
        deleting=meta.get("deletionTimestamp") is not None,
    )


def _deployment_ready(obj: Obj, meta: Mapping[str, Any]) -> bool:
    status = _map(obj.get("status"))
    ready, seen, generation = (
        status.get("readyReplicas"),
        status.get("observedGeneration"),
        meta.get("generation"),
    )
    if not isinstance(ready, int) or isinstance(ready, bool) or ready < 1:
        return False
    return not isinstance(generation, int) or (isinstance(seen, int) and seen >= generation)


def picker_from(obj: Obj) -> ObservedPickerObject | None:
    """A ServiceAccount, RoleBinding, Deployment, Service or NetworkPolicy of a Managed picker:
    kind, name, UID, hash, controller, and for the Deployment whether a Ready replica runs its
    current generation."""
    found = _identity(obj)
    kind = obj.get("kind")
    if found is None or kind not in PICKER_KINDS:
        return None
    meta, name, uid = found
    return ObservedPickerObject(
        kind=str(kind),
        name=name,
        uid=uid,
        hash=_hash(meta),
        controller=controller_uid(meta),
        ready=kind == "Deployment" and _deployment_ready(obj, meta),
        deleting=meta.get("deletionTimestamp") is not None,
    )
