"""The endpoints of workloads, as several executor families report them, and the sweep shape.

Used by ``workloads.*``, ``discovery.*``/diagnostics and the proxy executors; it imports no
executor module, so none of them import each other for these helpers.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import ENGINE_PORT, InferenceWorkloadSpec
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.plan.served import Served, of_workload, served
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import names


def served_model(workload: Mapping[str, Any], recipes: Mapping[str, RecipeSpec]) -> Served | None:
    """The model the workload serves, its names and capabilities: the one naming rule
    (``plan/served.py``), so every operation reports what the gateway routes.

    ``status.model`` when the operator wrote it (:func:`~..plan.served.of_workload`; also the rule
    on the spec of a workload without a recipe). Before that, a recipe-based workload is resolved
    here against ``recipes`` by the same rule (:func:`~..plan.served.served`): what the operator
    is about to write, never a name of its own. ``None`` when nothing resolves (no such Recipe,
    a recipe error): such a workload has no names (and no capabilities), as in the gateway.
    """
    found = of_workload(workload)
    if found is not None:
        return found
    spec = workload.get("spec") or {}
    recipe = recipes.get(str((spec.get("recipe") or {}).get("name") or ""))
    if recipe is None:
        return None
    try:
        resolution = resolve(workload=InferenceWorkloadSpec.model_validate(spec), recipe=recipe)
    except ValueError:
        return None
    return None if resolution.spec is None else served(spec, resolution.spec)


async def recipe_specs(ctx: OperationContext) -> dict[str, RecipeSpec]:
    """The namespace's Recipes by name (for resolving what workloads serve)."""
    out: dict[str, RecipeSpec] = {}
    for obj in await ctx.rest.list(kube.RECIPES, ctx.namespace, cached=True):
        try:
            out[obj["metadata"]["name"]] = RecipeSpec.model_validate(obj.get("spec") or {})
        except ValueError:
            continue
    return out


def endpoint_entry(
    workload: Mapping[str, Any], recipes: Mapping[str, RecipeSpec], *, with_recipe: bool = True
) -> dict[str, Any]:
    """A credential-free endpoint of a workload (discovery.snapshot / workloads.endpoints); its
    names and capabilities are :func:`served_model`'s."""
    meta, spec, status = (
        workload.get("metadata") or {},
        workload.get("spec") or {},
        workload.get("status") or {},
    )
    found = served_model(workload, recipes)
    model = found.model if found else str((spec.get("model") or {}).get("name") or "")
    entry: dict[str, Any] = {
        "workload_id": kube.workload_id_of(workload),
        "model": model,
        "served_model_name": found.served_name if found else None,
        "host": f"{names.service_name(workload=meta.get('name', ''))}.{meta.get('namespace', '')}.svc",
        "port": ENGINE_PORT,
        "healthy": kube.is_ready(workload),
        "actual_models": list(found.names) if found else [],
        "max_model_len": (spec.get("engine") or {}).get("maxModelLen"),
        "cluster_name": spec.get("cluster"),
        "recipe_revision": status.get("recipeRevision") or "",
        "native_protocols": ["openai"],
        "capabilities": list(found.capabilities) if found else [],
        "runtime": "vllm",
        "owner": spec.get("manager") or "",
    }
    if with_recipe:
        entry["recipe_name"] = (spec.get("recipe") or {}).get("name") or ""
    return entry


def sweep(
    endpoints_: list[dict[str, Any]], *, mode: str, hosts: list[str], errors: dict[str, str] | None = None
) -> dict[str, Any]:
    now = time.time()
    return {
        "sweep_id": hashlib.sha256(f"{now}".encode()).hexdigest()[:16],
        "observed_at": now,
        "mode": mode,
        "complete": not errors,
        "hosts": hosts,
        "covered_hosts": [h for h in hosts if h not in (errors or {})],
        "errors": errors or {},
        "endpoints": endpoints_,
    }
