"""``catalog.registries*`` and ``catalog.refresh``: the daemon's recipe registries are RecipeRegistries.

A registry of the daemon API is a cluster-scoped ``RecipeRegistry`` (``api/registry.py``); its
controller fetches it and writes its Recipes into ``spec.targetNamespace``.

- ``catalog.registries`` lists the RecipeRegistries whose ``targetNamespace`` is the API's
  namespace (those whose Recipes its catalog serves; another namespace's registry, its URL and
  description are not this namespace's to see), by name (objects being deleted are gone):
  the reference's ``name``, ``enabled``, ``visible``, ``trusted`` and ``cached`` (the controller
  has written it from a commit: ``status.commit`` is set), plus ``url``, ``subpath``,
  ``description``, ``commit``, ``target_namespace`` and ``synced`` (its ``Synced`` condition).
- ``catalog.registries.add`` creates one with ``targetNamespace`` = the daemon API's namespace
  (where ``catalog.*`` reads Recipes), untrusted and enabled; the name must be a DNS-1123 label
  (it is a label value on what the controller writes) and the object must pass the CRD's schema
  and rules (the offline admission, ``api/admission.py``): both refused with 422 at submission.
- ``remove`` deletes it (its Recipes and ConfigMaps go with it: they are owned by it);
  ``enable``/``disable`` set ``spec.enabled``; ``trust`` (``acknowledge_trust: true``) sets
  ``spec.trusted`` and ``spec.acknowledgeTrust``; ``untrust`` clears both. Each reads the
  object first and writes with its UID as a precondition (a registry deleted and created again
  under the same name in between is not touched). Each answers every registry afterwards.
- ``catalog.refresh`` sets the annotation ``sparkrun.dev/sync-requested`` on every enabled
  registry of the API's namespace (a tenant's refresh never makes another namespace's
  registries fetch) and waits (at most :data:`REFRESH_WAIT_S`) for each controller's answer: the sync
  that answered it records the value in ``status.syncRequest`` and its outcome in the ``Synced``
  condition. ``updated`` maps each enabled registry to whether that sync succeeded; ``failed``
  lists the others (sorted), as the reference's ``refresh_registries`` does.

Errors are the reference's (``sparkrun.api.configure_registry``): ``SparkrunError`` with
"Registry configuration failed: Registry 'x' already exists" (409) or "... not found" (404).

Authorization. The daemon's ``admin`` scope is held in the API's namespace, but a RecipeRegistry
is cluster-scoped and trusting one lets code run in engine pods: a mutation also needs the
principal's own Kubernetes permission on ``sparkrun.dev/reciperegistries`` (a cluster-scoped
SubjectAccessReview: ``create`` for add, ``delete`` for remove, ``patch`` for the others), so the
daemon API never lets anyone do to a registry what they could not do with kubectl; it is asked
before the registry is read, so a refusal does not tell which names exist. Those operations
name any registry (a cluster administrator's); each answers the list of this namespace's.
``catalog.refresh`` (``operate``) only asks for a sync the controller would make anyway; a
registry asked within :data:`REFRESH_MIN_INTERVAL_S` is not asked again (its pending request is
awaited), so callers cannot turn it into a stream of fetches.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sparkrun_operator.api import admission
from sparkrun_operator.api.meta import API_VERSION, GROUP
from sparkrun_operator.api.resources import RECIPE_REGISTRY
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.ops import authz
from sparkrun_operator.ops.errors import Conflict, Invalid, NotFound
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys

__all__ = ["CHECKS", "EXECUTORS", "REGISTRIES", "registry_index", "registry_row"]

REGISTRIES: Final = resource_of(RECIPE_REGISTRY)
#: How long ``catalog.refresh`` waits for the controllers' answers, and how often it looks.
REFRESH_WAIT_S: Final = 60.0
REFRESH_POLL_S: Final = 0.5
#: A registry whose sync was requested this recently is not asked again by ``catalog.refresh``.
REFRESH_MIN_INTERVAL_S: Final = 10.0
#: A registry's name is a label value on every object its controller writes: a DNS-1123 label.
NAME_MAX: Final = 63
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_FAILED = "Registry configuration failed: "
_ERROR_TYPE = "SparkrunError"
_ADMISSION_ERRORS = 5
_MIN_INTERVAL: Final = dt.timedelta(seconds=REFRESH_MIN_INTERVAL_S)
_MANAGED_BY: Final = {"app.kubernetes.io/managed-by": keys.MANAGED_BY_DAEMON_API}


def _synced(obj: Mapping[str, Any]) -> bool | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Synced":
            return {"True": True, "False": False}.get(str(condition.get("status")))
    return None


def registry_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One registry as the daemon lists it (the reference's keys first)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "name": obj["metadata"]["name"],
        "enabled": bool(spec.get("enabled", True)),
        "visible": bool(spec.get("visible", True)),
        "trusted": bool(spec.get("trusted", False)),
        "cached": bool(status.get("commit")),
        "url": spec.get("url", ""),
        "subpath": spec.get("subpath") or "",
        "description": spec.get("description") or "",
        "commit": status.get("commit"),
        "target_namespace": spec.get("targetNamespace"),
        "synced": _synced(obj),
    }


async def _all(ctx: OperationContext, *, cached: bool = False) -> list[dict[str, Any]]:
    """The registries that serve this API's namespace (``spec.targetNamespace``), by name."""
    items = await ctx.rest.list(REGISTRIES, cached=cached)
    return sorted(
        (
            o
            for o in items
            if not o["metadata"].get("deletionTimestamp")
            and (o.get("spec") or {}).get("targetNamespace") == ctx.namespace
        ),
        key=lambda o: o["metadata"]["name"],
    )


