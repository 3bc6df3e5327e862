"""kopf indexes: the operator's in-memory view of every object its controllers read.

kopf updates an index from its watch before it runs any handler for the event, so a reconcile
reads JobSets, pods, Services, Recipes, ModelCaches, InferenceClusters and Nodes from memory and
makes no read request. Index ids are the keyword names handlers receive them under:

=============== ====================================== =========================================
id              key                                    value
=============== ====================================== =========================================
``iw_jobsets``  ``(namespace, workload)``              :class:`~..plan.workload.ObservedJobSet`
``iw_pods``     ``(namespace, workload)``              :class:`~..plan.workload.ObservedPod`
``iw_services`` ``(namespace, workload)``              ``{"spec": ...}`` of the Service
``iw_recipes``  ``(namespace, name)``                  the Recipe's spec
``iw_caches``   ``(namespace, name)``                  the ModelCache's spec and status
``iw_clusters`` ``name``                               the InferenceCluster's metadata, spec and
                                                       ``status.applied``
``iw_drains``   ``(namespace, workload)``              :class:`~..api.drain.WorkloadDrainStatus`:
                                                       the workload's groups in a cluster's
                                                       ``status.drain`` (one per cluster listing it,
                                                       parsed once per cluster change)
``iw_nodes``    node name                              :class:`~..plan.cluster.ObservedNode`
``iw_gpu_pods`` node name                              :class:`~..plan.cluster.ObservedGpuPod`
``iw_names``    model name (served name or alias)      :class:`~..plan.names.Claim` of each
                                                       workload claiming it (all namespaces; its
                                                       ``status.model``, plan/served.py; not the
                                                       names its namespace may not claim)
``iw_gates``    ``(namespace, workload)``              :class:`~..plan.workload.ObservedGate`
                                                       (a rollout gate's InferenceBenchmark)
``iw_policies`` ``(namespace, workload)``              the hash annotation of the engines'
                                                       NetworkPolicy (only with
                                                       ``--engine-network-policy``)
``iw_revisions`` ``(namespace, workload)``             :class:`~..plan.workload.model.ObservedRevision`
                                                       (a serving revision's ControllerRevision)
``iw_pools``    ``(namespace, name)``                  every InferencePool, ``plan.observe.pool_from``
                                                       (only where pools are served:
                                                       ``controllers/inferencepools.py``)
``iw_pickers``  ``(namespace, workload)``              a managed endpoint picker's Deployment,
                                                       ``plan.observe.picker_from`` (idem; and
                                                       its Service, ServiceAccount, RoleBinding,
                                                       NetworkPolicy: ``iw_picker_services``,
                                                       ``_accounts``, ``_bindings``, ``_policies``)
=============== ====================================== =========================================

Values are small parsed records, not whole objects, to keep memory proportional to what is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import kopf

from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.api.resources import (
    INFERENCE_BENCHMARK,
    INFERENCE_CLUSTER,
    INFERENCE_WORKLOAD,
    MODEL_CACHE,
    RECIPE,
)
from sparkrun_operator.controllers import hooks
from sparkrun_operator.plan import drain, names, observe
from sparkrun_operator.plan.workload import revisions
from sparkrun_operator.render import keys, networkpolicy

RECIPE_ID: Final = (RECIPE.group, RECIPE.version, RECIPE.plural)
CACHE_ID: Final = (MODEL_CACHE.group, MODEL_CACHE.version, MODEL_CACHE.plural)
CLUSTER_ID: Final = (INFERENCE_CLUSTER.group, INFERENCE_CLUSTER.version, INFERENCE_CLUSTER.plural)
WORKLOAD_NAMES_ID: Final = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)
JOBSET_ID: Final = (keys.JOBSET_GROUP, keys.JOBSET_VERSION, keys.JOBSET_PLURAL)
OURS: Final = {keys.LABEL_WORKLOAD: kopf.PRESENT}
BENCHMARK_ID: Final = (INFERENCE_BENCHMARK.group, INFERENCE_BENCHMARK.version, INFERENCE_BENCHMARK.plural)
#: A workload's serving revisions (ADR 0046), labelled with the workload like its other children.
REVISION_ID: Final = ("apps", "v1", "controllerrevisions")
#: A rollout gate's InferenceBenchmarks carry the workload they gate.
GATES: Final = {keys.LABEL_GATE_WORKLOAD: kopf.PRESENT}
NAMES: Final = (
    "iw_jobsets",
    "iw_pods",
    "iw_services",
    "iw_recipes",
    "iw_caches",
    "iw_clusters",
    "iw_drains",
    "iw_nodes",
    "iw_gpu_pods",
    "iw_names",
    "iw_gates",
    "iw_policies",
    "iw_revisions",
    "iw_pools",
    "iw_pickers",
    "iw_picker_services",
    "iw_picker_accounts",
    "iw_picker_bindings",
    "iw_picker_policies",
    "iw_recipe_owners",
    "iw_registries",
    "iw_hook_jobs",
)
#: The indexes of a managed picker's objects (``Observation.picker`` reads them together).
PICKER_NAMES: Final = (
    "iw_pickers",
    "iw_picker_services",
    "iw_picker_accounts",
    "iw_picker_bindings",
    "iw_picker_policies",
)


def pick(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The indexes among a handler's keyword arguments."""
    return {name: kwargs[name] for name in NAMES if name in kwargs}


