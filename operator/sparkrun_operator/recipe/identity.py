"""Recipe identity: sparkrun's intent id, recipe revision and workload id, recomputed here.

Status fields (``Recipe.status.intentId`` / ``revision``, ``InferenceWorkload.status.workloadId``)
must read the same as the ids sparkrun itself prints. This module computes them with our own code
from a v2 recipe given as a plain mapping with sparkrun's snake_case YAML keys, plus optional
launch overrides (``key -> value``, what ``sparkrun run -o key=value`` / ``--tp`` / ``--port``
produce). ``tests/unit/test_recipe_identity.py`` checks every result against goldens that
``hack/recipe-goldens.py`` generates with the reference package itself.

Where the behaviour comes from (sparkrun 0.4.1, ``src/sparkrun/``):

* ``orchestration/job_metadata.py``: ``generate_intent_id`` (runtime, model, declared image,
  per-host images, ``port``, ``served_model_name``, parallelism other than 1; launch override
  first, then recipe default, via ``_resolve_override``), ``derive_recipe_fingerprint`` (the
  intent id, the declared config chain as sorted ``key=json``, then container, command,
  model_revision, runtime_version, min_nodes, max_nodes, env, mods, runtime_config, layout,
  per-host images, declared hooks read from the raw recipe), ``generate_cluster_id`` and
  ``derive_placement_token_from_hosts`` (the ``sparkrun_<intent>_<placement>`` form, lengths
  ``INTENT_ID_LEN`` / ``PLACEMENT_TOKEN_LEN`` / ``RECIPE_FINGERPRINT_LEN``).
* ``core/recipe.py``: ``Recipe.__init__`` (field defaults; ``mode`` / ``solo_only`` /
  ``cluster_only`` applied to ``min_nodes`` / ``max_nodes``; keys outside ``_KNOWN_KEYS`` swept
  into ``runtime_config`` unless it already names them; ``mods`` migrated out of
  ``runtime_config`` when the top level has none; env values ``str()``-ed),
  ``_validate_resolution_shapes``, ``Recipe.resolve`` with the resolvers
  ``_resolve_runtime_from_command_hint``, ``_resolve_brace_escapes`` (``{{``/``}}`` collapsed in
  string defaults) and ``_resolve_vllm_variant`` (bare ``vllm`` becomes ``vllm-distributed`` or
  ``vllm-ray``), ``Recipe.build_config_chain(declared=True)`` (defaults plus ``model``,
  ``model_revision`` when pinned, ``resolved_model_path``; overrides on top) and
  ``Recipe.export_env``.
* ``core/dotted_overrides.py``: ``fold_dotted_overrides`` (``-o a.b=1`` refines the mapping
  ``a``), applied where the config chain is built.
* ``core/parallelism.py``: ``PARALLELISM_KEYS``.
* ``core/env_templates.py``: ``canonical_env``, which leaves a recipe's own env unchanged (it only
  escapes values set with ``-e`` on the command line, which launch overrides here cannot do).
* ``core/images.py``: ``parse_container_entries`` (per-host ``containers:``).
* ``core/layout.py``: ``RecipeLayout.from_dict`` / ``to_dict``.
* ``core/resolve.py``: ``apply_recipe_overrides`` routes ``env.KEY`` overrides into the env and
  ``split_executor_overrides`` lifts executor keys out before anything is hashed.
* ``scitrera_app_framework.api.variables.Variables`` (the config chain): its keys are the union
  of every layer's keys, and a lookup takes the first layer holding the key, even when the value
  there is ``None``.

Scope. The digests equal sparkrun's for a recipe sparkrun loads from a local file (no registry
``include:``) with no recipe-item plugins installed (sparkrun ships none; with one installed, the
key it claims would be hashed as ``plugin:<key>`` instead of inside ``runtime_config``). Keys
whose digest needs context we do not model raise ``ValueError`` naming the key: ``include``,
``overrides`` (conditional per-hardware layers), ``cluster_config`` (host-path launch overrides),
``env_templates``, and ``recipe_version`` other than 2. Launch overrides may not carry
``env.KEY`` or executor settings (sparkrun removes those before hashing). This is identity, not
validation: recipes sparkrun would reject for reasons that do not reach the digests (for example
a malformed ``{config.X}`` env template or ``readiness`` block) are not detected here.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkrun_operator import safeload

__all__ = [
    "INTENT_ID_LEN",
    "PLACEMENT_TOKEN_LEN",
    "RECIPE_REVISION_LEN",
    "WORKLOAD_ID_PREFIX",
    "intent_id",
    "placement_token_for",
    "recipe_revision",
    "workload_id",
]

INTENT_ID_LEN = 16
PLACEMENT_TOKEN_LEN = 12
RECIPE_REVISION_LEN = 12
WORKLOAD_ID_PREFIX = "sparkrun"

_INTENT_RE = re.compile(f"[0-9a-f]{{{INTENT_ID_LEN}}}")
_PLACEMENT_RE = re.compile(f"[0-9a-f]{{{PLACEMENT_TOKEN_LEN}}}")

# Long config key -> short name used in the intent id, in hashing order.
_PARALLELISM = (
    ("tensor_parallel", "tp"),
    ("pipeline_parallel", "pp"),
    ("data_parallel", "dp"),
    ("expert_parallel", "ep"),
    ("context_parallel", "cp"),
)

# Top-level keys sparkrun's recipe loader knows; every other key lands in runtime_config.
_RECIPE_KEYS = frozenset(
    {
        "benchmark",
        "builder",
        "builder_config",
        "capabilities",
        "cluster_config",
        "cluster_only",
        "command",
        "container",
        "containers",
        "defaults",
        "description",
        "distribution_config",
        "env",
        "executor",
        "executor_config",
        "include",
        "layout",
        "max_nodes",
        "metadata",
        "min_nodes",
        "min_sparkrun_version",
        "mode",
        "model",
        "model_revision",
        "mods",
        "name",
        "overrides",
        "post_commands",
        "post_exec",
        "pre_exec",
        "readiness",
        "recipe_version",
        "runtime",
        "runtime_cache",
        "runtime_config",
        "runtime_version",
        "scheduler",
        "solo_only",
        "sparkrun_version",
        "stop_after_post",
        "unsupported_capabilities",
    }
)

_UNSUPPORTED_KEYS = {
    "include": "recipe includes are resolved against files and registries; inline the base recipe",
    "overrides": "conditional per-hardware override layers are not supported",
    "cluster_config": "sparkrun-internal launch overrides (host paths) are not supported",
    "env_templates": "not a recipe field; sparkrun rejects it (put templates directly in env)",
}

# Launch-override keys sparkrun lifts into the executor config before hashing.
_EXECUTOR_OVERRIDE_KEYS = frozenset(
    {
        "auto_remove",
        "cap_add",
        "devices",
        "entrypoint",
        "gpus",
        "ipc",
        "memory_limit",
        "network",
        "privileged",
        "restart_policy",
        "security_opt",
        "shm_size",
        "ulimit",
        "user",
    }
)

_HOOKS = ("pre_exec", "post_exec", "post_commands")

_CMD_RUNTIME_HINTS = (
    (re.compile(r"^vllm\s+serve\b"), "vllm"),
    (re.compile(r"^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b"), "sglang"),
    (re.compile(r"^llama-server\b"), "llama-cpp"),
    (re.compile(r"^(?:trtllm-serve|mpirun\b.*trtllm)"), "trtllm"),
)
_RAY_BACKEND_FLAG = re.compile(r"--distributed-executor-backend\s+ray\b")


@dataclass(frozen=True)
class _Resolved:
    """The recipe fields the digests read, normalised the way sparkrun's loader does."""

    runtime: str
    model: str
    container: Any
    containers: tuple[tuple[str, str], ...]
    defaults: dict[str, Any]
    env: dict[str, str]
    command: str | None
    model_revision: Any
    runtime_version: Any
    min_nodes: int
    max_nodes: Any
    mods: list[Any]
    runtime_config: dict[Any, Any]
    layout: dict[str, Any] | None
    hooks: tuple[tuple[str, Any], ...]


