"""``proxy.service_status``, ``proxy.start``, ``proxy.stop``, ``proxy.sync`` and
``proxy.discovery.status``: the daemon's gateway process controls, on the gateway Deployment.

On a host the daemon runs the gateway as a systemd unit or an ad-hoc process; here the gateway
is the chart's ``sparkrun-gateway`` Deployment (its Service has the same name) in the gateway
namespace, and routing is continuous (the gateway watches InferenceWorkloads and
EndpointSlices), so:

- ``service_status``: the Deployment as the unit (``installed``: it exists; ``enabled``:
  ``enabled`` unless scaled to zero; ``active``: ``active`` when a replica is available), the
  tail of one gateway pod's log as the ``journal`` (redacted), the discovery source;
- ``stop``: scale the Deployment to 0, remembering its replicas in
  ``sparkrun.dev/replicas-before-stop``; ``start``: scale it back (1 if nothing was remembered),
  and report the address (its Service) and the endpoints it routes to. Listener settings
  (``host``, ``port``, ``gateway``) must name that Service or be left out; discovery settings of
  the process gateway are ignored with a warning;
- ``sync``: merge ``aliases`` into the alias ConfigMap (as ``add_alias``); routing itself needs
  no sync: the result says so, with the gateway's state;
- ``discovery.status``: the continuous discovery's source and health.

``install_service``/``uninstall_service`` stay disabled (the Deployment is Helm's), as do
``discovery.ensure``/``stop`` (discovery is not a job that can be started or stopped).
A GitOps tool that owns the Deployment's ``spec.replicas`` reverts ``stop``; docs/install.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import DEPLOYMENTS, PODS
from sparkrun_operator.ops import kube, secrets
from sparkrun_operator.ops.errors import Invalid, NotFound
from sparkrun_operator.ops.executors import proxy
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.render import keys

__all__ = ["EXECUTORS"]

#: Arguments of the host process gateway that mean nothing for a Deployment.
_PROCESS_ONLY = (
    "host_filter",
    "cluster",
    "clear_cluster",
    "auto_discover",
    "discovery_backend",
    "discover_interval",
    "discover_removal_grace_sweeps",
    "restart",
    "persist",
    "scope",
)
DISCOVERY_SOURCE = "kubernetes-watch"


def _unit(ctx: OperationContext) -> str:
    return f"deployment/{ctx.settings.gateway_service}"


def _host(ctx: OperationContext) -> str:
    return f"{ctx.settings.gateway_service}.{ctx.settings.gateway_ns}.svc"


async def _deployment(ctx: OperationContext) -> dict[str, Any] | None:
    return await ctx.rest.get(DEPLOYMENTS, ctx.settings.gateway_service, ctx.settings.gateway_ns)


async def _require(ctx: OperationContext) -> dict[str, Any]:
    found = await _deployment(ctx)
    if found is None:
        raise NotFound(
            f"Deployment {ctx.settings.gateway_service} not found in namespace {ctx.settings.gateway_ns}: "
            "install the gateway with the chart (gateway.enabled)"
        )
    return found


async def _ignore(ctx: OperationContext, args: Mapping[str, Any]) -> list[str]:
    ignored = [key for key in _PROCESS_ONLY if key in args]
    if ignored:
        message = "Ignored on Kubernetes (process gateway settings): " + ", ".join(ignored)
        await ctx.emit("warning", {"message": message, "ignored": ignored})
        return [message]
    return []


def _discovery(ctx: OperationContext) -> dict[str, Any]:
    return {"source": DISCOVERY_SOURCE, "hosts": [], "scope": ctx.namespace}


async def _journal(ctx: OperationContext, lines: int) -> str:
    if lines <= 0:
        return ""
    pods = await ctx.rest.list(
        PODS, ctx.settings.gateway_ns, label_selector="app.kubernetes.io/component=gateway"
    )
    running = sorted(
        (p for p in pods if (p.get("status") or {}).get("phase") == "Running"),
        key=lambda p: str(p["metadata"]["name"]),
    )
    if not running:
        return ""
    pod = running[0]
    container = str(((pod.get("spec") or {}).get("containers") or [{}])[0].get("name") or "gateway")
    text = await ctx.rest.log_tail(
        ctx.settings.gateway_ns, pod["metadata"]["name"], container=container, lines=lines
    )
    redact = await secrets.known_secrets(ctx.rest, ctx.settings.gateway_ns, [pod.get("spec") or {}])
    redacted: str = await redact.apply(text)  # in a worker thread when long (ops.redact.THREAD_AT)
    return redacted


async def service_status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _ignore(ctx, args)
    found = await _deployment(ctx)
    if found is None:
        return {
            "installed": False,
            "unit": _unit(ctx),
            "scope": "kubernetes",
            "unit_path": None,
            "enabled": None,
            "active": None,
            "grant_ok": None,
            "linger": None,
            "journal": "",
            "discovery": None,
            "unavailable_reason": f"Deployment {_unit(ctx)} not found in {ctx.settings.gateway_ns}",
        }
    spec, status = found.get("spec") or {}, found.get("status") or {}
    available = int(status.get("availableReplicas") or 0)
    return {
        "installed": True,
        "unit": _unit(ctx),
        "scope": "kubernetes",
        "unit_path": DEPLOYMENTS.path(ctx.settings.gateway_ns, ctx.settings.gateway_service),
        "enabled": "enabled" if int(spec.get("replicas", 1) or 0) > 0 else "disabled",
        "active": "active" if available > 0 else "inactive",
        "grant_ok": None,
        "linger": None,
        "journal": await _journal(ctx, int(args.get("journal_lines", 20))),
        "discovery": _discovery(ctx),
        "unavailable_reason": None if available > 0 else "no gateway replica is available",
        "replicas": int(spec.get("replicas", 1) or 0),
        "available_replicas": available,
    }


async def _scale(ctx: OperationContext, replicas: int, remember: int | None) -> None:
    annotations: dict[str, Any] = {keys.ANNOTATION_REPLICAS_BEFORE_STOP: str(remember) if remember else None}
    patch = {"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}}
    await ctx.rest.merge_patch(DEPLOYMENTS, ctx.settings.gateway_service, patch, ctx.settings.gateway_ns)


async def stop(ctx: OperationContext, args: dict[str, Any]) -> Any:
    found = await _require(ctx)
    replicas = int((found.get("spec") or {}).get("replicas", 1) or 0)
    dry_run = bool(args.get("dry_run", False))
    if replicas > 0 and not dry_run:
        await _scale(ctx, 0, replicas)
        await ctx.feedback(f"Scaled {_unit(ctx)} from {replicas} to 0", stage="stop")
    return {"stopped": replicas > 0 and not dry_run, "was_running": replicas > 0, "pid": None,
            "dry_run": dry_run, "unit": _unit(ctx), "replicas_before": replicas}  # fmt: skip


def _check_listener(ctx: OperationContext, args: Mapping[str, Any]) -> None:
    wanted = {"host": _host(ctx), "port": ctx.settings.gateway_port, "gateway": proxy.GATEWAY}
    for key, actual in wanted.items():
        if key in args and args[key] not in (actual, ctx.settings.gateway_service):
            raise Invalid(
                f"{key} {args[key]!r}: the gateway listens on its Service "
                f"{_host(ctx)}:{ctx.settings.gateway_port}; change it with the chart's gateway values"
            )


async def start(ctx: OperationContext, args: dict[str, Any]) -> Any:
    _check_listener(ctx, args)
    warnings = await _ignore(ctx, args)
    found = await _require(ctx)
    meta, spec = found.get("metadata") or {}, found.get("spec") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    dry_run = bool(args.get("dry_run", False))
    started = False
    if replicas == 0 and not dry_run:
        remembered = str((meta.get("annotations") or {}).get(keys.ANNOTATION_REPLICAS_BEFORE_STOP) or "")
        target = int(remembered) if remembered.isdigit() and int(remembered) > 0 else 1
        await _scale(ctx, target, None)
        await ctx.feedback(f"Scaled {_unit(ctx)} from 0 to {target}", stage="start")
        started = True
    recipes = await recipe_specs(ctx)
    endpoints = []
    for workload in await ctx.rest.list(kube.WORKLOADS, ctx.namespace):
        entry = endpoint_entry(workload, recipes, with_recipe=False)
        endpoints.append({**entry, "models": entry["actual_models"]})
    _, aliases, _ = await proxy.gateway_state(ctx)
    served = {m for e in endpoints if e["healthy"] for m in e["models"]}
    return {
        "gateway": proxy.GATEWAY,
        "host": _host(ctx),
        "port": ctx.settings.gateway_port,
        "started": started,
        "dry_run": dry_run,
        "foreground_rc": None,
        "endpoints": endpoints,
        "aliases_applied": sorted(a for a, t in aliases.items() if t in served),
        "aliases_pending": sorted(a for a, t in aliases.items() if t not in served),
        "auto_discover": True,
        "discover_interval": 0,
        "discover_removal_grace_sweeps": 0,
        "config_path": None,
        "restarted": False,
        "persisted": [],
        "warnings": warnings,
        "discovery": _discovery(ctx),
        "unit": _unit(ctx),
    }


async def sync(ctx: OperationContext, args: dict[str, Any]) -> Any:
    await _ignore(ctx, args)
    wanted = args.get("aliases") or {}
    if not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in wanted.items()):
        raise Invalid("aliases must map alias names to target model names (strings)")
    counts = {"added": 0, "removed": 0}

    def change(aliases: dict[str, str], _loaded: dict[str, Any]) -> None:
        counts["added"] = sum(1 for k, v in wanted.items() if aliases.get(k) != v)
        aliases.update(wanted)

    if wanted:
        await proxy.update_state(ctx, change)
    return {
        "added": counts["added"],
        "removed": counts["removed"],
        "proxy_running": await proxy.gateway_running(ctx),
        "routing": "continuous: the gateway follows InferenceWorkloads and EndpointSlices as they change",
    }


async def discovery_status(ctx: OperationContext, args: dict[str, Any]) -> Any:
    running = await proxy.gateway_running(ctx)
    with contextlib.suppress(k8s_errors.KubeError):
        found = await _deployment(ctx)
        running = running and found is not None
    return {
        "owner": "gateway",
        "backend": DISCOVERY_SOURCE,
        "scope": ctx.namespace,
        "running": running,
        "health": "ok" if running else "unavailable",
        "interval_seconds": None,
        "warnings": [],
        "last_error": None,
    }


EXECUTORS: dict[str, Executor] = {
    "proxy.service_status": service_status,
    "proxy.start": start,
    "proxy.stop": stop,
    "proxy.sync": sync,
    "proxy.discovery.status": discovery_status,
}
