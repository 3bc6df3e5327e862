"""``discovery.snapshot`` and ``diagnostics.collect``.

Discovery. Endpoints are the InferenceWorkloads' Services, healthy when the workload is Ready
(the kubelet probes the leaders continuously, so the observation is live). ``workload_ids``
narrows the sweep; ``metadata_only`` reports recorded workloads without resolving hosts and may
not be combined with ``hosts``/``cluster``; with ``hosts``/``cluster`` only workloads with pods
on those nodes are reported, and requested nodes that do not exist are coverage errors.

Diagnostics. A bounded NDJSON bundle (one ``{"section", "record"}`` object per line): nodes of
the selection, InferenceClusters, InferenceWorkloads (spec and status), recent DaemonJobs (never
their arguments; only the caller's own unless it holds admin), Kubernetes events of the
namespace, and ``log_tail`` lines of the workload's pods when ``workload_id`` is given. Every
record is redacted (``ops.redact``: by name, by token shape, and by the values of the Secrets
the namespace's workloads and pods reference). The bundle is stored in the Secret ``<job
id>-diagnostics`` (type Opaque: it holds logs and specs), owned by the DaemonJob, so it expires
with the job; it is announced by an ``artifact`` event and downloaded from
``/v1/jobs/{id}/artifacts/diagnostics``. Secrets hold about 1 MiB, so bundles are stored gzip-
compressed and truncated to ``min(max_bytes, 8 MiB)`` of NDJSON (``truncated: true``).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import EVENTS, NODES, PODS, SECRETS
from sparkrun_operator.ops import authz, kube, secrets
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs
from sparkrun_operator.ops.executors.endpoints import sweep as _sweep
from sparkrun_operator.ops.invocation import Executor, OperationContext
from sparkrun_operator.ops.redact import Redactor
from sparkrun_operator.render import keys

__all__ = ["EXECUTORS", "collect_bundle", "read_bundle"]

BUNDLE_KEY = "diagnostics.ndjson.gz"
MAX_BUNDLE = 8 * 1024 * 1024
MAX_STORED = 900 * 1024


async def snapshot(ctx: OperationContext, args: dict[str, Any]) -> Any:
    if args.get("metadata_only") and (args.get("hosts") or args.get("cluster")):
        raise Invalid("metadata_only cannot be combined with hosts or cluster")
    workloads = await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    wanted = set(args.get("workload_ids") or ())
    if wanted:
        workloads = [
            w for w in workloads if kube.workload_id_of(w) in wanted or w["metadata"]["name"] in wanted
        ]
    recipes = await recipe_specs(ctx)
    if args.get("metadata_only"):
        return _sweep([endpoint_entry(w, recipes) for w in workloads], mode="metadata", hosts=[])
    seen = await kube.occupancy(ctx.rest, namespaces=ctx.settings.pod_namespaces)
    hosts, _ = await kube.cluster_hosts(
        ctx.rest, hosts=args.get("hosts"), cluster=args.get("cluster"), occupancy_=seen
    )
    errors = {h: "node not found" for h in hosts if h not in seen.nodes}
    if args.get("hosts") or args.get("cluster"):
        on = {(p.namespace, p.workload) for p in seen.pods if p.node in hosts and p.workload}
        workloads = [w for w in workloads if (w["metadata"]["namespace"], w["metadata"]["name"]) in on]
    return _sweep([endpoint_entry(w, recipes) for w in workloads], mode="live", hosts=hosts, errors=errors)


def read_bundle(secret: Mapping[str, Any]) -> bytes:
    """The NDJSON bytes of a stored bundle (its Secret)."""
    packed = (secret.get("data") or {}).get(BUNDLE_KEY)
    if not packed:
        return b""
    return gzip.decompress(base64.b64decode(packed))


async def known_secrets(ctx: OperationContext, specs: list[Any]) -> Redactor:
    """A redactor knowing the values of the Secrets that ``specs`` reference (in the namespace)."""
    return await secrets.known_secrets(ctx.rest, ctx.namespace, specs)


class _Bundle:
    def __init__(self, limit: int, redact: Redactor | None = None) -> None:
        self.limit = limit
        self.redact = redact or Redactor()
        self.lines: list[bytes] = []
        self.size = 0
        self.truncated = False

    async def add(self, section: str, record: Any) -> bool:
        # NB: a large record is redacted in a worker thread (ops.redact.THREAD_AT); a small one
        # on the loop, after a yield, so that up to 8 MiB of records never hold it in one go.
        await asyncio.sleep(0)
        clean = await self.redact.apply(json.loads(json.dumps(record, default=str)))
        line = json.dumps({"section": section, "record": clean}, default=str).encode() + b"\n"
        if self.size + len(line) > self.limit:
            self.truncated = True
            return False
        self.lines.append(line)
        self.size += len(line)
        return True


async def collect_bundle(ctx: OperationContext, args: Mapping[str, Any]) -> dict[str, Any]:
    """Collect, store and announce a bundle; returns the diagnostics.collect result."""
    limit = min(int(args.get("max_bytes") or MAX_BUNDLE), MAX_BUNDLE)
    bundle = _Bundle(limit)
    sections: list[dict[str, Any]] = []
    host_state: dict[str, bool] = {}
    planned = ["nodes", "clusters", "workloads", "daemonjobs", "events"]
    if args.get("workload_id"):
        planned.append("logs")
    if args.get("dry_run"):
        sections = [{"section": s, "status": "skipped", "detail": "dry run"} for s in planned]
        return _result(ctx, bundle, sections, host_state, partial=False, stored=0)

    bundle.redact = await _redactor(ctx)
    seen = await kube.occupancy(ctx.rest, namespaces=ctx.settings.pod_namespaces)
    hosts, _ = await kube.cluster_hosts(
        ctx.rest, hosts=args.get("hosts"), cluster=args.get("cluster"), occupancy_=seen
    )
    for host in hosts:
        node = seen.nodes.get(host)
        host_state[host] = bool(node and node.ready)
    collectors = {
        "nodes": _nodes(ctx, hosts),
        "clusters": _clusters(ctx),
        "workloads": _workloads(ctx),
        "daemonjobs": _daemonjobs(ctx),
        "events": _events(ctx),
    }
    for name, records in collectors.items():
        sections.append(await _section(bundle, name, records))
    partial = False
    if args.get("workload_id"):
        partial, logs = await _logs(ctx, bundle, str(args["workload_id"]), int(args.get("log_tail", 100)))
        sections.append(logs)
    stored = await _store(ctx, bundle)
    if stored < bundle.size:
        partial = True
    return _result(ctx, bundle, sections, host_state, partial=partial, stored=stored)


async def _section(bundle: _Bundle, name: str, records: Awaitable[list[Any]]) -> dict[str, Any]:
    """Add one section's records to the bundle (until it is full); the section's summary."""
    try:
        items = await records
    except k8s_errors.KubeError as error:
        return {"section": name, "status": "error", "detail": error.message or str(error.status)}
    for item in items:
        if not await bundle.add(name, item):
            break
    return {"section": name, "status": "ok"}


async def _nodes(ctx: OperationContext, hosts: Sequence[str]) -> list[Any]:
    wanted = set(hosts)
    return [
        {
            "metadata": {"name": node["metadata"]["name"], "labels": node["metadata"].get("labels")},
            "status": {
                k: node.get("status", {}).get(k)
                for k in ("capacity", "allocatable", "conditions", "nodeInfo")
            },
        }
        for node in await ctx.rest.list(NODES)
        if node["metadata"]["name"] in wanted
    ]


async def _clusters(ctx: OperationContext) -> list[Any]:
    return [
        {"metadata": {"name": c["metadata"]["name"]}, "spec": c.get("spec"), "status": c.get("status")}
        for c in await ctx.rest.list(kube.CLUSTERS)
    ]


async def _workloads(ctx: OperationContext) -> list[Any]:
    return [
        {
            "metadata": {"name": w["metadata"]["name"], "namespace": w["metadata"]["namespace"]},
            "spec": w.get("spec"),
            "status": w.get("status"),
        }
        for w in await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
    ]


async def _daemonjobs(ctx: OperationContext) -> list[Any]:
    from sparkrun_operator.k8s.daemonjobs import DAEMON_JOBS

    rows = await ctx.rest.list(DAEMON_JOBS, ctx.namespace)
    if not await authz.is_admin(authz.reviews_in(ctx.rest, ctx.namespace), ctx.user):
        # Other principals' jobs (and their errors) are theirs (docs/security.md).
        rows = [
            o for o in rows if ((o.get("spec") or {}).get("principal") or {}).get("username") == ctx.principal
        ]
    rows.sort(key=lambda o: str(o["metadata"].get("creationTimestamp")), reverse=True)
    return [
        {
            "id": o["metadata"]["name"],
            "operation": (o.get("spec") or {}).get("operation"),
            "state": (o.get("status") or {}).get("state") or "queued",
            "error": (o.get("status") or {}).get("error"),
            "created": o["metadata"].get("creationTimestamp"),
        }
        for o in rows[:100]
    ]


async def _events(ctx: OperationContext) -> list[Any]:
    rows = await ctx.rest.list(EVENTS, ctx.namespace)
    rows.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), reverse=True)
    return [
        {k: e.get(k) for k in ("type", "reason", "message", "involvedObject", "lastTimestamp", "count")}
        for e in rows[:200]
    ]


async def _logs(
    ctx: OperationContext, bundle: _Bundle, target: str, tail: int
) -> tuple[bool, dict[str, Any]]:
    """The last ``tail`` lines of every container of the target workload's pods: (partial, summary)."""
    partial = False
    try:
        pods = await ctx.rest.list(PODS, ctx.namespace, label_selector=f"{keys.LABEL_WORKLOAD}")
        names = {
            w["metadata"]["name"]
            for w in await ctx.rest.list(kube.WORKLOADS, ctx.namespace)
            if target in (w["metadata"]["name"], kube.workload_id_of(w))
        }
        for pod in pods:
            if (pod["metadata"].get("labels") or {}).get(keys.LABEL_WORKLOAD) not in names:
                continue
            for container in pod.get("spec", {}).get("containers") or ():
                path = PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"]) + "/log"
                where = {"pod": pod["metadata"]["name"], "container": container["name"]}
                query = {"container": container["name"], "tailLines": tail}
                try:
                    async for raw in ctx.rest.stream_lines(path, query=query, read_timeout=30):
                        line = raw.decode("utf-8", "replace").rstrip("\n")
                        await bundle.add("logs", {**where, "line": line})
                except k8s_errors.KubeError as error:
                    partial = True
                    await bundle.add("logs", {**where, "error": error.message})
    except k8s_errors.KubeError as error:
        return True, {"section": "logs", "status": "error", "detail": error.message}
    return partial, {"section": "logs", "status": "error" if partial else "ok"}


