"""The effective serving spec: a workload, optionally on top of a Recipe (the precedence below).

``resolve(workload=..., recipe=...)`` merges, field by field, the workload's own values over the
recipe's (``defaults``, ``env``, ``container``, ``command`` template, ``min_nodes`` /
``max_nodes``) over the runtime defaults, and returns an :class:`EffectiveSpec` (what the pods
are rendered from) plus the issues found on the way. ``validate_recipe`` gives a Recipe's own
issues (``Recipe.status.issues``).

Precedence rules (docs/decisions/0010-workload-rendering.md):

- ``spec.model`` replaces the recipe's model (and, when it names a different model, its pinned
  revision); ``spec.model.servedName`` beats ``defaults.served_model_name``.
- ``spec.topology`` is taken as a unit: when it equals the schema default (1 node, 1 GPU, TP 1,
  PP 1) the recipe decides (``defaults.tensor_parallel`` x ``defaults.pipeline_parallel`` GPUs
  over ``min_nodes`` nodes); any other value is the workload's choice, checked against
  ``min_nodes``/``max_nodes``. The apiserver stores schema defaults, so "unset" and "default"
  cannot be told apart; the same holds for ``spec.engine.image`` against ``container``.
- ``spec.engine.maxModelLen`` / ``gpuMemoryUtilization`` beat the recipe defaults of the same
  name; ``spec.engine.env`` is merged over the recipe env by name; ``spec.engine.args`` are
  appended last.
- A ``command`` template (``vllm serve {model} --port {port} ...``) is filled from the resolved
  settings; flags the operator owns (port, parallelism, multi-node rendezvous, served name, sleep
  mode) are taken out of it and rendered by the operator, so a template can never break probes
  or the rank layout.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api import servedname
from sparkrun_operator.api.meta import EnvVar
from sparkrun_operator.api.recipe import RecipeIssue, RecipeSpec
from sparkrun_operator.api.workload import (
    DEFAULT_ENGINE_IMAGE,
    ENGINE_PORT,
    MAX_GPUS_PER_NODE,
    InferenceWorkloadSpec,
    TopologySpec,
)
from sparkrun_operator.recipe import identity
from sparkrun_operator.recipe.flags import Issues, check_user_args, default_flags, template_args

#: Runtimes this operator serves (``vllm`` resolves to ``vllm-distributed`` in sparkrun).
SUPPORTED_RUNTIMES: Final = frozenset({"vllm", "vllm-distributed"})


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Nodes and GPUs of one replica."""

    nodes: int
    gpus_per_node: int
    tensor_parallel: int
    pipeline_parallel: int


@dataclass(frozen=True, kw_only=True)
class EffectiveSpec:
    """What a workload's pods are rendered from, after the recipe (if any) is resolved.

    ``engine_args`` are the ``vllm serve`` arguments after the model, excluding the flags the
    operator owns (see :data:`~sparkrun_operator.recipe.flags.OWNED_FLAGS`), which the renderer adds.
    """

    model: str
    model_revision: str | None
    served_name: str
    aliases: tuple[str, ...] = ()
    image: str
    engine_args: tuple[str, ...] = ()
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    env: tuple[EnvVar, ...] = ()
    enable_sleep_mode: bool = False
    topology: Topology
    cache_ref: str | None = None
    recipe_name: str | None = None
    recipe_revision: str | None = None
    intent_id: str

    def serving_identity(self) -> dict[str, Any]:
        """The fields that change the pods (hashed into the serving revision).

        Aliases (gateway routing only), the recipe's name and revision and the intent id are
        left out: they change no pod by themselves.
        """
        return {
            "model": self.model,
            "modelRevision": self.model_revision,
            "servedName": self.served_name,
            "image": self.image,
            "engineArgs": list(self.engine_args),
            "maxModelLen": self.max_model_len,
            "gpuMemoryUtilization": self.gpu_memory_utilization,
            "env": [e.to_wire() for e in self.env],
            "enableSleepMode": self.enable_sleep_mode,
            "topology": {
                "nodes": self.topology.nodes,
                "gpusPerNode": self.topology.gpus_per_node,
                "tensorParallel": self.topology.tensor_parallel,
                "pipelineParallel": self.topology.pipeline_parallel,
            },
            "cacheRef": self.cache_ref,
        }


