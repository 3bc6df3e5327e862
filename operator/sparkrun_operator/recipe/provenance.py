"""Where each effective setting came from (ADR 0046): the workload, its Recipe (own fields or the
``defaults`` block), the operator's defaults, or a merge of several.

:func:`sourced` retraces what :func:`~sparkrun_operator.recipe.resolve.resolve` did, field by
field, and returns each effective value with its source; it follows the same precedence rules
(``_resolve_plain``, ``_resolve_recipe``, ``_choices``), so the sources always agree with the
spec that is served. :func:`summary` is the status form (no values); :func:`changes` is what
differs between two revisions, as bounded, readable text.

Environment values never leave this module: a variable appears by name, with the kind of its
reference (``secretKeyRef`` ...) or a short digest of its literal value, so a change of value is
seen without the value (it may be a credential). Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, Final

from sparkrun_operator.api.clip import ELLIPSIS, clip
from sparkrun_operator.api.history import Change, FieldSource, FieldSourceKind, SourcedValue
from sparkrun_operator.api.meta import EnvVar
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE, InferenceWorkloadSpec, TopologySpec
from sparkrun_operator.recipe.resolve import EffectiveSpec

#: The effective fields, in the order they are listed.
FIELDS: Final = (
    "model",
    "modelRevision",
    "servedName",
    "aliases",
    "engine.image",
    "engineArgs",
    "maxModelLen",
    "gpuMemoryUtilization",
    "env",
    "enableSleepMode",
    "topology",
    "cacheRef",
)
#: Entries of ``status.effective.sources`` (the API's bound).
SUMMARY_MAX: Final = 16
#: Per-item sources kept for a merged list (the API's bound; a longer list keeps its first ones).
ITEMS_MAX: Final = 1024
#: A value in a :class:`Change` (the API's bound).
CHANGE_TEXT_MAX: Final = 160
#: Characters of ``detail`` and of an item's ``field`` (the API's bounds).
_DETAIL_MAX: Final = 128
_FIELD_MAX: Final = 64
#: Hex digits of an environment value's digest.
_DIGEST_HEX: Final = 12

_W_ARGS: Final = "spec.engine.args"
_W_ENV: Final = "spec.engine.env"


def _src(field: str, value: Any, source: FieldSourceKind, detail: str | None) -> SourcedValue:
    return SourcedValue(
        field=field, value=value, source=source, detail=None if detail is None else clip(detail, _DETAIL_MAX)
    )


def _topology_value(effective: EffectiveSpec) -> dict[str, int]:
    topo = effective.topology
    return {
        "nodes": topo.nodes,
        "gpusPerNode": topo.gpus_per_node,
        "tensorParallel": topo.tensor_parallel,
        "pipelineParallel": topo.pipeline_parallel,
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]


def env_entry(env: EnvVar) -> dict[str, str]:
    """One variable without its value: its name, and the kind of its reference or a digest of
    its literal value (so that a new value shows as a change, and the value does not)."""
    if env.value_from is not None:
        kind = next(iter(env.value_from), "valueFrom")
        canonical = json.dumps(env.value_from, sort_keys=True, separators=(",", ":"), default=str)
        return {"name": env.name, "valueFrom": clip(str(kind), _FIELD_MAX), "digest": _digest(canonical)}
    return {"name": env.name, "digest": _digest("=" + (env.value or ""))}


def _list_value(
    field: str,
    value: list[Any],
    parts: Sequence[tuple[int, FieldSourceKind, str]],
    labels: Iterable[str],
    empty: str,
) -> SourcedValue:
    """A list built from consecutive parts (count, source, detail): one source when one part has
    items, else ``merged``; each item's source in ``items`` (the first :data:`ITEMS_MAX`)."""
    filled = [(n, s, d) for n, s, d in parts if n]
    if not filled:
        return _src(field, value, "default", empty)
    label_iter = iter(labels)
    items: list[FieldSource] = []
    for count, source, detail in filled:
        for _ in range(count):
            label = next(label_iter, "")
            if len(items) < ITEMS_MAX:
                items.append(
                    FieldSource(
                        field=clip(label, _FIELD_MAX), source=source, detail=clip(detail, _DETAIL_MAX)
                    )
                )
    if len(filled) == 1:
        out = _src(field, value, filled[0][1], filled[0][2])
    else:
        out = _src(field, value, "merged", " + ".join(d for _, _, d in filled))
    return out.model_copy(update={"items": items})


