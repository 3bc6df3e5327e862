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
retained nor served. Registries do not exist here (the registry operations are disabled), so
``registry`` is always ``null``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from sparkrun_operator import safeload
from sparkrun_operator.api import admission
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeIssue, RecipeSpec
from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, Invalid, NotFound
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan.served import capabilities_of
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.resolve import resolve, validate_recipe
from sparkrun_operator.render import keys

__all__ = ["CHECKS", "EXECUTORS", "parse_recipe"]

SOURCE_LABEL = keys.LABEL_RECIPE_SOURCE_KIND
RETAINED_LABEL = keys.LABEL_RECIPE_RETAINED


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


def _summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec = _spec(obj)
    meta = _metadata(spec)
    name = obj["metadata"]["name"]
    return {
        "reference": name,
        "source_path": f"{RECIPE.kind}/{obj['metadata'].get('namespace', '')}/{name}",
        "name": name,
        "model": spec.model,
        "runtime": spec.runtime,
        "description": (spec.metadata or {}).get("description"),
        "registry": None,
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


def _detail(obj: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    spec = _spec(obj)
    summary = _summary(obj)
    labels = obj["metadata"].get("labels") or {}
    issues = _issues(obj, spec)
    return {
        "reference": summary["reference"],
        "source_path": summary["source_path"],
        "name": summary["name"],
        "registry": None,
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
        "trusted": False,
        "issues": [
            {"severity": i.severity, "code": _code(i), "message": i.message, "summary": i.message, "fix": ""}
            for i in issues
        ],
        "source_kind": "imported" if labels.get(SOURCE_LABEL) == "imported" else "local",
        "normalized_overrides": dict(overrides or {}),
    }


async def _get(ctx: OperationContext, reference: str) -> dict[str, Any]:
    found = (
        await ctx.rest.get(kube.RECIPES, reference, ctx.namespace)
        if re.fullmatch(r"[a-z0-9.-]{1,253}", reference)
        else None
    )
    if found is None:
        raise NotFound(f"Unknown recipe: {reference}")
    return found


def _matches(summary: Mapping[str, Any], *, query: str | None, runtime: str | None) -> bool:
    if runtime and summary.get("runtime") != runtime:
        return False
    if query:
        text = " ".join(str(summary.get(k) or "") for k in ("name", "model", "description")).lower()
        return all(word in text for word in query.lower().split())
    return True


async def recipes(ctx: OperationContext, args: dict[str, Any]) -> Any:
    items = sorted(
        await ctx.rest.list(kube.RECIPES, ctx.namespace, cached=True), key=lambda o: o["metadata"]["name"]
    )
    summaries = [_summary(o) for o in items]
    if args.get("registry"):
        summaries = []
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
        "unavailable_registries": [],
    }


async def search(ctx: OperationContext, args: dict[str, Any]) -> Any:
    items = sorted(
        await ctx.rest.list(kube.RECIPES, ctx.namespace, cached=True), key=lambda o: o["metadata"]["name"]
    )
    rows = []
    for obj in items:
        summary = _summary(obj)
        if args.get("registry") or not _matches(
            summary, query=args.get("query"), runtime=args.get("runtime")
        ):
            continue
        rows.append(
            {"name": summary["name"], "metadata": {"model": summary["model"], "runtime": summary["runtime"]}}
        )
    return rows


async def recipe(ctx: OperationContext, args: dict[str, Any]) -> Any:
    obj = await _get(ctx, args["reference"])
    detail = _detail(obj, args.get("overrides"))
    expected = args.get("expected_revision")
    if expected and expected != detail["recipe_revision"]:
        raise Conflict(
            f"Recipe {args['reference']} is at revision {detail['recipe_revision']}, not {expected}",
            attrs={"reason": "revision_mismatch"},
        )
    return detail


def _import_name(raw: Mapping[str, Any], content: str) -> str:
    base = str(raw.get("name") or str(raw.get("model", "recipe")).rsplit("/", 1)[-1]).lower()
    slug = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:40] or "recipe"
    return f"{slug}-{hashlib.sha256(content.encode()).hexdigest()[:8]}"


def _recipe_body(name: str, spec: RecipeSpec, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": RECIPE.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {SOURCE_LABEL: "imported", RETAINED_LABEL: "false"},
        },
        "spec": spec.to_wire(),
    }


#: Admission errors named in a refusal at most (the first ones, by field path), and the length
#: of each message (the schema validator's messages quote the offending value).
_MAX_ERRORS = 5
_MAX_MESSAGE = 200


def _short(error: admission.FieldError) -> str:
    message = error.message if len(error.message) <= _MAX_MESSAGE else error.message[:_MAX_MESSAGE] + "..."
    return f"{error.path}: {message}"


def _admitted(name: str, spec: RecipeSpec) -> None:
    """The Recipe ``catalog.import`` would create passes the CRD's schema and CEL rules (the
    offline admission: what the apiserver would refuse with a 422 inside the job)."""
    errors = admission.validate(_recipe_body(name, spec, "default"))
    if errors:
        listed = "; ".join(_short(e) for e in errors[:_MAX_ERRORS])
        more = f" (and {len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
        raise Invalid(f"recipe content makes an invalid Recipe: {listed}{more}")


def parse_recipe(content: str) -> tuple[str, RecipeSpec]:
    """The Recipe name and spec of sparkrun recipe YAML (``catalog.import``): loaded within
    ``safeload.RECIPE`` (size, depth, no anchors or aliases), and admitted as the apiserver will
    (the Recipe CRD's bounds, e.g. ``defaults`` 6 levels deep, and its rules). Raises ``Invalid``
    (CPU-bound on a large recipe: callers run it in a worker thread)."""
    try:
        raw = safeload.load_yaml(content, safeload.RECIPE)
    except safeload.DocumentError as error:
        raise Invalid(str(error)) from None
    if not isinstance(raw, dict):
        raise Invalid("recipe content must be a YAML mapping")
    name = _import_name(raw, content)
    raw.pop("name", None)
    known = set(RecipeSpec.model_fields) - {"runtime_config"}
    extra = {k: v for k, v in raw.items() if k not in known}
    fields = {k: v for k, v in raw.items() if k in known}
    if "recipe_version" in fields:
        fields["recipe_version"] = str(fields["recipe_version"])
    if extra:
        fields["runtime_config"] = {**(fields.get("runtime_config") or {}), **extra}
    try:
        spec = RecipeSpec.model_validate(fields)
    except ValidationError as error:
        raise Invalid(f"recipe content is not a valid v2 recipe: {error.errors()[0]['msg']}") from error
    _admitted(name, spec)
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
    await _get(ctx, args["reference"])
    await ctx.rest.merge_patch(
        kube.RECIPES, args["reference"], {"metadata": {"labels": {RETAINED_LABEL: "true"}}}, ctx.namespace
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
