"""``workloads.plan``'s ``placement`` and ``hardware_assessment``: the memory fit over candidate nodes.

A preview: the per-GPU need of one replica (``plan/fit.py``, the same figure the workload
planner's ``InsufficientGPUMemory`` gate uses) against each candidate node's GPU feature discovery
labels, and the nodes a replica could take, rank by rank. The Kubernetes scheduler still binds
the pods: the hosts named here are the fitting candidates, not a reservation. Shapes are the
reference daemon's ``workloads.plan`` result schema (``spec/daemon-api/reference-daemon-ops.json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.api.resources import MODEL_CACHE
from sparkrun_operator.k8s.resources import NODES, resource_of
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.plan import fit, observe
from sparkrun_operator.plan.workload import ObservedCache
from sparkrun_operator.plan.workload.gates import fit_need
from sparkrun_operator.recipe.resolve import EffectiveSpec

CACHES = resource_of(MODEL_CACHE)
NOTE = (
    "placement is a preview over the candidate nodes' GPU labels; the Kubernetes scheduler binds "
    "the pods, possibly to other fitting nodes"
)


def _gb(value: int | None) -> float | None:
    """Bytes in GiB, two decimals (``None`` stays ``None``)."""
    return None if value is None else round(value / fit.GIB, 2)


async def assess(
    ctx: OperationContext, effective: EffectiveSpec, hosts: Sequence[str], cluster: str | None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``(placement, hardware_assessment)`` of one replica of ``effective`` on ``hosts``."""
    cache, found_by = await _cache_for(ctx, effective)
    nodes = {view.name: view for view in (kube.node_view(n) for n in await ctx.rest.list(NODES))}
    candidates = fit.candidates_of(
        (host, nodes[host].labels, nodes[host].allocatable.get(DEFAULT_GPU_RESOURCE, 0))
        if host in nodes
        else (host, {}, 0)
        for host in hosts
    )
    need = fit_need(effective, cache)
    topology = effective.topology
    verdict = fit.check(
        need,
        candidates,
        nodes=topology.nodes,
        tensor_parallel=topology.tensor_parallel,
        pipeline_parallel=topology.pipeline_parallel,
        where=f"nodes of InferenceCluster {cluster!r}" if cluster else "the candidate nodes",
    )
    assessment = _assessment(verdict, candidates, nodes.keys())
    if found_by:
        assessment["detected"].insert(0, found_by)
    return _placement(verdict, effective), assessment


async def _cache_for(ctx: OperationContext, effective: EffectiveSpec) -> tuple[ObservedCache | None, str]:
    """The ModelCache the weights size comes from: the workload's ``cacheRef``, else a Ready one
    in the namespace caching the same repository (and revision, when the recipe pins one), as a
    daemon API launch names none; and how it was found."""
    if effective.cache_ref:
        raw = await ctx.rest.get(CACHES, effective.cache_ref, ctx.namespace)
        return observe.cache_from(
            raw, name=effective.cache_ref
        ), f"ModelCache {effective.cache_ref} (cacheRef)"
    for raw in await ctx.rest.list(CACHES, ctx.namespace):
        source = ((raw.get("spec") or {}).get("source") or {}).get("huggingFace") or {}
        name = str((raw.get("metadata") or {}).get("name") or "")
        cache = observe.cache_from(raw, name=name)
        pinned = effective.model_revision
        same_revision = not pinned or pinned in (source.get("revision"), cache.resolved_revision)
        if source.get("repo") == effective.model and cache.ready and same_revision:
            return cache, f"ModelCache {name}: a Ready cache of {effective.model} in the namespace"
    return None, ""


def _placement(verdict: fit.Verdict, effective: EffectiveSpec) -> dict[str, Any] | None:
    """Ranks on the fitting candidates (known fits first, then unknown memory); ``None`` when
    too few candidates may fit."""
    topology = effective.topology
    ranked = sorted(
        (f for f in verdict.nodes if f.fits is not False and f.node.allocatable >= topology.gpus_per_node),
        key=lambda f: (f.fits is not True, f.node.name),
    )
    chosen = ranked[: topology.nodes]
    if len(chosen) < topology.nodes or verdict.fits is False:
        return None
    util = verdict.need.utilization
    by_rank = []
    for node_fit in chosen:
        memory = node_fit.node.gpus.memory_mib
        for local in range(topology.gpus_per_node):
            by_rank.append(
                {
                    "host": node_fit.node.name,
                    "local_gpu": local,
                    "util_fraction": util,
                    "memory_gb": _gb(int(memory * fit.MIB * util)) if memory is not None else None,
                    "need_gb": _gb(verdict.need.total),
                }
            )
    return {"by_rank": by_rank, "hosts_used": [f.node.name for f in chosen]}


def _assessment(verdict: fit.Verdict, candidates: Sequence[fit.CandidateNode], known: Any) -> dict[str, Any]:
    """The reference's ``hardware_assessment``: per-host GPU facts, what was detected (labels,
    cache) and assumed, and the fit's error when nothing fits."""
    fits: Mapping[str, bool | None] = {f.node.name: f.fits for f in verdict.nodes}
    hosts: dict[str, dict[str, Any]] = {}
    detected = list(verdict.need.detected)
    warnings: list[str] = []
    for node in candidates:
        gpus = node.gpus
        hosts[node.name] = {
            "gpu_product": gpus.product,
            "gpu_memory_gb": _gb(gpus.memory_mib * fit.MIB) if gpus.memory_mib is not None else None,
            "gpu_count": gpus.count,
            "allocatable_gpus": node.allocatable,
            "fits": fits.get(node.name),
        }
        if node.name not in known:
            warnings.append(f"node {node.name} not found")
        elif gpus.memory_mib is not None:
            detected.append(
                f"{node.name}: {gpus.count or node.allocatable} x {gpus.product or 'GPU'} with "
                f"{_gb(gpus.memory_mib * fit.MIB)} GiB ({fit.MEMORY_LABEL} label)"
            )
        if fits.get(node.name) is False and verdict.fits is not False:
            warnings.append(f"node {node.name} has too little GPU memory for this workload")
    total = verdict.need.total
    if total is not None:
        at_least = "at least " if verdict.need.lower_bound else ""
        detected.append(f"needs {at_least}{_gb(total)} GiB per GPU")
    return {
        "hosts": hosts,
        "detected": detected,
        "assumed": verdict.assumed,
        "warnings": warnings,
        "errors": [verdict.message] if verdict.fits is False else [],
    }
