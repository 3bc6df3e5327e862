"""``catalog.*`` (recipes) and ``recipes.validate``: the catalog is the namespace's Recipe objects.

A recipe reference is the name of a ``Recipe`` in the API namespace. ``catalog.recipes`` /
``catalog.search`` list them (filters on the query text, runtime, metadata); ``catalog.recipe``
details one (revision and validation issues from its status, recomputed when the controller has
not written them yet); ``catalog.import`` creates a Recipe from sparkrun recipe YAML (labelled
``sparkrun.dev/source-kind=imported``; the YAML is loaded within ``safeload.RECIPE``: 256 KiB,
32 levels, no anchors or aliases, and the Recipe it makes is checked with the offline admission
(``api/admission.py``: the CRD's schema, bounds and CEL rules, as the apiserver will), both
refused at submission by :data:`CHECKS` and again here),
``catalog.retain`` keeps an import, ``catalog.cleanup`` deletes imports that are neither
retained nor served.

A Recipe a RecipeRegistry wrote (its controller ownerReference, UID-checked against the registry:
``ops/executors/registries.py``) is listed under its catalog name (the annotation
``sparkrun.dev/catalog-name``, path-qualified as sparkrun forms it) with ``registry`` = the
registry's name and ``source_kind`` ``registry``; its ``reference`` stays the object's name. The
recipes of a disabled registry are not listed; ``catalog.search`` leaves out those of a registry
with ``visible: false`` unless ``include_hidden`` or ``registry`` names it; ``registry`` filters
by registry name. ``catalog.recipe``'s ``trusted`` is ``recipe/trust.py``'s verdict.
``unavailable_registries`` names the enabled registries writing into this namespace that have
not been synced from any commit yet.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.recipe import RecipeIssue, RecipeSpec
from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, Invalid
from sparkrun_operator.ops.executors.recipe_lookup import find_recipe
from sparkrun_operator.ops.executors.registries import registry_index
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan.served import capabilities_of
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe import recipe_yaml
from sparkrun_operator.recipe.resolve import resolve, validate_recipe
from sparkrun_operator.recipe.trust import recipe_trust, registry_owner
from sparkrun_operator.render import keys

__all__ = ["CHECKS", "EXECUTORS", "parse_recipe"]

SOURCE_LABEL = keys.LABEL_RECIPE_SOURCE_KIND
RETAINED_LABEL = keys.LABEL_RECIPE_RETAINED
#: The longest catalog name read from a Recipe's annotation (the registry status's bound).
CATALOG_NAME_MAX = 512
Registries = Mapping[str, Mapping[str, Any]]


def _registry(obj: Mapping[str, Any], registries: Registries) -> Mapping[str, Any] | None:
    """The RecipeRegistry that wrote ``obj`` (its controller ownerReference, same UID), or ``None``."""
    owner = registry_owner(obj)
    found = registries.get(owner[0]) if owner else None
    if owner is None or found is None or found["metadata"].get("uid") != owner[1]:
        return None
    return found


def _catalog_name(obj: Mapping[str, Any], registry: Mapping[str, Any] | None) -> str:
    name = str(obj["metadata"]["name"])
    if registry is None:
        return name
    annotated = (obj["metadata"].get("annotations") or {}).get(keys.ANNOTATION_CATALOG_NAME)
    return annotated if isinstance(annotated, str) and 0 < len(annotated) <= CATALOG_NAME_MAX else name


def _listed(registry: Mapping[str, Any] | None, *, wanted: str | None, hidden: bool) -> bool:
    """Whether a recipe of ``registry`` (``None``: not from one) is listed: disabled registries'
    never; a named ``wanted`` registry's only; invisible registries' only when ``hidden``."""
    if registry is None:
        return not wanted
    spec = registry.get("spec") or {}
    name = registry["metadata"]["name"]
    if spec.get("enabled") is False or (wanted and wanted != name):
        return False
    return bool(wanted) or hidden or spec.get("visible") is not False


def _unavailable(ctx: OperationContext, registries: Registries) -> list[str]:
    return sorted(
        name
        for name, reg in registries.items()
        if (reg.get("spec") or {}).get("targetNamespace") == ctx.namespace
        and (reg.get("spec") or {}).get("enabled") is not False
        and not (reg.get("status") or {}).get("commit")
    )


def _spec(obj: Mapping[str, Any]) -> RecipeSpec:
    return RecipeSpec.model_validate(obj.get("spec") or {})


def _revision(obj: Mapping[str, Any], spec: RecipeSpec, overrides: Mapping[str, Any] | None = None) -> str:
    if not overrides:
        found = (obj.get("status") or {}).get("revision")
        if found:
            return str(found)
    try:
        return recipe_identity.recipe_revision(spec.to_v2(), dict(overrides or {}))
    except ValueError:
        return ""


def _metadata(spec: RecipeSpec) -> dict[str, Any]:
    meta = dict(spec.metadata or {})
    defaults = spec.defaults or {}
    out: dict[str, Any] = {
        "min_nodes": spec.min_nodes,
        "tp": defaults.get("tensor_parallel", 1),
        "pp": defaults.get("pipeline_parallel", 1),
    }
    for key in ("quantization", "context_length", "parameters_b"):
        if isinstance(meta.get(key), str | int | float):
            out[key] = meta[key]
    return out


def _summary(obj: Mapping[str, Any], registry: Mapping[str, Any] | None = None) -> dict[str, Any]:
    spec = _spec(obj)
    meta = _metadata(spec)
    name = obj["metadata"]["name"]
    return {
        "reference": name,
        "source_path": f"{RECIPE.kind}/{obj['metadata'].get('namespace', '')}/{name}",
        "name": _catalog_name(obj, registry),
        "model": spec.model,
        "runtime": spec.runtime,
        "description": (spec.metadata or {}).get("description"),
        "registry": registry["metadata"]["name"] if registry is not None else None,
        **meta,
    }


def _issues(obj: Mapping[str, Any], spec: RecipeSpec) -> list[RecipeIssue]:
    stored = (obj.get("status") or {}).get("issues")
    if stored is not None and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get(
        "generation"
    ):
        return [RecipeIssue.model_validate(i) for i in stored]
    return validate_recipe(spec)


def _capabilities(name: str, spec: RecipeSpec) -> list[str]:
    """What a workload serving the recipe as it stands can do: the naming rule's capabilities
    (``plan/served.py``) of its rendered engine arguments (none when it does not resolve)."""
    try:
        workload = InferenceWorkloadSpec.model_validate({"recipe": {"name": name}})
        effective = resolve(workload=workload, recipe=spec).spec
    except ValueError:
        effective = None
    return list(capabilities_of((), effective.engine_args if effective else ()))


def _code(issue: RecipeIssue) -> str:
    text = (issue.field or issue.message).lower()
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")[:64] or "issue"


def _detail(
    obj: Mapping[str, Any], overrides: Mapping[str, Any] | None, registry: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    spec = _spec(obj)
    summary = _summary(obj, registry)
    labels = obj["metadata"].get("labels") or {}
    issues = _issues(obj, spec)
    source = "imported" if labels.get(SOURCE_LABEL) == "imported" else "local"
    return {
        "reference": summary["reference"],
        "source_path": summary["source_path"],
        "name": summary["name"],
        "registry": summary["registry"],
        "model": spec.model,
        "hf_model": spec.model.split(":", 1)[0],
        "runtime": spec.runtime,
        "description": summary["description"] or "",
        "min_nodes": spec.min_nodes,
        "defaults": dict(spec.defaults or {}),
        "metadata": _metadata(spec),
        "recipe_revision": _revision(obj, spec, overrides),
        "plugin_items": {},
        "native_api_options": [],
        "native_protocols": ["openai"],
        "capabilities": _capabilities(str(obj["metadata"]["name"]), spec),
        "required_plugins": [],
        "available_plugins": ["k8s"],
        "trusted": registry is not None and recipe_trust(obj, registry).trusted,
        "issues": [
            {"severity": i.severity, "code": _code(i), "message": i.message, "summary": i.message, "fix": ""}
            for i in issues
        ],
        "source_kind": "registry" if registry is not None else source,
        "normalized_overrides": dict(overrides or {}),
    }


async def _get(ctx: OperationContext, reference: str) -> dict[str, Any]:
    """The Recipe ``reference`` names: its object name, ``@registry/name`` or a catalog name."""
    return await find_recipe(ctx, reference)


def _matches(summary: Mapping[str, Any], *, query: str | None, runtime: str | None) -> bool:
    if runtime and summary.get("runtime") != runtime:
        return False
    if query:
        text = " ".join(str(summary.get(k) or "") for k in ("name", "model", "description")).lower()
        return all(word in text for word in query.lower().split())
    return True


async def _listing(
    ctx: OperationContext, *, wanted: str | None, hidden: bool
) -> tuple[list[dict[str, Any]], Registries]:
    """The summaries of the listed Recipes (:func:`_listed`), sorted as the reference sorts them
    (recipes of no registry first, then by name), and the registries read for them."""
    registries = await registry_index(ctx)
    rows = []
    for obj in await ctx.rest.list(kube.RECIPES, ctx.namespace, cached=True):
        registry = _registry(obj, registries)
        if _listed(registry, wanted=wanted, hidden=hidden):
            rows.append(_summary(obj, registry))
    rows.sort(key=lambda s: (s["registry"] is not None, str(s["name"]), str(s["reference"])))
    return rows, registries


async def recipes(ctx: OperationContext, args: dict[str, Any]) -> Any:
    summaries, registries = await _listing(ctx, wanted=args.get("registry") or None, hidden=True)
    summaries = [s for s in summaries if _matches(s, query=args.get("query"), runtime=args.get("runtime"))]
    for key, wanted in (args.get("filters") or {}).items():
        summaries = [s for s in summaries if str(s.get(key)) == str(wanted)]
    facets = {
        "runtime": sorted({str(s["runtime"]) for s in summaries if s.get("runtime")}),
        "model": sorted({str(s["model"]) for s in summaries if s.get("model")}),
    }
    offset = args.get("offset", 0)
    limit = args.get("limit", 50) or 50
    page = summaries[offset : offset + limit]
    after = offset + len(page)
    return {
        "recipes": page,
        "facets": facets,
        "total": len(summaries),
        "next_offset": after if after < len(summaries) else None,
        "unavailable_registries": _unavailable(ctx, registries),
    }


async def search(ctx: OperationContext, args: dict[str, Any]) -> Any:
    summaries, _ = await _listing(
        ctx, wanted=args.get("registry") or None, hidden=bool(args.get("include_hidden"))
    )
    return [
        {
            "name": summary["name"],
            "reference": summary["reference"],
            "registry": summary["registry"],
            "metadata": {"model": summary["model"], "runtime": summary["runtime"]},
        }
        for summary in summaries
        if _matches(summary, query=args.get("query"), runtime=args.get("runtime"))
    ]


async def recipe(ctx: OperationContext, args: dict[str, Any]) -> Any:
    obj = await _get(ctx, args["reference"])
    owner = registry_owner(obj)
    registry = _registry(obj, await registry_index(ctx)) if owner else None
    detail = _detail(obj, args.get("overrides"), registry)
    expected = args.get("expected_revision")
    if expected and expected != detail["recipe_revision"]:
        raise Conflict(
            f"Recipe {args['reference']} is at revision {detail['recipe_revision']}, not {expected}",
            attrs={"reason": "revision_mismatch"},
        )
    return detail


def _recipe_body(name: str, spec: RecipeSpec, namespace: str) -> dict[str, Any]:
    labels = {SOURCE_LABEL: "imported", RETAINED_LABEL: "false"}
    return recipe_yaml.recipe_object(name, spec, namespace, labels)


def parse_recipe(content: str) -> tuple[str, RecipeSpec]:
    """The Recipe name and spec of sparkrun recipe YAML (``catalog.import``): loaded within
    ``safeload.RECIPE`` (size, depth, no anchors or aliases), and admitted as the apiserver will
    (the Recipe CRD's bounds, e.g. ``defaults`` 6 levels deep, and its rules). Raises ``Invalid``
    (CPU-bound on a large recipe: callers run it in a worker thread). The translation is
    ``recipe/recipe_yaml.py``'s, which a RecipeRegistry's sync uses too."""
    try:
        raw, spec = recipe_yaml.load_spec(content)
        name = recipe_yaml.import_name(raw, content)
        recipe_yaml.admit(_recipe_body(name, spec, "default"))
    except ValueError as error:
        raise Invalid(str(error)) from None
    return name, spec


def check_import(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """What ``catalog.import`` refuses before a job exists: content that is not a recipe."""
    parse_recipe(str(args.get("content") or ""))


async def import_recipe(ctx: OperationContext, args: dict[str, Any]) -> Any:
    # NB: the same check as at submission (a DaemonJob can be created without the daemon API);
    # up to 256 KiB of YAML is parsed in a worker thread, off the event loop.
    name, spec = await asyncio.to_thread(parse_recipe, str(args.get("content") or ""))
    body = _recipe_body(name, spec, ctx.namespace)
    try:
        created = await ctx.rest.create(kube.RECIPES, body, ctx.namespace)
    except k8s_errors.KubeError as error:
        if isinstance(error, k8s_errors.KubeAlreadyExists):
            created = await _get(ctx, name)
        elif isinstance(error, (k8s_errors.KubeBadRequest, k8s_errors.KubeInvalid)):
            raise Invalid(f"Recipe refused: {error.message}") from error
        else:
            raise
    await ctx.feedback(f"Imported Recipe {name}", stage="import")
    return _detail(created, None)


async def retain(ctx: OperationContext, args: dict[str, Any]) -> Any:
    found = await _get(ctx, args["reference"])
    await ctx.rest.merge_patch(
        kube.RECIPES,
        found["metadata"]["name"],
        {"metadata": {"labels": {RETAINED_LABEL: "true"}}},
        ctx.namespace,
    )
    return None


async def cleanup(ctx: OperationContext, args: dict[str, Any]) -> Any:
    served = {
        ((w.get("spec") or {}).get("recipe") or {}).get("name")
        for w in await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    }
    removed = 0
    for obj in await ctx.rest.list(kube.RECIPES, ctx.namespace, label_selector=f"{SOURCE_LABEL}=imported"):
        labels = obj["metadata"].get("labels") or {}
        if labels.get(RETAINED_LABEL) == "true" or obj["metadata"]["name"] in served:
            continue
        if await ctx.rest.delete(
            kube.RECIPES,
            obj["metadata"]["name"],
            ctx.namespace,
            uid=obj["metadata"].get("uid"),
            propagation="Background",
        ):
            removed += 1
    return removed


async def validate(ctx: OperationContext, args: dict[str, Any]) -> Any:
    obj = await _get(ctx, args["recipe"])
    spec = _spec(obj)
    issues = list(validate_recipe(spec))
    overrides = args.get("overrides") or {}
    if overrides:
        try:
            recipe_identity.recipe_revision(spec.to_v2(), dict(overrides))
        except ValueError as error:
            issues.append(RecipeIssue(severity="error", message=str(error), field="overrides"))
    return [
        {"severity": i.severity, "code": _code(i), "summary": i.message, "fix": "", "deprecation": False}
        for i in issues
    ]


EXECUTORS: dict[str, Executor] = {
    "catalog.recipes": recipes,
    "catalog.search": search,
    "catalog.recipe": recipe,
    "catalog.import": import_recipe,
    "catalog.retain": retain,
    "catalog.cleanup": cleanup,
    "recipes.validate": validate,
}
CHECKS: dict[str, ArgumentCheck] = {"catalog.import": check_import}
