"""InferencePools (issue 30): whether the apiserver serves them, and the operator's view of each
workload's pool and managed endpoint picker.

- :func:`discover`: one discovery read at start (``--inference-pools auto``): does the apiserver
  serve ``inferencepools.inference.networking.k8s.io/v1``? kopf cannot watch a resource that is
  not served, so the indexes and pokes below are registered only when it does; otherwise the
  planner reports ``PoolAccepted=False CRDNotInstalled`` and manages nothing.
- ``iw_pools``: every InferencePool in the served namespaces, keyed ``(namespace, name)``: a
  workload's pool has the workload's name, so a pool of that name the workload does not control
  (another product's) is seen too, and the planner leaves it alone (``PoolNameTaken``). Pools
  are few (one per served model), so the watch is unfiltered.
- ``iw_pickers``, ``iw_picker_services``, ``iw_picker_accounts``, ``iw_picker_bindings`` (and
  ``iw_picker_policies`` with engine NetworkPolicies, ``--engine-network-policy``: the operator
  may watch NetworkPolicies only then): the objects of managed endpoint pickers (label-selected:
  Deployment, Service, ServiceAccount, RoleBinding, NetworkPolicy), keyed ``(namespace,
  workload)``: their hash, controller and (Deployment) readiness; the planner re-applies one
  that is missing or changed.
- pokes: a pool's or picker's change of what the planner acts on (its hash, owner, labels, or
  it came or went) pokes the workload's full lane; a change of what only the status reads (a
  gateway's ``status.parents``, the picker's readiness) pokes its status lane.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

import kopf

from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.workload_pokes import full_key, status_key
from sparkrun_operator.k8s import discovery
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import INFERENCE_POOLS
from sparkrun_operator.plan import observe
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PoolSettings

POOL_ID: Final = (INFERENCE_POOLS.group, INFERENCE_POOLS.version, INFERENCE_POOLS.plural)
#: The labels of a managed endpoint picker's objects.
PICKERS: Final[Mapping[str, Any]] = {
    keys.LABEL_COMPONENT: keys.COMPONENT_ENDPOINT_PICKER,
    keys.LABEL_INFERENCE_POOL: kopf.PRESENT,
}
#: The picker's kinds and the index of each, keyed ``(namespace, workload)``; the planner reads
#: them together (``Observation.picker``).
PICKER_INDEXES: Final = {
    ("apps", "v1", "deployments"): "iw_pickers",
    ("", "v1", "services"): "iw_picker_services",
    ("", "v1", "serviceaccounts"): "iw_picker_accounts",
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): "iw_picker_bindings",
    ("networking.k8s.io", "v1", "networkpolicies"): "iw_picker_policies",
}
#: The picker's NetworkPolicy: watched only with engine NetworkPolicies (the chart grants the
#: operator NetworkPolicies only then, and the planner renders the picker's only then).
POLICY_ID: Final = ("networking.k8s.io", "v1", "networkpolicies")
#: What tells an administrator how to fix ``CRDNotInstalled``.
HOW_TO_INSTALL: Final = (
    "install the InferencePool CRD of the Gateway API Inference Extension (v1.5.0, or the chart's "
    "inferencePool.installCRD=true) and restart the operator"
)

log = logging.getLogger("sparkrun.operator.inferencepools")


async def discover(kube: Kube, settings: PoolSettings) -> PoolSettings:
    """``settings`` with ``served`` set: ``off`` asks nothing (never served), ``auto`` reads the
    apiserver's discovery once. The decision is logged."""
    if settings.mode == "off":
        decided = dataclasses.replace(settings, served=False)
    else:
        decided = dataclasses.replace(settings, served=await discovery.serves(kube, INFERENCE_POOLS))
    log.info("%s", describe(decided))
    return decided


def describe(settings: PoolSettings) -> str:
    """The start-up line of the decision."""
    if settings.mode == "off":
        return "InferencePools: off (--inference-pools off): none managed"
    if not settings.served:
        return (
            f"InferencePools: the apiserver does not serve inferencepools/v1: none managed; {HOW_TO_INSTALL}"
        )
    return "InferencePools: one per workload, with a managed endpoint picker unless its spec says otherwise"


