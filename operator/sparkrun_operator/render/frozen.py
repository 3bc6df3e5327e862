"""The serving inputs frozen: the wire form kept in a workload's ControllerRevision (ADR 0046).

A serving revision is everything a replica's pods are rendered from (:class:`ServingInputs`:
the effective spec, scheduling, placement, cache mount and pod override). :func:`to_wire`
writes it as plain JSON for ``ServingRevision.inputs``; :func:`from_wire` reads it back, so a
JobSet of an old revision can be rendered again after the Recipe, the cluster or the defaults
changed, or after a rollback. The round trip keeps the revision:
``from_wire(to_wire(x)).revision() == x.revision()``.

A revision's ``data`` is written by the operator only, yet it is read as strictly as a spec:
every section is validated again through pydantic models with the spec's own bounds (unknown
fields refused), the document is bounded in size (:data:`MAX_WIRE_BYTES`) before anything is
read, and a malformed one raises ``ValueError`` naming what is wrong. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import Field, ValidationError

from sparkrun_operator.api import bounds
from sparkrun_operator.api.meta import EnvVar, KubeModel, LabelSelector, Toleration
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.api.workload import SchedulingSpec, TopologySpec
from sparkrun_operator.recipe.flags import MAX_COMMAND_WORDS
from sparkrun_operator.recipe.resolve import EffectiveSpec, Topology
from sparkrun_operator.render.frozenhooks import FrozenHooks, from_frozen, to_frozen
from sparkrun_operator.render.workload import CacheMount, Placement, ServingInputs

#: Version of the wire form (``version``); a document of another version is refused.
WIRE_VERSION: Final = 1
#: The largest frozen document read (its JSON): a ControllerRevision must stay far below etcd's
#: object limit (1.5 MiB), and the planner reads every kept revision on every pass.
MAX_WIRE_BYTES: Final = 256 * 1024
#: Engine arguments of one effective spec: the workload's (128) after the Recipe's own (its
#: command's words, or its defaults as flags, fewer).
MAX_ENGINE_ARGS: Final = MAX_COMMAND_WORDS + 128
#: Environment variables of one effective spec (the Recipe's env merged with the workload's).
MAX_ENV: Final = 256


class _FrozenSpec(KubeModel):
    """The effective spec (``recipe/resolve.py``'s :class:`EffectiveSpec`) as JSON."""

    model: str = Field(min_length=1, max_length=512)
    model_revision: str | None = Field(default=None, max_length=256)
    served_name: str = Field(min_length=1, max_length=512)
    aliases: list[str] = Field(default_factory=list, max_length=64)
    image: str = Field(min_length=1, max_length=1024)
    engine_args: list[bounds.EngineArg] = Field(default_factory=list, max_length=MAX_ENGINE_ARGS)
    max_model_len: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    env: list[EnvVar] = Field(default_factory=list, max_length=MAX_ENV)
    enable_sleep_mode: bool = False
    topology: TopologySpec
    cache_ref: str | None = Field(default=None, max_length=253)
    recipe_name: str | None = Field(default=None, max_length=253)
    recipe_revision: str | None = Field(default=None, max_length=256)
    intent_id: str = Field(min_length=1, max_length=256)


class _FrozenPlacement(KubeModel):
    """The InferenceCluster's placement (:class:`Placement`) as JSON."""

    cluster: str = Field(min_length=1, max_length=253)
    gpu_resource: str = Field(min_length=1, max_length=bounds.LABEL_KEY_MAX_LENGTH)
    node_names: list[bounds.NodeName] = Field(default_factory=list, max_length=1024)
    node_selector: LabelSelector | None = None
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    queue_name: str | None = Field(default=None, max_length=253)


class _FrozenCache(KubeModel):
    """The ModelCache mount (:class:`CacheMount`) as JSON."""

    cache: str = Field(min_length=1, max_length=253)
    claim_name: str = Field(min_length=1, max_length=253)
    path: str = Field(default="/", max_length=4096)
    revision: str | None = Field(default=None, max_length=256)
    node: str | None = Field(default=None, max_length=bounds.NODE_NAME_MAX_LENGTH)


class _FrozenInputs(KubeModel):
    """The whole document (``ServingRevision.inputs``)."""

    version: int
    spec: _FrozenSpec
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    placement: _FrozenPlacement | None = None
    cache: _FrozenCache | None = None
    pod: PodOverride | None = None
    hooks: FrozenHooks | None = None


def to_wire(inputs: ServingInputs) -> dict[str, Any]:
    """``inputs`` as the JSON document a ControllerRevision keeps (camelCase, absent optionals left out)."""
    spec = inputs.spec
    doc: dict[str, Any] = {
        "version": WIRE_VERSION,
        "spec": _FrozenSpec(
            model=spec.model,
            model_revision=spec.model_revision,
            served_name=spec.served_name,
            aliases=list(spec.aliases),
            image=spec.image,
            engine_args=list(spec.engine_args),
            max_model_len=spec.max_model_len,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            env=list(spec.env),
            enable_sleep_mode=spec.enable_sleep_mode,
            topology=TopologySpec(
                nodes=spec.topology.nodes,
                gpus_per_node=spec.topology.gpus_per_node,
                tensor_parallel=spec.topology.tensor_parallel,
                pipeline_parallel=spec.topology.pipeline_parallel,
            ),
            cache_ref=spec.cache_ref,
            recipe_name=spec.recipe_name,
            recipe_revision=spec.recipe_revision,
            intent_id=spec.intent_id,
        ).to_wire(),
        "scheduling": inputs.scheduling.to_wire(),
    }
    if (placement := inputs.placement) is not None:
        doc["placement"] = _FrozenPlacement(
            cluster=placement.cluster,
            gpu_resource=placement.gpu_resource,
            node_names=list(placement.node_names),
            node_selector=placement.node_selector,
            tolerations=list(placement.tolerations),
            queue_name=placement.queue_name,
        ).to_wire()
    if (cache := inputs.cache) is not None:
        doc["cache"] = _FrozenCache(
            cache=cache.cache,
            claim_name=cache.claim_name,
            path=cache.path,
            revision=cache.revision,
            node=cache.node,
        ).to_wire()
    if inputs.pod is not None:
        doc["pod"] = inputs.pod.to_wire()
    if inputs.hooks is not None and not inputs.hooks.empty:
        doc["hooks"] = to_frozen(inputs.hooks).to_wire()
    return doc


def problem(inputs: ServingInputs) -> str | None:
    """Why ``inputs`` cannot be kept as a revision that :func:`from_wire` reads back (a field
    beyond the frozen bounds, a document over :data:`MAX_WIRE_BYTES`), else ``None``. Checked
    before a revision is made: one that could not be read back would never serve, and the next
    pass would make another."""
    try:
        doc = to_wire(inputs)
    except ValidationError as error:
        return _invalid(error)
    size = len(json.dumps(doc, separators=(",", ":")))
    if size > MAX_WIRE_BYTES:
        return f"the serving inputs are {size} bytes as a revision, over the {MAX_WIRE_BYTES} kept"
    return None


def _invalid(error: ValidationError) -> str:
    """The first problem, by place and message (never the value: it may be a credential)."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return (
        f"frozen serving inputs: {where or 'document'}: {str(first.get('msg', 'invalid'))[:200]}"
        f" ({error.error_count()} problem(s))"
    )


def from_wire(doc: Any) -> ServingInputs:
    """The serving inputs a frozen document holds; ``ValueError`` (naming the problem) when it is
    not one: too large, not an object, another version, a field out of its bounds, unknown fields,
    or a topology whose GPUs do not add up."""
    if not isinstance(doc, dict):
        raise ValueError(f"frozen serving inputs must be an object, not {type(doc).__name__}")
    try:
        size = len(json.dumps(doc, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(f"frozen serving inputs are not JSON: {type(error).__name__}") from None
    if size > MAX_WIRE_BYTES:
        raise ValueError(f"frozen serving inputs of {size} bytes, over the {MAX_WIRE_BYTES} read")
    if doc.get("version") != WIRE_VERSION:
        raise ValueError(
            f"frozen serving inputs of version {str(doc.get('version'))[:16]!r}, not {WIRE_VERSION}"
        )
    try:
        parsed = _FrozenInputs.model_validate(doc)
    except ValidationError as error:
        raise ValueError(_invalid(error)) from None
    return ServingInputs(
        spec=_spec(parsed.spec),
        scheduling=parsed.scheduling,
        placement=_placement(parsed.placement) if parsed.placement is not None else None,
        cache=_cache(parsed.cache) if parsed.cache is not None else None,
        pod=parsed.pod,
        hooks=from_frozen(parsed.hooks) if parsed.hooks is not None else None,
    )


def _spec(spec: _FrozenSpec) -> EffectiveSpec:
    topo = spec.topology
    if topo.gpus_per_node * topo.nodes != topo.tensor_parallel * topo.pipeline_parallel:
        raise ValueError(
            "frozen serving inputs: spec.topology: gpusPerNode x nodes != tensor x pipeline parallel"
        )
    if (topo.tensor_parallel * topo.pipeline_parallel) % topo.nodes:
        raise ValueError(
            "frozen serving inputs: spec.topology: tensor x pipeline parallel not a multiple of nodes"
        )
    return EffectiveSpec(
        model=spec.model,
        model_revision=spec.model_revision,
        served_name=spec.served_name,
        aliases=tuple(spec.aliases),
        image=spec.image,
        engine_args=tuple(spec.engine_args),
        max_model_len=spec.max_model_len,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        env=tuple(spec.env),
        enable_sleep_mode=spec.enable_sleep_mode,
        topology=Topology(
            nodes=topo.nodes,
            gpus_per_node=topo.gpus_per_node,
            tensor_parallel=topo.tensor_parallel,
            pipeline_parallel=topo.pipeline_parallel,
        ),
        cache_ref=spec.cache_ref,
        recipe_name=spec.recipe_name,
        recipe_revision=spec.recipe_revision,
        intent_id=spec.intent_id,
    )


def _placement(placement: _FrozenPlacement) -> Placement:
    return Placement(
        cluster=placement.cluster,
        gpu_resource=placement.gpu_resource,
        node_names=tuple(placement.node_names),
        node_selector=placement.node_selector,
        tolerations=tuple(placement.tolerations),
        queue_name=placement.queue_name,
    )


def _cache(cache: _FrozenCache) -> CacheMount:
    return CacheMount(
        cache=cache.cache,
        claim_name=cache.claim_name,
        path=cache.path,
        revision=cache.revision,
        node=cache.node,
    )
