"""The effective serving spec: a workload, optionally on top of a Recipe (RECIPES.md precedence).

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

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api.meta import EnvVar
from sparkrun_operator.api.recipe import RecipeIssue, RecipeSpec
from sparkrun_operator.api.workload import (
    DEFAULT_ENGINE_IMAGE,
    ENGINE_PORT,
    MAX_GPUS_PER_NODE,
    InferenceWorkloadSpec,
    TopologySpec,
)
from sparkrun_operator.render import recipe_identity

Severity = Literal["error", "warning"]

#: Runtimes this operator serves (``vllm`` resolves to ``vllm-distributed`` in sparkrun).
SUPPORTED_RUNTIMES: Final = frozenset({"vllm", "vllm-distributed"})

#: ``vllm serve`` flags the operator renders itself; users and templates may not set them.
#: Value: whether the flag takes a value (``--served-model-name`` takes one or more).
OWNED_FLAGS: Final[Mapping[str, bool]] = {
    "--model": True,
    "--host": True,
    "--port": True,
    "--served-model-name": True,
    "--tensor-parallel-size": True,
    "-tp": True,
    "--pipeline-parallel-size": True,
    "-pp": True,
    "--distributed-executor-backend": True,
    "--nnodes": True,
    "--node-rank": True,
    "--master-addr": True,
    "--master-port": True,
    "--headless": False,
    "--enable-sleep-mode": False,
    "--revision": True,
    "--max-model-len": True,
    "--gpu-memory-utilization": True,
}

_WHERE_OWNED: Final[Mapping[str, str]] = {
    "--model": "spec.model.name",
    "--revision": "spec.model.revision",
    "--served-model-name": "spec.model.servedName",
    "--tensor-parallel-size": "spec.topology.tensorParallel",
    "-tp": "spec.topology.tensorParallel",
    "--pipeline-parallel-size": "spec.topology.pipelineParallel",
    "-pp": "spec.topology.pipelineParallel",
    "--enable-sleep-mode": "spec.engine.enableSleepMode",
    "--max-model-len": "spec.engine.maxModelLen",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
}

#: Recipe ``defaults`` keys the operator consumes itself (not turned into extra flags).
_CONSUMED_DEFAULTS: Final = frozenset(
    {
        "port",
        "host",
        "tensor_parallel",
        "pipeline_parallel",
        "served_model_name",
        "max_model_len",
        "gpu_memory_utilization",
        "model",
        "model_revision",
        "distributed_executor_backend",
    }
)

#: Recipe ``defaults`` keys rendered as ``vllm serve`` flags when the recipe has no command
#: template. ``None``: a value flag; ``"bool"``: a switch (``True`` sets it);
#: ``"optional-bool"``: vLLM's ``--x`` / ``--no-x`` pair.
_DEFAULT_FLAGS: Final[Mapping[str, str | None]] = {
    "max_num_batched_tokens": None,
    "max_num_seqs": None,
    "dtype": None,
    "quantization": None,
    "kv_cache_dtype": None,
    "load_format": None,
    "tool_call_parser": None,
    "reasoning_parser": None,
    "chat_template": None,
    "swap_space": None,
    "block_size": None,
    "seed": None,
    "trust_remote_code": "bool",
    "enforce_eager": "bool",
    "enable_auto_tool_choice": "bool",
    "enable_prefix_caching": "optional-bool",
    "enable_chunked_prefill": "optional-bool",
}

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
    operator owns (see :data:`OWNED_FLAGS`), which the renderer adds.
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


class _Issues:
    def __init__(self) -> None:
        self.items: list[RecipeIssue] = []

    def add(self, severity: Severity, message: str, field: str | None = None) -> None:
        self.items.append(RecipeIssue(severity=severity, message=message, field=field))

    @property
    def failed(self) -> bool:
        return any(i.severity == "error" for i in self.items)


def flag_name(token: str) -> str | None:
    """The normalised flag of an argument (``--max_model_len=8`` -> ``--max-model-len``), else None."""
    if not token.startswith("-") or token == "-" or token == "--":
        return None
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def check_user_args(args: Iterable[str], *, path: str = "spec.engine.args") -> list[RecipeIssue]:
    """Errors for user arguments that set a flag the operator owns."""
    issues: list[RecipeIssue] = []
    for i, arg in enumerate(args):
        name = flag_name(arg)
        if name is not None and name in OWNED_FLAGS:
            where = _WHERE_OWNED.get(name)
            hint = f"set {where} instead" if where else "the operator sets it"
            issues.append(
                RecipeIssue(
                    severity="error", message=f"{path} may not set {name}: {hint}", field=f"{path}[{i}]"
                )
            )
    return issues


def strip_owned(tokens: Iterable[str]) -> list[str]:
    """``tokens`` without any flag in :data:`OWNED_FLAGS` (and the values those flags take)."""
    out: list[str] = []
    skipping_values = False
    multi = False
    for token in tokens:
        name = flag_name(token)
        if skipping_values:
            if name is None:
                if multi:
                    continue
                skipping_values = False
                continue
            skipping_values = False
        if name is not None and name in OWNED_FLAGS:
            takes_value = OWNED_FLAGS[name]
            if takes_value and "=" not in token:
                skipping_values = True
                multi = name == "--served-model-name"
            continue
        out.append(token)
    return out


def fill_template(template: str, *, settings: Mapping[str, Any]) -> tuple[str, list[str]]:
    """Fill ``{key}`` placeholders (``{{``/``}}`` are literal braces); returns text and missing keys."""
    missing: list[str] = []

    def sub(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "{{":
            return "{"
        if whole == "}}":
            return "}"
        key = match.group(1)
        if key not in settings or settings[key] is None:
            missing.append(key)
            return whole
        return _format_value(settings[key])

    return _PLACEHOLDER.sub(sub, template), missing


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def template_args(command: str, *, settings: Mapping[str, Any], issues: _Issues) -> list[str] | None:
    """Arguments after the model from a ``vllm serve`` command template, owned flags removed."""
    text, missing = fill_template(command, settings=settings)
    for key in dict.fromkeys(missing):
        issues.add("error", f"command template uses {{{key}}}, which no default or field provides", "command")
    try:
        tokens = shlex.split(text.replace("\\\n", " "))
    except ValueError as error:
        issues.add("error", f"command template is not valid shell syntax: {error}", "command")
        return None
    if tokens[:2] != ["vllm", "serve"]:
        shown = " ".join(tokens[:2]) or "(empty)"
        issues.add(
            "error",
            f"command must start with 'vllm serve' (this operator runs vLLM), not {shown!r}",
            "command",
        )
        return None
    rest = tokens[2:]
    if rest and flag_name(rest[0]) is None:
        rest = rest[1:]  # the positional model: the operator renders it
    return strip_owned(rest)


def default_flags(defaults: Mapping[str, Any], *, issues: _Issues) -> list[str]:
    """``vllm serve`` flags for recipe defaults the operator knows (no command template)."""
    out: list[str] = []
    for key in sorted(defaults):
        value = defaults[key]
        if key in _CONSUMED_DEFAULTS or value is None:
            continue
        if key not in _DEFAULT_FLAGS:
            issues.add(
                "warning",
                f"default {key!r} maps to no vllm serve flag the operator knows; without a command "
                "template it is not passed to the engine",
                f"defaults.{key}",
            )
            continue
        flag = "--" + key.replace("_", "-")
        kind = _DEFAULT_FLAGS[key]
        if kind is None:
            out += [flag, _format_value(value)]
        elif bool(value):
            out.append(flag)
        elif kind == "optional-bool":
            out.append("--no-" + flag[2:])
    return out


def _int_setting(settings: Mapping[str, Any], key: str, issues: _Issues) -> int | None:
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


def _recipe_topology(recipe: RecipeSpec, issues: _Issues) -> Topology | None:
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
    issues = _Issues()
    _check_recipe(recipe, issues, check_args=True)
    if not issues.failed:
        try:
            recipe_identity.recipe_revision(recipe.to_v2())
        except ValueError as error:
            issues.add("error", str(error))
    return issues.items


def _check_recipe(recipe: RecipeSpec, issues: _Issues, *, check_args: bool) -> Topology | None:
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
            issues.add("warning", f"{hook} hooks need trust and are not run by the operator", hook)
    # NB: resolve() builds the arguments itself, so it skips this to report each issue once.
    if check_args and recipe.command is not None:
        template_args(recipe.command, settings=_template_settings(recipe=recipe, overrides={}), issues=issues)
    elif check_args:
        default_flags(recipe.defaults or {}, issues=issues)
    topology = _recipe_topology(recipe, issues)
    if recipe.max_nodes is not None and recipe.min_nodes > recipe.max_nodes:
        issues.add("error", "max_nodes must be at least min_nodes", "max_nodes")
    return topology


def _template_settings(*, recipe: RecipeSpec, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What ``{key}`` placeholders resolve from: recipe defaults, injected keys, then overrides."""
    settings: dict[str, Any] = {
        key: value.replace("{{", "{").replace("}}", "}") if isinstance(value, str) else value
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
    issues = _Issues()
    issues.items.extend(check_user_args(workload.engine.args))
    if recipe is None:
        return _resolve_plain(workload, issues)
    return _resolve_recipe(workload, recipe, issues)


def _resolve_plain(workload: InferenceWorkloadSpec, issues: _Issues) -> Resolution:
    if workload.model is None:
        issues.add("error", "spec.model is required when no recipe is named", "spec.model")
        return Resolution(None, tuple(issues.items))
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
        intent_id=recipe_identity.intent_id(synthetic),
    )
    return Resolution(spec, tuple(issues.items))