def workload_of(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(namespace, workload)`` of a managed picker's object (its ``LABEL_INFERENCE_POOL``)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace, workload = meta.get("namespace"), labels.get(keys.LABEL_INFERENCE_POOL)
    if not isinstance(namespace, str) or not isinstance(workload, str) or not namespace or not workload:
        return None
    return namespace, workload


def _owners(meta: Mapping[str, Any]) -> tuple[tuple[Any, Any], ...]:
    """An object's owner references as far as a mark needs them (uid, controller; at most 8)."""
    return tuple(
        (r.get("uid"), r.get("controller"))
        for r in (meta.get("ownerReferences") or ())[:8]
        if isinstance(r, Mapping)
    )


def pool_marks(body: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """What the full lane acts on of a pool (its labels, controller, hash, deletion) and what
    only the status reads (``status``); ``None`` parts for a pool that is gone."""
    if body is None:
        return None, None
    meta = body.get("metadata") or {}
    owners = _owners(meta)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    acted = (
        labels.get(keys.LABEL_INFERENCE_POOL) if isinstance(labels, Mapping) else None,
        annotations.get(keys.ANNOTATION_POOL_HASH) if isinstance(annotations, Mapping) else None,
        owners,
        bool(meta.get("deletionTimestamp")),
        meta.get("uid"),
    )
    return acted, hash(repr(body.get("status")))


def picker_marks(body: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """What the full lane acts on of a picker's object (hash, owner, deletion) and its
    readiness as the planner reads it (a Deployment's)."""
    if body is None:
        return None, None
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = body.get("status") or {}
    owners = _owners(meta)
    acted = (
        annotations.get(keys.ANNOTATION_POOL_HASH) if isinstance(annotations, Mapping) else None,
        owners,
        bool(meta.get("deletionTimestamp")),
        meta.get("uid"),
    )
    # NB: only what the status shows (the planner's ready), not every step of a rollout's counts:
    # a thousand pickers' Deployment status writes must not each wake a status lane
    record = observe.picker_from(body) if isinstance(status, Mapping) else None
    return acted, (record.ready if record is not None else None)


def poke(
    ctx: Memo,
    seen: dict[Any, tuple[Any, Any]],
    key: tuple[str, str],
    now: tuple[Any, Any],
    *,
    mark_key: Any = None,
) -> None:
    """Poke workload ``key``'s full lane when what it acts on changed, else its status lane when
    what the status reads changed (``seen`` keeps each object's last marks, under ``mark_key``,
    else ``key``)."""
    mark_key = key if mark_key is None else mark_key
    before = seen.pop(mark_key, (None, None))
    if now != (None, None):
        seen[mark_key] = now
    if before[0] != now[0]:
        ctx.triggers.poke(full_key(*key))
    elif before[1] != now[1]:
        ctx.triggers.poke(status_key(*key))


def register(registry: kopf.OperatorRegistry, *, network_policies: bool = False) -> None:
    """Register the pool and picker indexes and pokes (only when the apiserver serves pools;
    the picker's NetworkPolicy only with ``network_policies``).

    NB: the index functions are ``async`` although they never await: kopf runs plain
    functions in a thread pool."""

    @kopf.index(*POOL_ID, id="iw_pools", registry=registry)
    async def iw_pools(
        *, namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[Any, Any] | None:
        parsed = observe.pool_from(body)
        return {(namespace, name): parsed} if namespace and parsed is not None else None

    kinds = [kind_id for kind_id in PICKER_INDEXES if network_policies or kind_id != POLICY_ID]
    for kind_id in kinds:
        _register_picker_index(registry, kind_id, PICKER_INDEXES[kind_id])

    pools: dict[tuple[str, str], tuple[Any, Any]] = {}
    pickers: dict[tuple[str, str], tuple[Any, Any]] = {}

    @kopf.on.event(*POOL_ID, id="iw-pool-changed", registry=registry)
    async def iw_pool_changed(
        *, namespace: str | None, name: str, body: kopf.Body, type: str | None, memo: Any, **_: Any
    ) -> None:
        if namespace:
            # NB: keyed by the pool's name: the workload of that name (if any) owns it or finds it taken
            poke(memo.ctx, pools, (namespace, name), pool_marks(None if type == "DELETED" else body))

    for kind_id in kinds:
        _register_picker_pokes(registry, kind_id, pickers)


def _register_picker_index(
    registry: kopf.OperatorRegistry, kind_id: tuple[str, str, str], index_id: str
) -> None:
    @kopf.index(*kind_id, id=index_id, labels=PICKERS, registry=registry)
    async def picker_index(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = workload_of(body)
        parsed = observe.picker_from(body)
        return {key: parsed} if key is not None and parsed is not None else None


def _register_picker_pokes(
    registry: kopf.OperatorRegistry, kind_id: tuple[str, str, str], seen: dict[Any, tuple[Any, Any]]
) -> None:
    @kopf.on.event(*kind_id, id=f"iw-picker-{kind_id[2]}-changed", labels=PICKERS, registry=registry)
    async def picker_changed(*, name: str, body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
        key = workload_of(body)
        if key is not None:
            marks = picker_marks(None if type == "DELETED" else body)
            poke(memo.ctx, seen, key, marks, mark_key=(kind_id[2], key[0], name))