@dataclass(frozen=True)
class Resolution:
    """The effective spec (``None`` when an error prevents serving) and every issue found."""

    spec: EffectiveSpec | None
    issues: tuple[RecipeIssue, ...] = field(default=())

    @property
    def errors(self) -> tuple[RecipeIssue, ...]:
        """Issues of severity ``error``."""
        return tuple(i for i in self.issues if i.severity == "error")


def _int_setting(settings: Mapping[str, Any], key: str, issues: Issues) -> int | None:
    raw = settings.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        issues.add("error", f"default {key!r} must be an integer, got {raw!r}", f"defaults.{key}")
        return None
    if value < 1:
        issues.add("error", f"default {key!r} must be at least 1, got {value}", f"defaults.{key}")
        return None
    return value


def _recipe_topology(recipe: RecipeSpec, issues: Issues) -> Topology | None:
    defaults = recipe.defaults or {}
    tp = _int_setting(defaults, "tensor_parallel", issues) or 1
    pp = _int_setting(defaults, "pipeline_parallel", issues) or 1
    nodes = recipe.min_nodes
    if (tp * pp) % nodes:
        issues.add(
            "error",
            f"tensor_parallel x pipeline_parallel = {tp * pp} GPUs cannot be split evenly over "
            f"min_nodes = {nodes} nodes",
            "min_nodes",
        )
        return None
    gpus = tp * pp // nodes
    if gpus > MAX_GPUS_PER_NODE:
        issues.add(
            "error",
            f"{gpus} GPUs per node (tensor_parallel x pipeline_parallel / min_nodes) exceeds "
            f"{MAX_GPUS_PER_NODE}",
            "defaults.tensor_parallel",
        )
        return None
    return Topology(nodes=nodes, gpus_per_node=gpus, tensor_parallel=tp, pipeline_parallel=pp)


def validate_recipe(recipe: RecipeSpec) -> list[RecipeIssue]:
    """A Recipe's own issues: what would stop (error) or change (warning) serving it here."""
    issues = Issues()
    _check_recipe(recipe, issues, check_args=True)
    _check_served_name((recipe.defaults or {}).get("served_model_name") or recipe.model, issues)
    if not issues.failed:
        try:
            identity.recipe_revision(recipe.to_v2())
        except ValueError as error:
            issues.add("error", str(error))
    return issues.items


def _check_recipe(recipe: RecipeSpec, issues: Issues, *, check_args: bool) -> Topology | None:
    if recipe.runtime not in SUPPORTED_RUNTIMES:
        issues.add(
            "error",
            f"runtime {recipe.runtime!r} is not served by this operator (supported: "
            f"{', '.join(sorted(SUPPORTED_RUNTIMES))}; multi-node runs use vLLM's mp backend, not Ray)",
            "runtime",
        )
    if recipe.model.startswith("/"):
        issues.add("error", "path models need a trusted recipe; serve a Hugging Face id instead", "model")
    if str((recipe.defaults or {}).get("distributed_executor_backend", "mp")).lower() == "ray":
        issues.add(
            "error", "distributed_executor_backend ray is not supported: multi-node runs use mp", "defaults"
        )
    for hook in ("pre_exec", "post_exec", "post_commands"):
        if getattr(recipe, hook):
            issues.add("warning", f"{hook} hooks run only when the recipe is trusted (docs/recipes.md)", hook)
    # NB: resolve() builds the arguments itself, so it skips this to report each issue once.
    if check_args and recipe.command is not None:
        template_args(recipe.command, settings=_template_settings(recipe=recipe, overrides={}), issues=issues)
    elif check_args:
        default_flags(recipe.defaults or {}, issues=issues)
    topology = _recipe_topology(recipe, issues)
    if recipe.max_nodes is not None and recipe.min_nodes > recipe.max_nodes:
        issues.add("error", "max_nodes must be at least min_nodes", "max_nodes")
    return topology


