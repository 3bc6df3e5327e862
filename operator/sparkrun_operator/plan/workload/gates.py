"""Stage 1, gates: what may serve. The recipe, the spec, the ModelCache and the cluster.

Each gate sets its own condition (``RecipeResolved``, ``CacheReady``) and may block: while
blocked, nothing new is created (running JobSets are kept). The history stage
(``plan/workload/history.py``) tells the blocks apart: a *source* block (the Recipe is missing
or invalid, the spec is invalid) leaves the newest kept revision serving; a *runtime* block
(cache, cluster, GPU memory) stops new pods. A recipe revision pin the Recipe has moved past is
no block: it is drift (``recipe_pin``), and the newest revision keeps serving. The first block
found is the one reported as the Ready/Progressing reason. The last gate, GPU memory
(``plan/fit.py``), runs only when nothing else blocks and no JobSet of the workload has a Ready
leader (a running replica proves the model fits): a replica too large for every candidate node
gets no JobSet, and ``Scheduled`` says what it needs and what the nodes have.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadStatus, StartupEvent
from sparkrun_operator.plan import fit
from sparkrun_operator.plan.workload.model import Conditions, Observation, ObservedCache
from sparkrun_operator.recipe.resolve import EffectiveSpec, Resolution, resolve
from sparkrun_operator.render import names
from sparkrun_operator.render.workload import CacheMount, Placement

#: (Ready reason, message) when nothing new may be created.
Block = tuple[str, str]


@dataclass(frozen=True, kw_only=True)
class Gates:
    """What the gates found: the effective spec, the cache and placement, and any block."""

    blocked: Block | None = None
    #: The desired settings cannot be resolved (RecipeNotFound, RecipeInvalid, InvalidSpec).
    source: Block | None = None
    #: A block of new pods whatever serves: the cache, the cluster or the GPU memory.
    runtime: Block | None = None
    #: ``spec.recipe.revision`` pins a revision the Recipe has moved past: why (RecipeResolved says it).
    recipe_pin: str | None = None
    effective: EffectiveSpec | None = None
    cache: CacheMount | None = None
    placement: Placement | None = None
    #: Why the named (or default) cluster cannot be used (the Scheduled condition says it).
    cluster_problem: str | None = None
    #: Why no candidate node has the GPU memory a replica needs (``Scheduled`` says it).
    memory_problem: str | None = None


def check(obs: Observation, cond: Conditions, status: InferenceWorkloadStatus) -> Gates:
    """Run every gate in order (recipe, spec, cache, cluster); ``status.startup`` may grow."""
    source, recipe_spec = _recipe_exists(obs, cond)
    effective: EffectiveSpec | None = None
    recipe_pin: str | None = None
    if source is None:
        resolution = resolve(workload=obs.spec, recipe=recipe_spec)
        source, recipe_pin = _resolved(obs, cond, resolution)
        effective = resolution.spec
    if source is None and effective is not None:
        source = _spec_allowed(obs, effective)
    cache, runtime = _cache(obs, cond, status, effective)
    placement, cluster_problem = _cluster(obs)
    if cluster_problem is not None:
        runtime = runtime or (c.REASON_CLUSTER_NOT_FOUND, cluster_problem)
    memory_problem = None
    if source is None and runtime is None and recipe_pin is None:
        memory_problem = _memory(obs, effective)
    if memory_problem is not None:
        runtime = (c.REASON_INSUFFICIENT_GPU_MEMORY, memory_problem)
    return Gates(
        blocked=source or runtime,
        source=source,
        runtime=runtime,
        recipe_pin=recipe_pin,
        effective=effective,
        cache=cache,
        placement=placement,
        cluster_problem=cluster_problem,
        memory_problem=memory_problem,
    )


def _memory(obs: Observation, effective: EffectiveSpec | None) -> str | None:
    """Why no candidate node has the per-GPU memory a replica needs (``plan/fit.py``), else
    ``None`` (it fits, or too little is known to say: unknowns never block). Checked while there
    is something to place (replicas wanted, not Stopped), the candidates are observed and no
    JobSet of the workload has a Ready leader: a replica that runs proves the model fits, and a
    block would stop the scale-up, the replacement of a failed JobSet and the rollout."""
    if effective is None or obs.capacity is None or obs.spec.state == "Stopped" or obs.spec.replicas == 0:
        return None
    if any(js.leader_ready for js in obs.jobsets):
        return None
    verdict = fit.check(
        fit_need(effective, obs.cache),
        [fit.CandidateNode(name=n.name, gpus=n.gpu_labels, allocatable=n.allocatable) for n in obs.capacity],
        nodes=effective.topology.nodes,
        tensor_parallel=effective.topology.tensor_parallel,
        pipeline_parallel=effective.topology.pipeline_parallel,
        where=f"nodes of InferenceCluster {obs.cluster.name!r}" if obs.cluster else "the candidate nodes",
    )
    return verdict.message if verdict.fits is False else None


def fit_need(effective: EffectiveSpec, cache: ObservedCache | None) -> fit.Need:
    """The per-GPU need of one replica of ``effective`` served from ``cache`` (``plan/fit.py``)."""
    ready = cache is not None and cache.exists and cache.ready
    return fit.need(
        shape=cache.shape if ready and cache is not None else None,
        total_bytes=cache.total_bytes if ready and cache is not None else None,
        tensor_parallel=effective.topology.tensor_parallel,
        pipeline_parallel=effective.topology.pipeline_parallel,
        max_model_len=effective.max_model_len,
        utilization=effective.gpu_memory_utilization,
        kv_dtype_bytes=fit.kv_dtype_bytes(effective.engine_args),
    )


def _recipe_exists(obs: Observation, cond: Conditions) -> tuple[Block | None, RecipeSpec | None]:
    ref = obs.spec.recipe
    if ref is None:
        return None, None
    observed = obs.recipe
    if observed is None or not observed.exists or observed.spec is None:
        msg = f"Recipe {ref.name!r} not found in namespace {obs.namespace!r}"
        cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_NOT_FOUND, msg)
        return (c.REASON_RECIPE_NOT_FOUND, msg), None
    return None, observed.spec


def _resolved(obs: Observation, cond: Conditions, resolution: Resolution) -> tuple[Block | None, str | None]:
    """``RecipeResolved`` from the resolution; a block when it has errors, and why a recipe
    revision pin is missed (drift: the newest revision keeps serving)."""
    ref = obs.spec.recipe
    if resolution.spec is None:
        detail = "; ".join(f"{i.field}: {i.message}" if i.field else i.message for i in resolution.errors)
        if ref is not None and any(not (i.field or "").startswith("spec.") for i in resolution.errors):
            cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_INVALID, detail)
            return (c.REASON_RECIPE_INVALID, detail), None
        if ref is not None:
            cond.set(c.RECIPE_RESOLVED, True, c.REASON_RECIPE_RESOLVED, f"Recipe {ref.name!r}")
        return (c.REASON_INVALID_SPEC, detail), None
    if ref is None:
        return None, None
    got = resolution.spec.recipe_revision
    pinned = ref.revision
    if pinned and got != pinned:
        msg = (
            f"spec.recipe.revision pins {pinned}, but Recipe {ref.name!r} is now at {got}; "
            "nothing is rolled out until the pin is updated or removed"
        )
        cond.set(c.RECIPE_RESOLVED, False, c.REASON_RECIPE_REVISION_MISMATCH, msg)
        return None, msg
    warnings = [i.message for i in resolution.issues if i.severity == "warning"]
    msg = f"Recipe {ref.name!r} at revision {got}"
    if warnings:
        msg += "; warnings: " + "; ".join(warnings)
    cond.set(c.RECIPE_RESOLVED, True, c.REASON_RECIPE_RESOLVED, msg)
    return None, None


def _spec_allowed(obs: Observation, effective: EffectiveSpec) -> Block | None:
    problem = names.check_workload_name(workload=obs.name, nodes=effective.topology.nodes)
    if problem is not None:
        return (c.REASON_INVALID_SPEC, problem)
    if (problem := state_refused(obs.spec.state, effective)) is not None:
        return (c.REASON_INVALID_SPEC, problem)
    return None


def state_refused(state: str, effective: EffectiveSpec) -> str | None:
    """Why ``effective`` settings cannot serve ``spec.state``: Sleeping needs an engine started
    with sleep mode. A spec's gate, and a rollback target's (``revisions.rollback_refused``): a
    kept revision's settings are checked against the state as the spec's are."""
    if state == "Sleeping" and not effective.enable_sleep_mode:
        return "state Sleeping needs engine.enableSleepMode: true"
    return None


def _cache(
    obs: Observation, cond: Conditions, status: InferenceWorkloadStatus, effective: EffectiveSpec | None
) -> tuple[CacheMount | None, Block | None]:
    """``CacheReady``; the mount once the ModelCache is Ready, else a block."""
    spec = obs.spec
    cache_ref = (
        effective.cache_ref
        if effective is not None
        else (spec.model.cache_ref.name if spec.model is not None and spec.model.cache_ref else None)
    )
    if cache_ref is None:
        cond.set(
            c.CACHE_READY, True, c.REASON_NO_CACHE, "no cacheRef: the engine downloads the weights itself"
        )
        return None, None
    cache = obs.cache
    if cache is None or not cache.exists:
        msg = f"ModelCache {cache_ref!r} not found in namespace {obs.namespace!r}; create it or fix cacheRef"
        cond.set(c.CACHE_READY, False, c.REASON_CACHE_NOT_FOUND, msg)
        return None, (c.REASON_WAITING_FOR_CACHE, msg)
    if not cache.ready or cache.claim_name is None:
        msg = f"ModelCache {cache_ref!r} is {cache.phase or 'not Ready'}"
        if cache.message:
            msg += f": {cache.message}"
        msg += "; no pod starts until it is Ready"
        cond.set(c.CACHE_READY, False, c.REASON_CACHE_NOT_READY, msg)
        return None, (c.REASON_WAITING_FOR_CACHE, msg)
    nodes = effective.topology.nodes if effective is not None else 1
    if cache.single_node and nodes > 1:
        where = f" (bound to node {cache.node_name})" if cache.node_name else ""
        modes = ", ".join(cache.access_modes) or "node-local"
        msg = (
            f"ModelCache {cache_ref!r} is on a claim that only one node can mount ({modes}){where}, "
            f"but this workload spans {nodes} nodes; use ReadWriteMany or ReadOnlyMany storage for "
            "the cache, or one node"
        )
        cond.set(c.CACHE_READY, False, c.REASON_CACHE_NOT_SHAREABLE, msg)
        return None, (c.REASON_CACHE_NOT_SHAREABLE, msg)
    mount = CacheMount(
        cache=cache.name,
        claim_name=cache.claim_name,
        path=cache.path,
        revision=cache.resolved_revision,
        node=cache.node_name,
    )
    msg = f"ModelCache {cache_ref!r} is Ready"
    if cache.resolved_revision:
        msg += f" at {cache.resolved_revision}"
    if cache.node_name:
        msg += f"; pods are placed on node {cache.node_name}, where its volume is"
    cond.set(c.CACHE_READY, True, c.REASON_CACHE_READY, msg)
    if status.startup is not None and not any(e.stage == "cacheReady" for e in status.startup):
        status.startup.append(StartupEvent(stage="cacheReady", time=obs.now))
    return mount, None


def _cluster(obs: Observation) -> tuple[Placement | None, str | None]:
    """Where the pods go (the named or default cluster), or why that cluster cannot be used."""
    cluster = obs.cluster
    if cluster is not None:
        if not cluster.exists:
            return None, f"InferenceCluster {cluster.name!r} not found; create it or fix spec.cluster"
        return (
            Placement(
                cluster=cluster.name,
                gpu_resource=cluster.gpu_resource,
                node_names=cluster.node_names,
                node_selector=cluster.node_selector,
                tolerations=cluster.tolerations,
                queue_name=cluster.queue_name,
            ),
            None,
        )
    if obs.spec.cluster:
        return None, f"InferenceCluster {obs.spec.cluster!r} not found; create it or fix spec.cluster"
    return None, None