def intent_id(recipe: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> str:
    """sparkrun's intent id (16 hex) for *recipe* launched with *overrides*.

    Hashes the resolved runtime, the model, the declared image(s), the port, the served model
    name and every parallelism degree other than 1; hosts are never part of it.
    """
    checked = _check_overrides(overrides)
    return _intent(_resolve(recipe, checked), checked)


def recipe_revision(recipe: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> str:
    """sparkrun's recipe fingerprint (12 hex), shown as ``recipe_revision``.

    Covers the intent id and the whole declared serve configuration; ``metadata``, hosts and
    image digests are left out, so editing a description does not change it.
    """
    checked = _check_overrides(overrides)
    resolved = _resolve(recipe, checked)
    parts = [_intent(resolved, checked)]
    parts.extend(_config_chain_parts(resolved, checked))
    for name, value in (
        ("container", resolved.container),
        ("command", resolved.command),
        ("model_revision", resolved.model_revision),
        ("runtime_version", resolved.runtime_version),
        ("min_nodes", resolved.min_nodes),
        ("max_nodes", resolved.max_nodes),
        ("env", resolved.env),
        ("mods", resolved.mods),
        ("runtime_config", resolved.runtime_config),
        ("layout", resolved.layout),
    ):
        parts.append(name + "=" + _canonical(value))
    if resolved.containers:
        parts.append("containers=" + _canonical([list(pair) for pair in sorted(resolved.containers)]))
    parts.extend(hook + "=" + _canonical(value) for hook, value in resolved.hooks)
    return _digest(parts, RECIPE_REVISION_LEN)


def workload_id(intent: str, placement_token: str) -> str:
    """Compose ``sparkrun_<intent>_<placement>``, validating both halves (lowercase hex)."""
    if not isinstance(intent, str) or not _INTENT_RE.fullmatch(intent):
        raise ValueError(f"intent id must be {INTENT_ID_LEN} lowercase hex characters, got {intent!r}")
    if not isinstance(placement_token, str) or not _PLACEMENT_RE.fullmatch(placement_token):
        raise ValueError(
            f"placement token must be {PLACEMENT_TOKEN_LEN} lowercase hex characters, got {placement_token!r}"
        )
    return f"{WORKLOAD_ID_PREFIX}_{intent}_{placement_token}"


def placement_token_for(*parts: str) -> str:
    """A deterministic 12-hex placement token from the given identity parts.

    sparkrun makes the placement token either at random per launch or from the host set (sha256
    over the sorted host names joined by NUL). Hosts are not known when a Kubernetes object is
    created, and a token that changed with them would rename the workload, so we derive it from
    the object's identity instead: call this with its namespace, name and uid. The same
    construction is used (NUL-joined, sha256, first 12 hex), but the parts keep their order.
    """
    if not parts:
        raise ValueError("placement_token_for needs at least one part")
    for part in parts:
        if not isinstance(part, str) or not part:
            raise ValueError(f"placement token parts must be non-empty strings, got {part!r}")
        if "\0" in part:
            raise ValueError("placement token parts may not contain NUL")
    return _digest(parts, PLACEMENT_TOKEN_LEN)


# ---------------------------------------------------------------------------
# Digests
# ---------------------------------------------------------------------------


def _digest(parts: Iterable[str], length: int) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def _canonical(value: Any) -> str:
    """One value as sparkrun encodes it: JSON, mapping keys sorted, list order kept."""
    return json.dumps(value, sort_keys=True, default=str)


def _override_or_default(key: str, overrides: Mapping[str, Any], defaults: Mapping[str, Any]) -> Any:
    """Launch override, else recipe default; an override of ``None`` counts as unset."""
    value = overrides.get(key)
    if value is None:
        value = defaults.get(key)
    return value


def _intent(resolved: _Resolved, overrides: Mapping[str, Any]) -> str:
    parts = [resolved.runtime, resolved.model]
    if resolved.container:
        parts.append("image=" + str(resolved.container))
    parts.extend(f"image@{host}={image}" for host, image in sorted(resolved.containers))
    port = _override_or_default("port", overrides, resolved.defaults)
    if port is not None:
        parts.append("port=" + str(port))
    served_name = _override_or_default("served_model_name", overrides, resolved.defaults)
    if served_name is not None:
        parts.append("name=" + str(served_name))
    for key, short in _PARALLELISM:
        raw = _override_or_default(key, overrides, resolved.defaults)
        if raw is None:
            continue
        try:
            degree = int(raw)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{key} must be an integer, got {raw!r}") from error
        if degree != 1:
            parts.append(f"{short}={degree}")
    return _digest(parts, INTENT_ID_LEN)


def _config_chain_parts(resolved: _Resolved, overrides: Mapping[str, Any]) -> list[str]:
    """The declared config chain (overrides over defaults over injected keys), sorted by key."""
    base = dict(resolved.defaults)
    base.setdefault("model", resolved.model)
    if resolved.model_revision:
        base.setdefault("model_revision", resolved.model_revision)
    base.setdefault("resolved_model_path", resolved.model)
    top = _fold_dotted(overrides, base.get)
    parts = []
    for key in sorted(set(top) | set(base)):
        # The top-level pin is injected for command templates; sparkrun hashes it only through
        # the model_revision field below unless defaults or overrides name it themselves.
        if key == "model_revision" and key not in resolved.defaults and key not in overrides:
            continue
        value = top[key] if key in top else base[key]
        parts.append(f"{key}={_canonical(value)}")
    return parts


# ---------------------------------------------------------------------------
# Launch overrides
# ---------------------------------------------------------------------------


def _check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    if not overrides:
        return {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"overrides must be a mapping, got {type(overrides).__name__}")
    for key in overrides:
        if not isinstance(key, str) or not key:
            raise ValueError(f"override keys must be non-empty strings, got {key!r}")
        if key.startswith("env."):
            raise ValueError(f"override {key!r} sets the container env; put it in the recipe env instead")
        if key in _EXECUTOR_OVERRIDE_KEYS:
            raise ValueError(f"override {key!r} is an executor setting, not part of the serve configuration")
    return dict(overrides)


def _is_dotted(key: str) -> bool:
    if "." not in key or key.startswith(("_", "env.")):
        return False
    return all(key.split("."))


def _as_mapping(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    parsed = _leaf(value)
    if isinstance(parsed, dict):
        return parsed
    raise ValueError(f"cannot set a field inside {what}: its value {value!r} is not a mapping")


def _leaf(value: Any) -> Any:
    """A JSON-looking string as its value (within ``safeload.OVERRIDE_VALUE``; over it is a
    ``ValueError``), any other string as itself."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return safeload.load_json(value, safeload.OVERRIDE_VALUE)
        except safeload.LimitExceeded:
            raise
        except safeload.DocumentError:
            return value
    return value


def _fold_dotted(overrides: Mapping[str, Any], lookup: Callable[[str], Any]) -> dict[str, Any]:
    """Merge ``root.field`` overrides into their root mapping (shallowest first)."""
    result = dict(overrides)
    dotted = sorted((key for key in result if _is_dotted(key)), key=lambda key: key.count("."))
    roots: dict[str, dict[str, Any]] = {}
    for key in dotted:
        value = result.pop(key)
        root, *path = key.split(".")
        if root not in roots:
            base = result[root] if root in result else lookup(root)
            if base is None:
                raise ValueError(f"override {key!r} sets a field of {root!r}, which has no mapping value")
            roots[root] = _as_mapping(base, repr(root))
        node = roots[root]
        for depth, part in enumerate(path[:-1], start=1):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                child = node[part] = _as_mapping(child, repr(".".join([root, *path[:depth]])))
            node = child
        node[path[-1]] = _leaf(value)
    result.update(roots)
    return result


# ---------------------------------------------------------------------------
# Recipe normalisation
# ---------------------------------------------------------------------------


def _resolve(recipe: Mapping[str, Any], overrides: Mapping[str, Any]) -> _Resolved:
    if not isinstance(recipe, Mapping):
        raise ValueError(f"recipe must be a mapping, got {type(recipe).__name__}")
    for key in recipe:
        if not isinstance(key, str):
            raise ValueError(f"recipe keys must be strings, got {key!r}")
        if key in _UNSUPPORTED_KEYS:
            raise ValueError(f"unsupported recipe key {key!r}: {_UNSUPPORTED_KEYS[key]}")
    version = str(recipe.get("recipe_version", "2"))
    if version != "2":
        raise ValueError(f"unsupported recipe_version {version!r}: only v2 recipes are supported")

    command = recipe.get("command")
    if command is not None and not isinstance(command, str):
        raise ValueError(f"recipe 'command' must be a string, got {type(command).__name__}")
    raw_defaults = recipe.get("defaults")
    if raw_defaults is not None and not isinstance(raw_defaults, Mapping):
        raise ValueError(f"recipe 'defaults' must be a mapping, got {type(raw_defaults).__name__}")
    defaults = _collapse_brace_escapes(dict(raw_defaults or {}))
    for key in defaults:
        if not isinstance(key, str):
            raise ValueError(f"recipe 'defaults' keys must be strings, got {key!r}")

    model = recipe.get("model", "")
    if not isinstance(model, str):
        raise ValueError(f"recipe 'model' must be a string, got {type(model).__name__}")
    runtime = _resolve_runtime(recipe.get("runtime", ""), command, defaults, overrides)

    min_nodes, max_nodes = _node_bounds(recipe)
    runtime_config = _runtime_config(recipe)
    mods = _as_list("mods", recipe.get("mods", []) or [])
    if not mods and isinstance(runtime_config.get("mods"), list):
        mods = list(runtime_config.pop("mods"))

    raw_layout = recipe.get("layout")
    return _Resolved(
        runtime=runtime,
        model=model,
        container=recipe.get("container", ""),
        containers=_containers(recipe.get("containers")),
        defaults=defaults,
        env=_env(recipe.get("env")),
        command=command,
        model_revision=recipe.get("model_revision"),
        runtime_version=recipe.get("runtime_version", ""),
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        mods=mods,
        runtime_config=runtime_config,
        layout=_layout(raw_layout) if isinstance(raw_layout, Mapping) else None,
        hooks=tuple((hook, recipe.get(hook) or []) for hook in _HOOKS),
    )


def _collapse_brace_escapes(defaults: dict[str, Any]) -> dict[str, Any]:
    """String defaults written with ``{{``/``}}`` escapes are stored with single braces."""
    return {
        key: value.replace("{{", "{").replace("}}", "}")
        if isinstance(value, str) and "{{" in value
        else value
        for key, value in defaults.items()
    }


def _resolve_runtime(
    raw: Any, command: str | None, defaults: Mapping[str, Any], overrides: Mapping[str, Any]
) -> str:
    runtime = raw
    if not runtime:
        stripped = (command or "").strip()
        for pattern, hinted in _CMD_RUNTIME_HINTS:
            if stripped and pattern.match(stripped):
                runtime = hinted
                break
    if isinstance(runtime, str) and runtime in ("vllm", ""):
        backend = overrides.get("distributed_executor_backend")
        if backend is not None:
            runtime = "vllm-ray" if str(backend).lower() == "ray" else "vllm-distributed"
        elif str(defaults.get("distributed_executor_backend", "")).lower() == "ray" or (
            command and _RAY_BACKEND_FLAG.search(command)
        ):
            runtime = "vllm-ray"
        else:
            runtime = "vllm-distributed"
    if not isinstance(runtime, str):
        raise ValueError(f"recipe 'runtime' must be a string, got {type(runtime).__name__}")
    return runtime


def _node_bounds(recipe: Mapping[str, Any]) -> tuple[int, Any]:
    raw_min = recipe.get("min_nodes", 1)
    try:
        min_nodes = int(raw_min)
    except (TypeError, ValueError) as error:
        raise ValueError(f"recipe 'min_nodes' must be an integer, got {raw_min!r}") from error
    max_nodes = recipe.get("max_nodes")
    if recipe.get("mode", "auto") == "solo":
        min_nodes = max_nodes = 1
    if recipe.get("cluster_only"):
        min_nodes = max(min_nodes, 2)
    if recipe.get("solo_only"):
        max_nodes = 1
    return min_nodes, max_nodes


def _runtime_config(recipe: Mapping[str, Any]) -> dict[Any, Any]:
    """Explicit ``runtime_config`` first, then every unknown top-level key it does not name."""
    if "runtime_config" in recipe:
        explicit = recipe["runtime_config"]
        if not isinstance(explicit, Mapping):
            raise ValueError(f"recipe 'runtime_config' must be a mapping, got {type(explicit).__name__}")
        config: dict[Any, Any] = dict(explicit)
    else:
        config = {}
    for key, value in recipe.items():
        if key not in _RECIPE_KEYS and key not in config:
            config[key] = value
    return config


def _as_list(what: str, value: Any) -> list[Any]:
    try:
        return list(value)
    except TypeError as error:
        raise ValueError(f"recipe {what!r} must be a list, got {type(value).__name__}") from error


def _env(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        if not raw:
            return {}
        raise ValueError(f"recipe 'env' must be a mapping, got {type(raw).__name__}")
    return {str(key): str(value) for key, value in raw.items()}


def _containers(raw: Any) -> tuple[tuple[str, str], ...]:
    """Per-host images as ``(host, image)``; entries missing either are dropped, like sparkrun."""
    if not isinstance(raw, list):
        return ()
    entries = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        host = str(item.get("host") or "").strip()
        image = str(item.get("image") or "").strip()
        if host and image:
            entries.append((host, image))
    return tuple(entries)


def _mappings_in(what: str, raw: Any) -> list[Mapping[str, Any]]:
    try:
        return [item for item in raw or () if isinstance(item, Mapping)]
    except TypeError as error:
        raise ValueError(f"recipe layout {what!r} must be a list, got {type(raw).__name__}") from error


def _ints(what: str, raw: Any) -> list[int]:
    try:
        return [int(item) for item in raw or ()]
    except (TypeError, ValueError) as error:
        raise ValueError(f"recipe layout {what!r} must be a list of integers, got {raw!r}") from error


def _layout(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``layout:`` in sparkrun's canonical form: only non-empty ``requires`` / ``placements``."""
    requires = [
        {"capability": str(item.get("capability", ""))}
        for item in _mappings_in("requires", raw.get("requires"))
    ]
    placements = []
    for item in _mappings_in("placements", raw.get("placements")):
        placement: dict[str, Any] = {
            "host": str(item.get("host", "")),
            "ranks": _ints("ranks", item.get("ranks")),
        }
        local_gpus = _ints("local_gpus", item.get("local_gpus"))
        if local_gpus:
            placement["local_gpus"] = local_gpus
        placements.append(placement)
    layout: dict[str, Any] = {}
    if requires:
        layout["requires"] = requires
    if placements:
        layout["placements"] = placements
    return layout