def register(
    registry: kopf.OperatorRegistry,
    *,
    name_policy: NamePolicy = namepolicy.OPEN,
    network_policies: bool = False,
) -> None:
    """Register every index on ``registry`` (once per operator). ``iw_names`` holds only the
    names ``name_policy`` lets each workload's namespace claim (``--name-prefixes``);
    ``iw_policies`` (NetworkPolicies are watched) only with ``network_policies``.

    NB: the functions are ``async`` although they never await: kopf runs plain functions in a
    thread pool, which costs a thread hop per watch event and memory per thread.
    """

    if network_policies:
        _register_policies(registry)
    _register_clusters(registry)
    hooks.register_indexes(registry)  # iw_recipe_owners, iw_registries (issue 32)

    @kopf.index(*JOBSET_ID, id="iw_jobsets", labels=OURS, registry=registry)
    async def iw_jobsets(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.workload_key(body)
        parsed = observe.jobset_from(body)
        return {key: parsed} if key and parsed else None

    @kopf.index("", "v1", "pods", id="iw_pods", labels=OURS, registry=registry)
    async def iw_pods(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.workload_key(body)
        parsed = observe.pod_from(body)
        return {key: parsed} if key and parsed else None

    @kopf.index("", "v1", "services", id="iw_services", labels=OURS, registry=registry)
    async def iw_services(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.workload_key(body)
        if key is None or body.get("metadata", {}).get("name") != key[1]:
            return None
        return {key: {"spec": dict(body.get("spec") or {})}}

    @kopf.index(*RECIPE_ID, id="iw_recipes", registry=registry)
    async def iw_recipes(*, namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[Any, Any]:
        return {(namespace, name): dict(spec)}

    @kopf.index(*CACHE_ID, id="iw_caches", registry=registry)
    async def iw_caches(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return {
            (namespace, name): {
                "spec": dict(body.get("spec") or {}),
                "status": dict(body.get("status") or {}),
            }
        }

    @kopf.index("", "v1", "nodes", id="iw_nodes", registry=registry)
    async def iw_nodes(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        parsed = observe.node_from(body)
        return {parsed.name: parsed} if parsed else None

    @kopf.index(*WORKLOAD_NAMES_ID, id="iw_names", registry=registry)
    async def iw_names(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        claim = claim_of(body, name_policy)
        return dict.fromkeys(claim.names, claim) if claim is not None and claim.names else None

    @kopf.index(*BENCHMARK_ID, id="iw_gates", labels=GATES, registry=registry)
    async def iw_gates(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.gate_key(body)
        parsed = observe.gate_from(body)
        return {key: parsed} if key and parsed else None

    @kopf.index(*REVISION_ID, id="iw_revisions", labels=OURS, registry=registry)
    async def iw_revisions(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.workload_key(body)
        parsed = revisions.revision_from(body)
        return {key: parsed} if key and parsed else None

    @kopf.index("", "v1", "pods", id="iw_gpu_pods", registry=registry)
    async def iw_gpu_pods(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        parsed = observe.gpu_pod_from(body)
        return {parsed.node: parsed} if parsed else None


def cluster_record(body: Any) -> dict[str, Any]:
    """What ``iw_clusters`` keeps of an InferenceCluster: its metadata, its spec and
    ``status.applied``, the values in use (ADR 0046: workloads are placed with these, not with a
    changed spec waiting for ``spec.approve``)."""
    status = body.get("status") or {}
    applied = status.get("applied") if isinstance(status, dict) else None
    return {
        "metadata": dict(body.get("metadata") or {}),
        "spec": dict(body.get("spec") or {}),
        "status": {"applied": dict(applied)} if isinstance(applied, dict) else {},
    }


def _register_clusters(registry: kopf.OperatorRegistry) -> None:
    """``iw_clusters`` and ``iw_drains``: the InferenceClusters as the workloads read them."""

    @kopf.index(*CLUSTER_ID, id="iw_clusters", registry=registry)
    async def iw_clusters(*, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return {name: cluster_record(body)}

    @kopf.index(*CLUSTER_ID, id="iw_drains", registry=registry)
    async def iw_drains(*, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        status = body.get("status")
        views = drain.workload_views(name, status.get("drain") if isinstance(status, Mapping) else None)
        return dict(views) or None


def _register_policies(registry: kopf.OperatorRegistry) -> None:
    """``iw_policies``: each workload's engine NetworkPolicy, by the hash it was rendered from."""

    @kopf.index(
        "networking.k8s.io", "v1", "networkpolicies", id="iw_policies", labels=OURS, registry=registry
    )
    async def iw_policies(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = observe.workload_key(body)
        meta = body.get("metadata") or {}
        if key is None or meta.get("name") != networkpolicy.policy_name(key[1]):
            return None
        return {key: str((meta.get("annotations") or {}).get(networkpolicy.ANNOTATION_POLICY_HASH, ""))}


def claim_of(body: Any, name_policy: NamePolicy = namepolicy.OPEN) -> names.Claim | None:
    """The names a workload claims, as the gateway sees them (none while it is being deleted;
    without the names ``name_policy`` withholds)."""
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return names.claim_of(body, policy=name_policy)


def holders(index: Any) -> Callable[[str], Iterable[names.Claim]]:
    """The claims of one model name in the ``iw_names`` index (none without the index)."""

    def of(model: str) -> Iterable[names.Claim]:
        return () if index is None else index.get(model, ())

    return of


def rivals(index: Any, claim: names.Claim | None) -> list[names.Claim]:
    """Every claim in the ``iw_names`` index sharing a name with ``claim`` (itself included)."""
    if claim is None or index is None:
        return []
    out: dict[str, names.Claim] = {}
    for model in claim.names:
        for found in index.get(model, ()):
            out.setdefault(found.key, found)
    return list(out.values())
