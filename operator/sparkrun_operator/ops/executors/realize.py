"""``recipes.realize`` and ``recipes.plan_build``: a recipe placed and pinned, and what a build needs.

``recipes.realize`` exports what a launch of ``recipe`` would run, nothing created: ``plan`` is
``workloads.plan``'s answer (the candidate nodes, placement by rank, the fit), ``recipe`` the
recipe as sparkrun's v2 mapping with the request's ``overrides`` baked into ``defaults`` and
the image and model revision pinned where the cluster knows them, ``materialized``
``workloads.materialize``'s answer (the rendered JobSet: command, environment, mounts). Pins
come from the cluster, never from a registry or the Hub the operator would have to reach: the
image when its reference carries a digest or an engine pod in the namespace runs that image
(its ``imageID``), the model revision from a Ready ModelCache of that model
(``status.resolvedRevision``). What stays mutable is listed in ``unpinned``: a pin that quietly
kept a tag would be worse than none (sparkrun's rule).

``recipes.plan_build`` answers "what would a build need" read-only: the operator builds no
image (ADR 0054; ``recipes.build`` stays disabled), so ``needs_image`` is true only when the
recipe names a ``builder`` (an image someone must build and push first), with issues saying so.

Arguments. ``recipe``, ``hosts``, ``cluster``, ``overrides``, ``solo``, ``workload_id_override``
as ``workloads.plan``; ``dry_run`` (nothing is created either way), ``trust`` (the shim's
listener decides; neither operation runs a hook) and ``recipe_ref`` (echoed) are accepted.
Host-execution settings (Docker, SSH transfer, ports, executors) and ``ensure`` (nothing is
launched, so nothing to skip) are refused at submission (422) naming them when set to anything
but their default: a realization that silently ignored them would not be the one asked for.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.k8s.resources import PODS
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.recipes import _code
from sparkrun_operator.ops.executors.workloads import placement
from sparkrun_operator.ops.executors.workloads.preview import materialize, plan
from sparkrun_operator.ops.executors.workloads.request import (
    HOST_ONLY,
    parse_overrides,
    plan_request,
    recipe_object,
)
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.recipe.resolve import validate_recipe
from sparkrun_operator.render import keys

__all__ = ["CHECKS", "EXECUTORS"]

#: Arguments of ``recipes.realize`` with no Kubernetes meaning: refused unless at their default.
REALIZE_REFUSED: Final = (
    "ensure",
    "strategy_options",
    *(key for key in HOST_ONLY if key not in ("strategy_options", "post_launch")),
)
#: The same for ``recipes.plan_build`` (``offline`` and ``rebuild`` are answered, not refused).
PLAN_BUILD_REFUSED: Final = (
    "executor",
    "executor_config",
    "cache_dir",
    "local_cache_dir",
    "transfer_mode",
    "transfer_interface",
    "topology",
    "sync_tuning",
    "preserve_model_perms",
    "skip_model_fan_out",
    "builder_context",
)
_WHY: Final = {
    "ensure": "recipes.realize launches nothing, so there is nothing to skip (workloads.ensure_ready does)",
    "offline": "pins come from the cluster (ModelCaches, engine pods), never from a registry or the Hub",
}
_DIGEST: Final = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_COMMIT: Final = re.compile(r"[0-9a-f]{40}\Z")


def _is_default(key: str, value: Any) -> bool:
    return value in (None, False, "", [], {}) or (key == "transfer_mode" and value == "auto")


def _refuse_set(args: Mapping[str, Any], keys_: tuple[str, ...], op: str) -> None:
    named = [k for k in keys_ if k in args and not _is_default(k, args[k])]
    if named:
        reasons = "; ".join(f"{k}: {_WHY[k]}" for k in named if k in _WHY)
        raise Invalid(
            f"{op}: not supported on Kubernetes: {', '.join(named)} (host execution settings"
            + (f"; {reasons}" if reasons else "")
            + ")"
        )


def check_realize(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """What ``recipes.realize`` refuses at submission: unsupported overrides and settings."""
    parse_overrides(args)
    _refuse_set(args, REALIZE_REFUSED, "recipes.realize")


def check_plan_build(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """What ``recipes.plan_build`` refuses at submission."""
    parse_overrides(args)
    _refuse_set(args, PLAN_BUILD_REFUSED, "recipes.plan_build")


async def _image_digest(ctx: OperationContext, image: str) -> tuple[str, str] | None:
    """``(pinned reference, source)`` of ``image`` from an engine pod in the namespace running it."""
    repo = image.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    for pod in await ctx.rest.list(PODS, ctx.namespace, label_selector=keys.LABEL_WORKLOAD):
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            image_id = str(status.get("imageID") or "")
            digest = _DIGEST.search(image_id)
            if status.get("image") == image and digest:
                name = (pod.get("metadata") or {}).get("name", "")
                return repo + digest.group(0), f"pod {name}"
    return None


def _baked(recipe: RecipeSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's v2 mapping with the request's overrides in ``defaults`` (as sparkrun bakes them)."""
    data = recipe.to_v2()
    overrides = parse_overrides(args)
    if overrides:
        data["defaults"] = {**(data.get("defaults") or {}), **overrides}
    if args.get("solo"):
        data["min_nodes"] = 1
        data["max_nodes"] = 1
    return data