def sourced(
    *, workload: InferenceWorkloadSpec, recipe: RecipeSpec | None, effective: EffectiveSpec
) -> tuple[SourcedValue, ...]:
    """Each effective field of ``effective`` (what ``resolve(workload, recipe)`` gave) with its
    value and source, in :data:`FIELDS` order."""
    common = _common(workload, effective)
    own = _plain(workload, effective) if recipe is None else _from_recipe(workload, recipe, effective)
    by_field = {v.field: v for v in (*common, *own)}
    return tuple(by_field[f] for f in FIELDS)


def _common(workload: InferenceWorkloadSpec, effective: EffectiveSpec) -> list[SourcedValue]:
    """Fields only the workload sets, with or without a recipe."""
    ref = workload.model
    return [
        _pick(
            "aliases",
            list(effective.aliases),
            (bool(effective.aliases), "workload", "spec.model.aliases"),
            default="none",
        ),
        _pick(
            "enableSleepMode",
            effective.enable_sleep_mode,
            (effective.enable_sleep_mode, "workload", "spec.engine.enableSleepMode"),
            default="operator default false",
        ),
        _pick(
            "cacheRef",
            effective.cache_ref,
            (ref is not None and ref.cache_ref is not None, "workload", "spec.model.cacheRef"),
            default="none (the engine downloads the model)",
        ),
    ]


#: One way a field may be set: whether it applies, its source and its detail.
_Rule = tuple[bool, FieldSourceKind, str]


def _pick(field: str, value: Any, *rules: _Rule, default: str) -> SourcedValue:
    """The first rule that applies names the source; else the operator's ``default``."""
    for applies, source, detail in rules:
        if applies:
            return _src(field, value, source, detail)
    return _src(field, value, "default", default)


_IMAGE_DEFAULT: Final = f"operator default {DEFAULT_ENGINE_IMAGE}"
_NO_MAX_LEN: Final = "none (vLLM derives it from the model)"
_NO_GPU_UTIL: Final = "none (vLLM's default)"


def _plain(workload: InferenceWorkloadSpec, effective: EffectiveSpec) -> list[SourcedValue]:
    """No recipe (``_resolve_plain``): the workload's fields over the schema defaults."""
    ref = workload.model
    engine = workload.engine
    return [
        _src("model", effective.model, "workload", "spec.model.name"),
        _pick(
            "modelRevision",
            effective.model_revision,
            (ref is not None and bool(ref.revision), "workload", "spec.model.revision"),
            default="none (the model's default branch)",
        ),
        _pick(
            "servedName",
            effective.served_name,
            (ref is not None and bool(ref.served_name), "workload", "spec.model.servedName"),
            (True, "workload", "spec.model.name"),
            default="",
        ),
        _pick(
            "engine.image",
            effective.image,
            (engine.image != DEFAULT_ENGINE_IMAGE, "workload", "spec.engine.image"),
            default=_IMAGE_DEFAULT,
        ),
        _pick(
            "maxModelLen",
            effective.max_model_len,
            (engine.max_model_len is not None, "workload", "spec.engine.maxModelLen"),
            default=_NO_MAX_LEN,
        ),
        _pick(
            "gpuMemoryUtilization",
            effective.gpu_memory_utilization,
            (engine.gpu_memory_utilization is not None, "workload", "spec.engine.gpuMemoryUtilization"),
            default=_NO_GPU_UTIL,
        ),
        _pick(
            "topology",
            _topology_value(effective),
            (workload.topology != TopologySpec(), "workload", "spec.topology"),
            default="operator default 1 node, 1 GPU",
        ),
        _list_value(
            "engineArgs",
            list(effective.engine_args),
            [(len(effective.engine_args), "workload", _W_ARGS)],
            effective.engine_args,
            "none",
        ),
        _list_value(
            "env",
            [env_entry(e) for e in effective.env],
            [(len(effective.env), "workload", _W_ENV)],
            (e.name for e in effective.env),
            "none",
        ),
    ]