async def registry_index(ctx: OperationContext) -> dict[str, dict[str, Any]]:
    """Every RecipeRegistry by name (read through the watch cache), for the catalog's listings."""
    return {o["metadata"]["name"]: o for o in await _all(ctx, cached=True)}


async def _answer(ctx: OperationContext) -> dict[str, Any]:
    return {"registries": [registry_row(o) for o in await _all(ctx)]}


def _failed(error: type[Conflict] | type[NotFound] | type[Invalid], message: str) -> Exception:
    return error(_FAILED + message, type_name=_ERROR_TYPE)


async def _get(ctx: OperationContext, name: str) -> dict[str, Any]:
    found = await ctx.rest.get(REGISTRIES, name) if _NAME.fullmatch(name) and len(name) <= NAME_MAX else None
    if found is None or found["metadata"].get("deletionTimestamp"):
        raise _failed(NotFound, f"Registry {name!r} not found")
    return found


async def _may(ctx: OperationContext, verb: str, name: str | None = None) -> None:
    """The principal itself may ``verb`` RecipeRegistries (cluster-scoped review)."""
    await authz.require_access(
        ctx.rest,
        ctx.user,
        verb=verb,
        group=GROUP,
        resource=REGISTRIES.plural,
        namespace="",
        name=name,
        because="a registry decides which code the cluster fetches and runs, so the daemon's admin "
        "scope alone does not suffice",
        reason="registry_not_authorized",
    )


def _body(args: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"url": args["url"], "targetNamespace": namespace}
    if args.get("subpath"):
        spec["subpath"] = args["subpath"]
    return {
        "apiVersion": API_VERSION,
        "kind": RECIPE_REGISTRY.kind,
        "metadata": {
            "name": args["name"],
            "labels": {"app.kubernetes.io/managed-by": keys.MANAGED_BY_DAEMON_API},
        },
        "spec": spec,
    }


def check_add(args: Mapping[str, Any], settings: Settings | None = None) -> None:
    """What ``catalog.registries.add`` refuses before a job exists: a name Kubernetes cannot use
    as a label value, or a registry the apiserver would refuse (the CRD's schema and rules)."""
    name = str(args.get("name") or "")
    if len(name) > NAME_MAX or not _NAME.fullmatch(name):
        raise Invalid(
            f"{_FAILED}Registry name {name[: NAME_MAX + 1]!r} is not a valid registry name: "
            f"at most {NAME_MAX} lowercase letters, digits and '-', starting and ending with a letter "
            "or digit (a DNS-1123 label: it labels every object the registry writes)"
        )
    errors = admission.validate(_body(args, settings.namespace if settings else "default"))
    if errors:
        listed = "; ".join(f"{e.path}: {e.message[:200]}" for e in errors[:_ADMISSION_ERRORS])
        raise Invalid(f"{_FAILED}Invalid registry: {listed}")