def _check_served_name(value: Any, issues: Issues, where: str = "defaults.served_model_name") -> None:
    """An error when a served name cannot be a name clients route by: the one definition of
    ``api/servedname.py``, which admission applies to ``spec.model.servedName``, ``aliases`` and
    ``name`` (a workload stored before that rule is refused here, so ``status.model`` never
    carries a name admission would refuse).

    It becomes the engine's ``--served-model-name`` and ``status.model.servedName``, and the
    gateway matches it against the ``model`` of requests and lists it: a control or format
    character (a line break, a tab, NUL, a bidi override) would split, corrupt or disguise it.
    A recipe's may be a number (sparkrun renders it as text).
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        issues.add("error", f"served_model_name must be a string, got {type(value).__name__}", where)
        return
    problem = servedname.problem(str(value))
    if problem is not None:
        hint = (
            "; set a shorter served_model_name (or spec.model.servedName)"
            if problem.startswith("has ")
            else ""
        )
        issues.add("error", f"the served name {problem}{hint}", where)


def _check_workload_names(workload: InferenceWorkloadSpec, issues: Issues) -> None:
    """The workload's own names (``spec.model``): each held to the served-name rule."""
    ref = workload.model
    if ref is None:
        return
    _check_served_name(ref.name, issues, "spec.model.name")
    if ref.served_name is not None:
        _check_served_name(ref.served_name, issues, "spec.model.servedName")
    for i, alias in enumerate(ref.aliases):
        _check_served_name(alias, issues, f"spec.model.aliases[{i}]")