def _from_recipe(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, effective: EffectiveSpec
) -> list[SourcedValue]:
    """With a recipe (``_resolve_recipe`` / ``_choices``): the workload's own choices over the
    Recipe's fields and ``defaults``."""
    name = effective.recipe_name or (workload.recipe.name if workload.recipe else "recipe")
    at = f"{clip(name, 96)}@{effective.recipe_revision or '?'}"
    defaults = recipe.defaults or {}
    engine = workload.engine
    return [
        *_model_fields(workload, recipe, effective, at),
        _pick(
            "engine.image",
            effective.image,
            # NB: the stored default cannot be told from "unset": the recipe's container wins
            (engine.image != DEFAULT_ENGINE_IMAGE, "workload", "spec.engine.image"),
            (bool(recipe.container), "recipe", f"{at} container"),
            default=_IMAGE_DEFAULT,
        ),
        _pick(
            "maxModelLen",
            effective.max_model_len,
            (bool(engine.max_model_len), "workload", "spec.engine.maxModelLen"),
            (defaults.get("max_model_len") is not None, "recipeDefaults", f"{at} defaults.max_model_len"),
            default=_NO_MAX_LEN,
        ),
        _pick(
            "gpuMemoryUtilization",
            effective.gpu_memory_utilization,
            (engine.gpu_memory_utilization is not None, "workload", "spec.engine.gpuMemoryUtilization"),
            (
                defaults.get("gpu_memory_utilization") is not None,
                "recipeDefaults",
                f"{at} defaults.gpu_memory_utilization",
            ),
            default=_NO_GPU_UTIL,
        ),
        _recipe_topology(workload, recipe, effective, at),
        _recipe_args(workload, recipe, effective, at),
        _recipe_env(workload, recipe, effective, at),
    ]


def _model_fields(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, effective: EffectiveSpec, at: str
) -> list[SourcedValue]:
    ref = workload.model
    defaults = recipe.defaults or {}
    model = (
        _src("model", effective.model, "workload", "spec.model.name")
        if ref is not None
        else _src("model", effective.model, "recipe", f"{at} model")
    )
    if ref is not None and ref.revision:
        revision = _src("modelRevision", effective.model_revision, "workload", "spec.model.revision")
    elif effective.model == recipe.model and recipe.model_revision is not None:
        revision = _src("modelRevision", effective.model_revision, "recipe", f"{at} modelRevision")
    elif effective.model == recipe.model:
        revision = _src("modelRevision", None, "default", "none (the model's default branch)")
    else:
        revision = _src("modelRevision", None, "default", "none (spec.model.name is not the Recipe's model)")
    if ref is not None and ref.served_name:
        served = _src("servedName", effective.served_name, "workload", "spec.model.servedName")
    elif defaults.get("served_model_name"):
        served = _src(
            "servedName", effective.served_name, "recipeDefaults", f"{at} defaults.served_model_name"
        )
    else:  # the model's name, wherever the model came from
        served = model.model_copy(update={"field": "servedName", "value": effective.served_name})
    return [model, revision, served]


def _recipe_topology(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, effective: EffectiveSpec, at: str
) -> SourcedValue:
    value = _topology_value(effective)
    if workload.topology != TopologySpec():
        return _src("topology", value, "workload", "spec.topology")
    defaults = recipe.defaults or {}
    keys = [k for k in ("tensor_parallel", "pipeline_parallel") if defaults.get(k) is not None]
    if keys:
        return _src(
            "topology", value, "recipeDefaults", f"{at} {', '.join('defaults.' + k for k in keys)}, minNodes"
        )
    return _src("topology", value, "recipe", f"{at} minNodes")


def _recipe_args(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, effective: EffectiveSpec, at: str
) -> SourcedValue:
    """The recipe's arguments (its filled ``command``, else its ``defaults`` as flags), then the
    workload's ``spec.engine.args``, appended last."""
    args = effective.engine_args
    user = len(workload.engine.args)
    if user > len(args) or tuple(args[len(args) - user :]) != tuple(workload.engine.args):
        user = 0  # not what resolve() makes: claim nothing for the workload
    base_source: tuple[FieldSourceKind, str] = (
        ("recipe", f"{at} command") if recipe.command is not None else ("recipeDefaults", f"{at} defaults")
    )
    return _list_value(
        "engineArgs",
        list(args),
        [(len(args) - user, *base_source), (user, "workload", _W_ARGS)],
        args,
        "none",
    )


