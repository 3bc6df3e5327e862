"""``proxy.*`` aliases, models and status: the gateway is the ``sparkrun-gateway`` Deployment.

Imperative state (ADR 0006) lives in one ConfigMap, ``sparkrun-gateway-aliases`` in the API
namespace, so it is independent of any workload, survives restarts and can be managed by GitOps
too: key ``aliases.json`` (alias -> target model name) and key ``loaded-models.json`` (recipe ->
``{"overrides", "cluster"}`` registered for gateway discovery). The gateway resolves an alias to
the workloads serving its target; declarative aliases stay in ``InferenceWorkload.spec.model
.aliases``. Writes are resourceVersion-guarded read-modify-writes.

Models and status come from the InferenceWorkloads (Ready ones are routed) and the gateway
Service's EndpointSlices (the gateway runs when it has ready endpoints).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sparkrun_operator import safeload
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import retry_conflicts
from sparkrun_operator.k8s.resources import CONFIG_MAPS, ENDPOINT_SLICES
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, NotFound
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.render import keys

__all__ = ["EXECUTORS", "GATEWAY"]

GATEWAY = keys.GATEWAY_NAME
ALIASES_KEY = "aliases.json"
LOADED_KEY = "loaded-models.json"


def _value(ctx: OperationContext, data: dict[str, Any], key: str) -> dict[str, Any]:
    """One key of the state ConfigMap: a JSON object within ``safeload.ALIAS_STATE`` (whoever may
    write ConfigMaps in the namespace may write it). Raises ``Conflict`` naming it otherwise."""
    where = f"ConfigMap {ctx.settings.aliases_config_map}, key {key}"
    try:
        value = safeload.load_json(str(data.get(key) or "{}"), safeload.ALIAS_STATE)
    except safeload.DocumentError as error:
        raise Conflict(f"{where}: {error}; fix or delete it") from None
    if not isinstance(value, dict):
        raise Conflict(f"{where}: not a JSON object; fix or delete it")
    return value


async def _state(ctx: OperationContext) -> tuple[dict[str, Any] | None, dict[str, str], dict[str, Any]]:
    found = await ctx.rest.get(CONFIG_MAPS, ctx.settings.aliases_config_map, ctx.namespace)
    data = (found or {}).get("data") or {}
    return found, _value(ctx, data, ALIASES_KEY), _value(ctx, data, LOADED_KEY)


async def _update(
    ctx: OperationContext, change: Callable[[dict[str, str], dict[str, Any]], None]
) -> tuple[dict[str, str], dict[str, Any]]:
    """Read-modify-write of the gateway state ConfigMap (guarded by resourceVersion; a 409
    re-reads and retries with jitter)."""

    async def attempt() -> tuple[dict[str, str], dict[str, Any]]:
        found, aliases, loaded = await _state(ctx)
        change(aliases, loaded)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ctx.settings.aliases_config_map,
                "namespace": ctx.namespace,
                "labels": {
                    "app.kubernetes.io/component": "gateway",
                    keys.LABEL_MANAGED_BY: keys.MANAGED_BY_DAEMON_API,
                },
            },
            "data": {
                ALIASES_KEY: json.dumps(aliases, sort_keys=True),
                LOADED_KEY: json.dumps(loaded, sort_keys=True),
            },
        }
        if found is None:
            try:
                await ctx.rest.create(CONFIG_MAPS, body, ctx.namespace)
            except k8s_errors.KubeAlreadyExists as error:  # NB: created concurrently: a race too
                raise k8s_errors.KubeConflict(error.message, status=409) from error
        else:
            body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
            await ctx.rest.replace(CONFIG_MAPS, body["metadata"]["name"], body, ctx.namespace)
        return aliases, loaded

    try:
        return await retry_conflicts(attempt)
    except k8s_errors.KubeConflict as error:
        raise k8s_errors.KubeConflict("gateway state kept changing", status=409) from error


async def _running(ctx: OperationContext) -> bool:
    try:
        slices = await ctx.rest.list(
            ENDPOINT_SLICES,
            ctx.settings.gateway_ns,
            label_selector=f"kubernetes.io/service-name={ctx.settings.gateway_service}",
        )
    except k8s_errors.KubeError:
        return False
    return any(
        (endpoint.get("conditions") or {}).get("ready", True)
        for s in slices
        for endpoint in s.get("endpoints") or ()
    )


def _gateway_base(ctx: OperationContext) -> str:
    return (
        f"http://{ctx.settings.gateway_service}.{ctx.settings.gateway_ns}.svc:{ctx.settings.gateway_port}/v1"
    )


async def _models(ctx: OperationContext) -> list[dict[str, Any]]:
    _, aliases, _ = await _state(ctx)
    rows = []
    served: dict[str, dict[str, Any]] = {}
    recipes = await recipe_specs(ctx)
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        if not kube.is_ready(workload):
            continue
        entry = endpoint_entry(workload, recipes)
        for name in entry["actual_models"]:
            if not ctx.settings.name_policy.allows(ctx.namespace, name):
                continue  # withheld (NameNotAllowed): the gateway neither routes nor lists it
            served[name] = entry
            rows.append(
                {"model_name": name, "api_base": _gateway_base(ctx), "max_model_len": entry["max_model_len"]}
            )
    for alias, target in sorted(aliases.items()):
        if target in served and alias not in served and ctx.settings.name_policy.allows(ctx.namespace, alias):
            rows.append(
                {
                    "model_name": alias,
                    "api_base": _gateway_base(ctx),
                    "max_model_len": served[target]["max_model_len"],
                }
            )
    return rows


async def _applied(ctx: OperationContext, target: str) -> int:
    count = 0
    recipes = await recipe_specs(ctx)
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        if kube.is_ready(workload) and target in endpoint_entry(workload, recipes)["actual_models"]:
            count += 1
    return count


async def add_alias(ctx: OperationContext, args: dict[str, Any]) -> Any:
    alias, target = args["alias"], args["target"]

    def change(aliases: dict[str, str], _loaded: dict[str, Any]) -> None:
        aliases[alias] = target

    aliases, _ = await _update(ctx, change)
    return {
        "alias": alias,
        "target": target,
        "saved": True,
        "applied": await _applied(ctx, target),
        "removed": 0,
        "proxy_running": await _running(ctx),
        "aliases": aliases,
    }


async def remove_alias(ctx: OperationContext, args: dict[str, Any]) -> Any:
    alias = args["alias"]
    _, current, _ = await _state(ctx)
    if alias not in current:
        raise NotFound(f"Unknown alias: {alias}")
    target = current[alias]

    def change(aliases: dict[str, str], _loaded: dict[str, Any]) -> None:
        aliases.pop(alias, None)

    aliases, _ = await _update(ctx, change)
    return {
        "alias": alias,
        "target": target,
        "saved": True,
        "applied": 0,
        "removed": 1,
        "proxy_running": await _running(ctx),
        "aliases": aliases,
    }


async def list_aliases(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _, aliases, _ = await _state(ctx)
    return aliases


async def list_gateways(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return [GATEWAY]


async def resolve_gateway(ctx: OperationContext, args: dict[str, Any]) -> Any:
    name = args.get("name") or GATEWAY
    if name != GATEWAY:
        raise NotFound(f"Unknown gateway provider: {name} (available: {GATEWAY})")
    return name


async def models(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return await _models(ctx)


async def status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    running = await _running(ctx)
    error = ""
    try:
        rows = await _models(ctx)
    except k8s_errors.KubeError as failure:
        rows, error = [], f"Kubernetes API: {failure.message or failure.status}"
    return {
        "running": running,
        "gateway": GATEWAY,
        "pid": None,
        "host": f"{ctx.settings.gateway_service}.{ctx.settings.gateway_ns}.svc",
        "port": ctx.settings.gateway_port,
        "started_at": None,
        "autodiscover_pid": None,
        "autodiscover_running": running,
        "models": rows,
        "model_query_error": error,
        "known": True,
        "managed_by": "kubernetes",
        "discovery_status": {
            "owner": "gateway",
            "backend": "kubernetes-watch",
            "scope": ctx.namespace,
            "health": "ok" if running else "unavailable",
            "warnings": [],
            "last_error": None,
        },
    }


async def register_loaded_model(ctx: OperationContext, args: dict[str, Any]) -> Any:
    recipe = args["recipe"]
    before: dict[str, Any] = {}

    def change(_aliases: dict[str, str], loaded: dict[str, Any]) -> None:
        before.update(loaded)
        loaded[recipe] = {"overrides": args.get("overrides") or {}, "cluster": args.get("cluster")}

    await _update(ctx, change)
    return {"added": 0 if recipe in before else 1, "removed": 0, "proxy_running": await _running(ctx)}


async def unregister_loaded_model(ctx: OperationContext, args: dict[str, Any]) -> Any:
    recipe = args["recipe"]
    removed = 0

    def change(_aliases: dict[str, str], loaded: dict[str, Any]) -> None:
        nonlocal removed
        removed = 1 if loaded.pop(recipe, None) is not None else 0

    await _update(ctx, change)
    return {"added": 0, "removed": removed, "proxy_running": await _running(ctx)}


#: For the gateway Deployment's operations (``gateway_deployment.py``).
gateway_state = _state
update_state = _update
gateway_running = _running

EXECUTORS: dict[str, Executor] = {
    "proxy.add_alias": add_alias,
    "proxy.remove_alias": remove_alias,
    "proxy.list_aliases": list_aliases,
    "proxy.list_gateways": list_gateways,
    "proxy.resolve_gateway": resolve_gateway,
    "proxy.models": models,
    "proxy.status": status,
    "proxy.register_loaded_model": register_loaded_model,
    "proxy.unregister_loaded_model": unregister_loaded_model,
}