async def _pins(
    ctx: OperationContext, data: dict[str, Any], effective: Any
) -> tuple[list[dict[str, str]], list[str]]:
    pins: list[dict[str, str]] = []
    unpinned: list[str] = []
    image = str(effective.image)
    if _DIGEST.search(image):
        if data.get("container") != image:
            before = str(data.get("container") or "")
            pins.append({"field": "container", "before": before, "after": image, "source": "already pinned"})
        data["container"] = image
    else:
        found = await _image_digest(ctx, image)
        if found is None:
            unpinned.append(
                f"container {image} (no digest known in the cluster: pin it in the recipe, "
                "or serve it once so an engine pod reports its image digest)"
            )
            data["container"] = image
        else:
            pins.append({"field": "container", "before": image, "after": found[0], "source": found[1]})
            data["container"] = found[0]
    revision = effective.model_revision
    if not (revision and _COMMIT.fullmatch(revision)):
        cache, found_by = await placement._cache_for(ctx, effective)
        commit = cache.resolved_revision if cache is not None else None
        if commit and _COMMIT.fullmatch(commit):
            pins.append(
                {"field": "model_revision", "before": revision or "main", "after": commit, "source": found_by}
            )
            data["model_revision"] = commit
        else:
            unpinned.append(
                f"model_revision {revision or 'main'} of {effective.model} (no Ready ModelCache of it "
                "in the namespace: its status.resolvedRevision is the pin)"
            )
    return pins, unpinned


async def realize(ctx: OperationContext, args: dict[str, Any]) -> Any:
    check_realize(args)
    planned = await plan_request(ctx, args)
    effective = planned["effective"]
    recipe = RecipeSpec.model_validate(planned["recipe_obj"].get("spec") or {})
    data = _baked(recipe, args)
    placed = await plan(ctx, args)
    rendered = await materialize(ctx, args)
    pins, unpinned = await _pins(ctx, data, effective)
    hosts = (placed["hardware_assessment"] or {}).get("hosts", {}).values()
    products = sorted({str(h["gpu_product"]) for h in hosts if h.get("gpu_product")})
    realized_for: dict[str, Any] = {"nodes": effective.topology.nodes, "platform": "kubernetes"}
    if products:
        realized_for["accelerator"] = products[0] if len(products) == 1 else products
    metadata = dict(data.get("metadata") or {})
    metadata["realized_for"] = realized_for
    metadata["pinned"] = {
        "at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "cluster",
        "from": {p["field"]: p["before"] for p in pins},
    }
    data["metadata"] = metadata
    if args.get("trust"):
        placed["notes"].append("trust: recipes.realize runs no hook; a launch runs them only if trusted")
    await ctx.feedback(f"Realized recipe {args['recipe']}", stage="realize")
    out: dict[str, Any] = {
        "recipe": data,
        "plan": placed,
        "dropped_keys": [],
        "pins": pins,
        "unpinned": unpinned,
        "materialized": rendered,
        "recipe_revision": effective.recipe_revision or "",
    }
    if args.get("recipe_ref"):
        out["recipe_ref"] = str(args["recipe_ref"])
    return out


def _build_issues(recipe: RecipeSpec) -> tuple[bool, list[dict[str, Any]]]:
    extra = recipe.runtime_config or {}
    issues = [
        {"severity": i.severity, "code": _code(i), "summary": i.message, "fix": "", "deprecation": False}
        for i in validate_recipe(recipe)
    ]
    builder = extra.get("builder")
    if builder:
        issues.append(
            {
                "severity": "error",
                "code": "builder_not_run",
                "summary": f"the recipe names builder {str(builder)[:64]!r}: the operator builds no image "
                "(recipes.build is disabled, ADR 0054)",
                "fix": "build and push the image in CI, then name it (by digest) in the recipe's container",
                "deprecation": False,
            }
        )
    image = recipe.container
    if image and not _DIGEST.search(image):
        issues.append(
            {
                "severity": "warning",
                "code": "image_not_pinned",
                "summary": f"container {image} is a tag: what it names can change between launches",
                "fix": "pin it by digest (recipes.realize reports the digest the cluster runs)",
                "deprecation": False,
            }
        )
    return bool(builder), issues


async def plan_build(ctx: OperationContext, args: dict[str, Any]) -> Any:
    check_plan_build(args)
    recipe_obj = await recipe_object(ctx, args["recipe"])
    recipe = RecipeSpec.model_validate(recipe_obj.get("spec") or {})
    cluster = args.get("cluster") or None
    if cluster and not args.get("hosts"):
        await kube.get_cluster(ctx.rest, cluster)
    hosts, _ = await kube.cluster_hosts(ctx.rest, hosts=args.get("hosts"), cluster=cluster)
    needs_image, issues = _build_issues(recipe)
    return {
        "host_list": list(hosts),
        "needs_image": needs_image,
        "issues": issues,
        "offline": {"offline": bool(args["offline"]), "source": "request"} if "offline" in args else None,
        "recipe": args["recipe"],
        "runtime": recipe.runtime,
        "cluster": cluster,
        "rebuild": bool(args.get("rebuild")),
    }


EXECUTORS: dict[str, Executor] = {"recipes.realize": realize, "recipes.plan_build": plan_build}
CHECKS: dict[str, ArgumentCheck] = {"recipes.realize": check_realize, "recipes.plan_build": check_plan_build}