def _recipe_env(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec, effective: EffectiveSpec, at: str
) -> SourcedValue:
    """The recipe's env, then the workload's by name (a workload variable replaces the recipe's of
    the same name and comes after the recipe's, as ``_merge_env`` orders them)."""
    mine = {e.name for e in workload.engine.env}
    env = effective.env
    split = 0
    while split < len(env) and env[split].name not in mine:
        split += 1
    if any(e.name not in mine for e in env[split:]):
        split = len(env)  # not what resolve() makes: every variable is the recipe's
    return _list_value(
        "env",
        [env_entry(e) for e in env],
        [(split, "recipe", f"{at} env"), (len(env) - split, "workload", _W_ENV)],
        (e.name for e in env),
        "none",
    )


def summary(values: Sequence[SourcedValue]) -> list[FieldSource]:
    """``status.effective.sources``: each field and its source, no values (at most
    :data:`SUMMARY_MAX`)."""
    return [FieldSource(field=v.field, source=v.source, detail=v.detail) for v in values[:SUMMARY_MAX]]


# -- changes ----------------------------------------------------------------------------------


def _escape(text: str) -> str:
    """Control, format and separator characters as ``\\uXXXX`` (no raw line break or bidi
    override reaches a terminal or a log)."""
    out: list[str] = []
    for ch in text:
        if unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029":
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def _text(value: Any) -> str:
    """Compact JSON, escaped and clipped to :data:`CHANGE_TEXT_MAX` characters."""
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    head = raw[: CHANGE_TEXT_MAX * 2]  # escaping only grows the text: no need to look further
    return clip(_escape(head) + (ELLIPSIS if len(raw) > len(head) else ""), CHANGE_TEXT_MAX)


def _list_diff(before: list[Any], after: list[Any]) -> tuple[list[Any], list[Any]]:
    """The differing middle of two lists (common head and tail left out, one item of context
    kept before it), each side marked with an ellipsis item where items were left out."""
    lo = 0
    limit = min(len(before), len(after))
    while lo < limit and before[lo] == after[lo]:
        lo += 1
    hi = 0
    while hi < limit - lo and before[len(before) - 1 - hi] == after[len(after) - 1 - hi]:
        hi += 1
    start = max(0, lo - 1)
    head: list[Any] = [ELLIPSIS] if start else []
    tail: list[Any] = [ELLIPSIS] if hi else []
    return (
        [*head, *before[start : len(before) - hi], *tail],
        [*head, *after[start : len(after) - hi], *tail],
    )


def _env_diff(before: list[Any], after: list[Any]) -> tuple[list[str], list[str]]:
    """Names only: those removed or changed, and those added or changed."""

    def key(entry: Any) -> str:
        return json.dumps(entry, sort_keys=True, default=str)

    def name(entry: Any) -> str:
        return str(entry.get("name", "?")) if isinstance(entry, dict) else "?"

    old = {key(e) for e in before}
    new = {key(e) for e in after}
    gone = [name(e) for e in before if key(e) not in new]
    came = [name(e) for e in after if key(e) not in old]
    if not gone and not came:  # same variables, another order
        return [name(e) for e in before], [name(e) for e in after]
    return gone, came


def _render(field: str, before: Any, after: Any) -> tuple[str | None, str | None]:
    if isinstance(before, list) and isinstance(after, list):
        old, new = _env_diff(before, after) if field == "env" else _list_diff(before, after)
        return _text(old), _text(new)
    if field == "env":  # one side missing (or not a list): names only
        return (
            None if before is None else _text(_env_diff(before if isinstance(before, list) else [], [])[0]),
            None if after is None else _text(_env_diff([], after if isinstance(after, list) else [])[1]),
        )
    return (None if before is None else _text(before)), (None if after is None else _text(after))


def changes(before: Sequence[SourcedValue], after: Sequence[SourcedValue]) -> list[Change]:
    """The fields whose value differs from ``before`` to ``after`` (in ``after``'s order, then
    fields only ``before`` has), each with its new source and both values as bounded text."""
    old = {v.field: v for v in before}
    seen: set[str] = set()
    out: list[Change] = []
    for new in after:
        seen.add(new.field)
        prior = old.get(new.field)
        if prior is not None and prior.value == new.value:
            continue
        text_before, text_after = _render(new.field, None if prior is None else prior.value, new.value)
        out.append(
            Change(
                field=new.field, source=new.source, detail=new.detail, before=text_before, after=text_after
            )
        )
    for prior in before:
        if prior.field not in seen:
            seen.add(prior.field)
            text_before, _ = _render(prior.field, prior.value, None)
            out.append(
                Change(field=prior.field, source=prior.source, detail=prior.detail, before=text_before)
            )
    return out