async def _redactor(ctx: OperationContext) -> Redactor:
    """Known secret values: those the namespace's workloads and their pods reference."""
    specs: list[Any] = []
    for resource, selector in ((kube.WORKLOADS, None), (PODS, keys.LABEL_WORKLOAD)):
        try:
            specs.extend(
                o.get("spec") for o in await ctx.rest.list(resource, ctx.namespace, label_selector=selector)
            )
        except k8s_errors.KubeError:
            continue
    return await known_secrets(ctx, specs)


async def _store(ctx: OperationContext, bundle: _Bundle) -> int:
    """Store the bundle (compressed, shrunk to fit a Secret); returns the bytes kept."""
    if ctx.job_id is None:
        return 0
    # NB: compressing up to 8 MiB (several times when it must shrink) is seconds of CPU: a thread.
    packed, lines = await asyncio.to_thread(_pack, list(bundle.lines))
    if len(lines) < len(bundle.lines):
        bundle.truncated = True
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"{ctx.job_id}-diagnostics",
            "namespace": ctx.namespace,
            "labels": {
                keys.LABEL_DAEMON_JOB: ctx.job_id,
                keys.LABEL_MANAGED_BY: keys.MANAGED_BY_DAEMON_API,
            },
            "ownerReferences": (
                [{"apiVersion": API_VERSION, "kind": DAEMON_JOB.kind, "name": ctx.job_id, "uid": ctx.job_uid}]
                if ctx.job_uid
                else []
            ),
        },
        "data": {BUNDLE_KEY: packed},
    }
    try:
        await ctx.rest.create(SECRETS, body, ctx.namespace)
    except k8s_errors.KubeAlreadyExists:
        await ctx.rest.replace(SECRETS, body["metadata"]["name"], body, ctx.namespace)
    size = len(b"".join(lines))
    await ctx.emit(
        "artifact",
        {
            "name": "diagnostics",
            "media_type": "application/x-ndjson",
            "size_bytes": size,
            "url": f"/v1/jobs/{ctx.job_id}/artifacts/diagnostics",
        },
    )
    return size


def _pack(lines: list[bytes]) -> tuple[str, list[bytes]]:
    """The stored form of the first of ``lines`` that fit a Secret (gzip, base64), and those."""
    while True:
        packed = base64.b64encode(gzip.compress(b"".join(lines), compresslevel=6)).decode()
        if len(packed) <= MAX_STORED or not lines:
            return packed, lines
        lines = lines[: max(0, len(lines) * 3 // 4)]


def _result(
    ctx: OperationContext,
    bundle: _Bundle,
    sections: list[dict[str, Any]],
    hosts: dict[str, bool],
    *,
    partial: bool,
    stored: int,
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "partial": partial,
        "truncated": bundle.truncated,
        "hosts": hosts,
        "sections": sections,
        "artifact": {
            "name": "diagnostics",
            "media_type": "application/x-ndjson",
            "size_bytes": stored,
            "url": f"/v1/jobs/{ctx.job_id}/artifacts/diagnostics" if ctx.job_id else "",
        },
    }


async def collect(ctx: OperationContext, args: dict[str, Any]) -> Any:
    return await collect_bundle(ctx, args)


EXECUTORS: dict[str, Executor] = {
    "discovery.snapshot": snapshot,
    "diagnostics.collect": collect,
}