def _resolve_recipe(workload: InferenceWorkloadSpec, recipe: RecipeSpec, issues: _Issues) -> Resolution:
    recipe_topology = _check_recipe(recipe, issues, check_args=False)
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

    if workload.topology == TopologySpec():
        topology = recipe_topology
    else:
        topo = workload.topology
        topology = Topology(
            nodes=topo.nodes,
            gpus_per_node=topo.gpus_per_node,
            tensor_parallel=topo.tensor_parallel,
            pipeline_parallel=topo.pipeline_parallel,
        )
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

    if topology is None or issues.failed:
        return Resolution(None, tuple(issues.items))

    overrides = _identity_overrides(
        workload=workload, recipe=recipe, topology=topology, max_model_len=max_model_len, gpu_util=gpu_util
    )
    if recipe.command is not None:
        settings = _template_settings(
            recipe=recipe, overrides={**overrides, "model": model, "served_model_name": served}
        )
        if model_revision:
            settings["model_revision"] = model_revision
        base = template_args(recipe.command, settings=settings, issues=issues)
    else:
        base = default_flags(defaults, issues=issues)
    if base is None or issues.failed:
        return Resolution(None, tuple(issues.items))

    identity_recipe = recipe.to_v2()
    identity_recipe["model"] = model
    if model_revision:
        identity_recipe["model_revision"] = model_revision
    else:
        identity_recipe.pop("model_revision", None)
    identity_recipe["container"] = image
    try:
        intent = recipe_identity.intent_id(identity_recipe, overrides)
        revision = recipe_identity.recipe_revision(recipe.to_v2())
    except ValueError as error:
        issues.add("error", str(error))
        return Resolution(None, tuple(issues.items))

    spec = EffectiveSpec(
        model=model,
        model_revision=model_revision,
        served_name=str(served),
        aliases=tuple(ref.aliases) if ref else (),
        image=image,
        engine_args=(*base, *workload.engine.args),
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_util,
        env=_merge_env(recipe.env, workload.engine.env),
        enable_sleep_mode=workload.engine.enable_sleep_mode,
        topology=topology,
        cache_ref=ref.cache_ref.name if ref is not None and ref.cache_ref else None,
        recipe_name=workload.recipe.name if workload.recipe else None,
        recipe_revision=revision,
        intent_id=intent,
    )
    return Resolution(spec, tuple(issues.items))


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