def _template_settings(*, recipe: RecipeSpec, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What ``{key}`` placeholders resolve from: recipe defaults, injected keys, then overrides."""
    # NB: sparkrun collapses {{/}} escapes in a default only when the value uses them ("{{" in
    # it): a plain JSON value's "}}" closes nested objects and must stay as written.
    settings: dict[str, Any] = {
        key: value.replace("{{", "{").replace("}}", "}")
        if isinstance(value, str) and "{{" in value
        else value
        for key, value in (recipe.defaults or {}).items()
    }
    settings.setdefault("model", recipe.model)
    if recipe.model_revision:
        settings.setdefault("model_revision", recipe.model_revision)
    settings.setdefault("port", ENGINE_PORT)
    settings.setdefault("host", "0.0.0.0")
    settings.setdefault("tensor_parallel", 1)
    settings.setdefault("pipeline_parallel", 1)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return settings


def _merge_env(base: Mapping[str, str] | None, top: Iterable[EnvVar]) -> tuple[EnvVar, ...]:
    merged: dict[str, EnvVar] = {name: EnvVar(name=name, value=value) for name, value in (base or {}).items()}
    for env in top:
        merged.pop(env.name, None)
        merged[env.name] = env
    return tuple(merged.values())


def resolve(*, workload: InferenceWorkloadSpec, recipe: RecipeSpec | None) -> Resolution:
    """The effective serving spec of ``workload`` served from ``recipe`` (``None``: no recipe).

    Errors (unsupported runtime, a broken template, a topology the recipe does not allow, user
    arguments that set operator-owned flags) give ``Resolution.spec = None``.
    """
    issues = Issues()
    issues.items.extend(check_user_args(workload.engine.args))
    if recipe is None:
        return _resolve_plain(workload, issues)
    return _resolve_recipe(workload, recipe, issues)


def _resolve_plain(workload: InferenceWorkloadSpec, issues: Issues) -> Resolution:
    if workload.model is None:
        issues.add("error", "spec.model is required when no recipe is named", "spec.model")
        return Resolution(None, tuple(issues.items))
    _check_workload_names(workload, issues)
    topo = workload.topology
    topology = Topology(
        nodes=topo.nodes,
        gpus_per_node=topo.gpus_per_node,
        tensor_parallel=topo.tensor_parallel,
        pipeline_parallel=topo.pipeline_parallel,
    )
    served = workload.model.served_name or workload.model.name
    synthetic: dict[str, Any] = {
        "runtime": "vllm",
        "model": workload.model.name,
        "container": workload.engine.image,
        "defaults": {
            "port": ENGINE_PORT,
            "tensor_parallel": topology.tensor_parallel,
            "pipeline_parallel": topology.pipeline_parallel,
        },
    }
    if workload.model.served_name:
        synthetic["defaults"]["served_model_name"] = workload.model.served_name
    if issues.failed:
        return Resolution(None, tuple(issues.items))
    spec = EffectiveSpec(
        model=workload.model.name,
        model_revision=workload.model.revision,
        served_name=served,
        aliases=tuple(workload.model.aliases),
        image=workload.engine.image,
        engine_args=tuple(workload.engine.args),
        max_model_len=workload.engine.max_model_len,
        gpu_memory_utilization=workload.engine.gpu_memory_utilization,
        env=tuple(workload.engine.env),
        enable_sleep_mode=workload.engine.enable_sleep_mode,
        topology=topology,
        cache_ref=workload.model.cache_ref.name if workload.model.cache_ref else None,
        intent_id=identity.intent_id(synthetic),
    )
    return Resolution(spec, tuple(issues.items))


@dataclass(frozen=True, kw_only=True)
class _Choices:
    """The recipe's values with the workload's own choices on top (before the arguments)."""

    model: str
    model_revision: str | None
    #: As the recipe gives it (a template fills it in as is).
    served: Any
    image: str
    topology: Topology | None
    max_model_len: int | None
    gpu_util: float | None


def _resolve_recipe(workload: InferenceWorkloadSpec, recipe: RecipeSpec, issues: Issues) -> Resolution:
    recipe_topology = _check_recipe(recipe, issues, check_args=False)
    chosen = _choices(workload, recipe, recipe_topology, issues)
    _check_workload_names(workload, issues)
    ref = workload.model
    recipe_named = bool((recipe.defaults or {}).get("served_model_name"))
    if ref is None or (not ref.served_name and recipe_named):
        _check_served_name(chosen.served, issues)  # the recipe's name (the workload's checked above)
    topology = chosen.topology
    if topology is None or issues.failed:
        return Resolution(None, tuple(issues.items))
    overrides = _identity_overrides(
        workload=workload,
        recipe=recipe,
        topology=topology,
        max_model_len=chosen.max_model_len,
        gpu_util=chosen.gpu_util,
    )
    base = _base_args(recipe, chosen, overrides, issues)
    if base is None or issues.failed:
        return Resolution(None, tuple(issues.items))
    identity_recipe = recipe.to_v2()
    identity_recipe["model"] = chosen.model
    if chosen.model_revision:
        identity_recipe["model_revision"] = chosen.model_revision
    else:
        identity_recipe.pop("model_revision", None)
    identity_recipe["container"] = chosen.image
    try:
        intent = identity.intent_id(identity_recipe, overrides)
        revision = identity.recipe_revision(recipe.to_v2())
    except ValueError as error:
        issues.add("error", str(error))
        return Resolution(None, tuple(issues.items))
    ref = workload.model
    spec = EffectiveSpec(
        model=chosen.model,
        model_revision=chosen.model_revision,
        served_name=str(chosen.served),
        aliases=tuple(ref.aliases) if ref else (),
        image=chosen.image,
        engine_args=(*base, *workload.engine.args),
        max_model_len=chosen.max_model_len,
        gpu_memory_utilization=chosen.gpu_util,
        env=_merge_env(recipe.env, workload.engine.env),
        enable_sleep_mode=workload.engine.enable_sleep_mode,
        topology=topology,
        cache_ref=ref.cache_ref.name if ref is not None and ref.cache_ref else None,
        recipe_name=workload.recipe.name if workload.recipe else None,
        recipe_revision=revision,
        intent_id=intent,
    )
    return Resolution(spec, tuple(issues.items))


def _choices(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, recipe_topology: Topology | None, issues: Issues
) -> _Choices:
    """Model, served name, image, topology and engine settings: the workload's over the recipe's."""
    defaults = recipe.defaults or {}
    ref = workload.model
    model = ref.name if ref is not None else recipe.model
    if ref is not None and ref.revision:
        model_revision: str | None = ref.revision
    elif model == recipe.model:
        model_revision = recipe.model_revision
    else:
        model_revision = None
    served = (ref.served_name if ref else None) or defaults.get("served_model_name") or model
    image = workload.engine.image
    if image == DEFAULT_ENGINE_IMAGE and recipe.container:
        image = recipe.container
    topology = (
        recipe_topology if workload.topology == TopologySpec() else _own_topology(workload, recipe, issues)
    )
    max_model_len = workload.engine.max_model_len or _int_setting(defaults, "max_model_len", issues)
    gpu_util = workload.engine.gpu_memory_utilization
    if gpu_util is None and defaults.get("gpu_memory_utilization") is not None:
        try:
            gpu_util = float(defaults["gpu_memory_utilization"])
        except (TypeError, ValueError):
            issues.add(
                "error",
                "default 'gpu_memory_utilization' must be a number",
                "defaults.gpu_memory_utilization",
            )
    return _Choices(
        model=model,
        model_revision=model_revision,
        served=served,
        image=image,
        topology=topology,
        max_model_len=max_model_len,
        gpu_util=gpu_util,
    )


def _own_topology(workload: InferenceWorkloadSpec, recipe: RecipeSpec, issues: Issues) -> Topology:
    """The workload's own topology, checked against the recipe's ``min_nodes``/``max_nodes``."""
    topo = workload.topology
    if topo.nodes < recipe.min_nodes:
        issues.add(
            "error",
            f"spec.topology.nodes = {topo.nodes}, but the recipe needs at least "
            f"min_nodes = {recipe.min_nodes}",
            "spec.topology.nodes",
        )
    if recipe.max_nodes is not None and topo.nodes > recipe.max_nodes:
        issues.add(
            "error",
            f"spec.topology.nodes = {topo.nodes}, but the recipe runs on at most "
            f"max_nodes = {recipe.max_nodes}",
            "spec.topology.nodes",
        )
    return Topology(
        nodes=topo.nodes,
        gpus_per_node=topo.gpus_per_node,
        tensor_parallel=topo.tensor_parallel,
        pipeline_parallel=topo.pipeline_parallel,
    )


def _base_args(
    recipe: RecipeSpec, chosen: _Choices, overrides: Mapping[str, Any], issues: Issues
) -> list[str] | None:
    """The recipe's ``vllm serve`` arguments: its filled command template, else its default flags."""
    if recipe.command is None:
        return default_flags(recipe.defaults or {}, issues=issues)
    settings = _template_settings(
        recipe=recipe, overrides={**overrides, "model": chosen.model, "served_model_name": chosen.served}
    )
    if chosen.model_revision:
        settings["model_revision"] = chosen.model_revision
    return template_args(recipe.command, settings=settings, issues=issues)


def _identity_overrides(
    *,
    workload: InferenceWorkloadSpec,
    recipe: RecipeSpec,
    topology: Topology,
    max_model_len: int | None,
    gpu_util: float | None,
) -> dict[str, Any]:
    """Launch overrides (sparkrun ``-o key=value``) equivalent to the workload's own choices.

    Only values that differ from the recipe's are overrides, so a workload that changes nothing
    has the same intent id as ``sparkrun run <recipe>``.
    """
    defaults = recipe.defaults or {}
    overrides: dict[str, Any] = {}
    if defaults.get("port") is not None and str(defaults["port"]) != str(ENGINE_PORT):
        overrides["port"] = ENGINE_PORT
    served = workload.model.served_name if workload.model is not None else None
    if served and served != defaults.get("served_model_name"):
        overrides["served_model_name"] = served
    for key, value in (
        ("tensor_parallel", topology.tensor_parallel),
        ("pipeline_parallel", topology.pipeline_parallel),
    ):
        if str(defaults.get(key, 1)) != str(value):
            overrides[key] = value
    if workload.engine.max_model_len is not None and max_model_len != defaults.get("max_model_len"):
        overrides["max_model_len"] = max_model_len
    if workload.engine.gpu_memory_utilization is not None and gpu_util != defaults.get(
        "gpu_memory_utilization"
    ):
        overrides["gpu_memory_utilization"] = gpu_util
    return overrides