async def add(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await asyncio.to_thread(check_add, args, ctx.settings)
    await _may(ctx, "create")
    try:
        await ctx.rest.create(REGISTRIES, _body(args, ctx.namespace))
    except k8s_errors.KubeAlreadyExists as error:
        raise _failed(Conflict, f"Registry {args['name']!r} already exists") from error
    except (k8s_errors.KubeBadRequest, k8s_errors.KubeInvalid) as error:
        raise _failed(Invalid, f"Invalid registry: {error.message}") from error
    await ctx.feedback(f"Added registry {args['name']} (untrusted)", stage="add", registry=args["name"])
    return await _answer(ctx)


async def remove(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _may(ctx, "delete", args["name"])  # NB: first: no answer tells who may not which names exist
    found = await _get(ctx, args["name"])
    if not await ctx.rest.delete(
        REGISTRIES, args["name"], uid=found["metadata"].get("uid"), propagation="Background"
    ):
        raise _failed(NotFound, f"Registry {args['name']!r} not found")
    await ctx.feedback(f"Removed registry {args['name']}", stage="remove", registry=args["name"])
    return await _answer(ctx)


async def _patch_spec(ctx: OperationContext, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    await _may(ctx, "patch", name)  # NB: first, as in remove
    found = await _get(ctx, name)
    try:
        await ctx.rest.merge_patch(
            REGISTRIES, name, {"metadata": {"uid": found["metadata"].get("uid")}, "spec": dict(spec)}
        )
    except k8s_errors.KubeNotFound as error:
        raise _failed(NotFound, f"Registry {name!r} not found") from error
    except k8s_errors.KubeConflict as error:  # the UID precondition: deleted and created again
        raise _failed(NotFound, f"Registry {name!r} not found (replaced while this job ran)") from error
    return await _answer(ctx)


async def enable(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return await _patch_spec(ctx, args["name"], {"enabled": True})


async def disable(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return await _patch_spec(ctx, args["name"], {"enabled": False})


async def trust(ctx: OperationContext, args: dict[str, Any]) -> Any:
    if args.get("acknowledge_trust") is not True:
        raise Invalid("Review the registry and explicitly acknowledge that its recipes may execute hooks")
    answer = await _patch_spec(ctx, args["name"], {"trusted": True, "acknowledgeTrust": True})
    await ctx.feedback(f"Trusted registry {args['name']}", stage="trust", registry=args["name"])
    return answer


async def untrust(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return await _patch_spec(ctx, args["name"], {"trusted": False, "acknowledgeTrust": False})


async def registries(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return [registry_row(o) for o in await _all(ctx, cached=True)]


def _stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _requested_at(obj: Mapping[str, Any]) -> dt.datetime | None:
    raw = (obj["metadata"].get("annotations") or {}).get(keys.ANNOTATION_SYNC_REQUESTED)
    if not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


async def _request(ctx: OperationContext, obj: Mapping[str, Any], now: dt.datetime) -> str | None:
    """Ask ``obj``'s controller to sync (or join a request younger than the minimum interval): the
    annotation value its answer will carry, ``None`` when the registry is gone."""
    meta = obj["metadata"]
    earlier = _requested_at(obj)
    if earlier is not None and dt.timedelta(0) <= now - earlier < dt.timedelta(
        seconds=REFRESH_MIN_INTERVAL_S
    ):
        return str((meta.get("annotations") or {})[keys.ANNOTATION_SYNC_REQUESTED])
    value = _stamp(now)
    patch = {"metadata": {"uid": meta.get("uid"), "annotations": {keys.ANNOTATION_SYNC_REQUESTED: value}}}
    try:
        await ctx.rest.merge_patch(REGISTRIES, meta["name"], patch)
    except (k8s_errors.KubeNotFound, k8s_errors.KubeConflict):
        return None
    return value


async def _outcomes(ctx: OperationContext, asked: Mapping[str, str]) -> dict[str, bool]:
    """Each asked registry's outcome once its controller answered the request, within the wait."""
    done: dict[str, bool] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REFRESH_WAIT_S
    while True:
        by_name = {o["metadata"]["name"]: o for o in await _all(ctx)}
        for name, value in asked.items():
            if name in done:
                continue
            obj = by_name.get(name)
            if obj is None:
                done[name] = False
            elif (obj.get("status") or {}).get("syncRequest") == value:
                done[name] = _synced(obj) is True
            else:
                continue
            await ctx.feedback(
                f"Registry {name} {'refreshed' if done[name] else 'failed to refresh'}",
                stage="refresh",
                registry=name,
                success=done[name],
            )
        if len(done) == len(asked) or loop.time() >= deadline:
            break
        await asyncio.sleep(REFRESH_POLL_S)
    for name in asked:
        if name not in done:
            done[name] = False
            await ctx.feedback(
                f"Registry {name} did not answer within {REFRESH_WAIT_S:.0f} s",
                stage="refresh",
                registry=name,
                success=False,
            )
    return done


async def refresh(ctx: OperationContext, args: dict[str, Any]) -> Any:
    now = ctx.clock()
    asked: dict[str, str] = {}
    enabled: Sequence[dict[str, Any]] = [o for o in await _all(ctx) if registry_row(o)["enabled"]]
    for obj in enabled:
        value = await _request(ctx, obj, now)
        if value is not None:
            asked[obj["metadata"]["name"]] = value
    outcomes = await _outcomes(ctx, asked) if asked else {}
    updated = {o["metadata"]["name"]: outcomes.get(o["metadata"]["name"], False) for o in enabled}
    return {"updated": updated, "failed": sorted(name for name, ok in updated.items() if not ok)}


EXECUTORS: dict[str, Executor] = {
    "catalog.registries": registries,
    "catalog.registries.add": add,
    "catalog.registries.remove": remove,
    "catalog.registries.enable": enable,
    "catalog.registries.disable": disable,
    "catalog.registries.trust": trust,
    "catalog.registries.untrust": untrust,
    "catalog.refresh": refresh,
}
CHECKS: dict[str, ArgumentCheck] = {"catalog.registries.add": check_add}
