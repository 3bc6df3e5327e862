"""``model_cache.list``, ``pin``, ``prune``, ``reconcile``, ``adopt`` and ``delete``: retention over
a location's snapshots (a tool scan) and the ModelCaches that track them (ADR 0023).

- ``list``: the inventory with each revision's protection; changes nothing.
- ``pin``: ``spec.pinned`` of the ModelCaches tracking the revision (a commit or a ref name).
- ``prune``: eligible revisions, least recently used first until ``max_bytes`` /
  ``min_free_bytes`` are met (all of them without a target); dry run by default. Applying deletes
  their ModelCaches (claim orphaned), waits until they are gone, then removes their files.
- ``reconcile``: releases a claim recorded in a ModelCache's status only when ``confirm_inactive``,
  the workload is absent, no unfinished DaemonJob names it, and the claim was last seen in use
  longer ago than ``Settings.claim_min_age`` plus the clock-skew allowance. The release is a
  pass of the ModelCache controller (``sparkrun.dev/reconcile-requested``), the only author of
  the status, which derives claims from the workloads that exist; the operation waits for it.
- ``adopt``: snapshots no ModelCache tracks, verified against their blob hashes by the tool; applying
  saves their manifests and creates a ModelCache per revision (``revision`` = the commit, so it
  becomes Ready without contacting the origin).
- ``delete``: every revision of ``model`` (or one); refused as a whole if any target has a download
  in progress, a workload claim (unless ``force``) or is outside ``allowed_revisions``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.daemonjobs import DAEMON_JOBS
from sparkrun_operator.ops import ifmatch, jobs, kube
from sparkrun_operator.ops.errors import Conflict, Invalid, NotFound
from sparkrun_operator.ops.executors.modelcache import inventory, steps
from sparkrun_operator.ops.executors.modelcache.location import CACHES, Location, locate, parse_cache_dir
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor, OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys

DEFAULT_MIN_AGE_DAYS = 7.0
#: How long ``reconcile`` waits for the controller to drop a released claim.
RELEASE_SECONDS = 30.0


def _report(
    ctx: OperationContext,
    loc: Location,
    host: str,
    body: Mapping[str, Any],
    entries: Sequence[inventory.Entry],
    **kw: Any,
) -> dict[str, Any]:
    return inventory.report(
        entries,
        namespace=ctx.namespace,
        host=host,
        cache_root=loc.cache_dir,
        location=loc.describe(host),
        free_bytes=int(body.get("free_bytes") or 0),
        **kw,
    )


async def _inventory(
    ctx: OperationContext,
    loc: Location,
    *,
    repo: str | None = None,
    min_age_days: float = DEFAULT_MIN_AGE_DAYS,
) -> tuple[dict[str, Any], str, list[inventory.Entry]]:
    body, host = await steps.scan(ctx, loc, repo=repo)
    tracked = [t for t in steps.trackers(loc) if repo is None or t.repo == repo]
    entries = inventory.join(body["snapshots"], tracked)
    inventory.protect(entries, now=ctx.clock(), min_age_days=min_age_days, busy=inventory.busy_repos(tracked))
    return body, host, entries


async def list_cache(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    loc = await locate(ctx, args)
    body, host, entries = await _inventory(ctx, loc)
    return [_report(ctx, loc, host, body, entries, dry_run=True)]


async def pin(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    loc = await locate(ctx, args)
    model, pinned = str(args["model"]), bool(args.get("pinned", True))
    body, host, entries = await _inventory(ctx, loc, repo=model)
    commit = steps.resolve_revision(body["snapshots"], loc, model, str(args["revision"]))
    target = next((e for e in entries if e.commit == commit), None)
    if target is None or not target.tracked:
        raise Invalid(
            f"{model}@{commit} is not tracked at {loc.cache_dir}: enrol it with model_cache.adopt "
            "(or create a ModelCache for it) before pinning"
        )
    if ctx.if_match is not None and len(target.trackers) != 1:
        raise Invalid(
            f"If-Match on model_cache.pin names one ModelCache, and {len(target.trackers)} track "
            f"{model}@{commit} at {loc.cache_dir}: send no If-Match to pin them all"
        )
    for t in target.trackers:
        patch = {"spec": {"pinned": pinned}}
        await ifmatch.merge_patch(ctx.rest, CACHES, t.name, ctx.namespace, patch, ctx.if_match)
    target.trackers = [inventory.Tracker(**{**t.__dict__, "pinned": pinned}) for t in target.trackers]
    inventory.protect(
        entries,
        now=ctx.clock(),
        min_age_days=DEFAULT_MIN_AGE_DAYS,
        busy=inventory.busy_repos(steps.trackers(loc)),
    )
    target.action = "pin"
    return [_report(ctx, loc, host, body, entries, dry_run=False)]


def check_location(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    """``cache_dir``, when given, names a claim and a directory (the operations' shared argument)."""
    if args.get("cache_dir") is not None:
        parse_cache_dir(str(args["cache_dir"]))


def check_prune(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    check_location(args)
    if float(args.get("min_age_days", DEFAULT_MIN_AGE_DAYS)) < 0:
        raise Invalid("min_age_days must be >= 0")
    for key in ("max_bytes", "min_free_bytes"):
        if args.get(key) is not None and int(args[key]) < 0:
            raise Invalid(f"{key} must be >= 0")


async def prune(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_prune(args)
    loc = await locate(ctx, args)
    dry_run = bool(args.get("dry_run", True))
    min_age = float(args.get("min_age_days", DEFAULT_MIN_AGE_DAYS))
    body, host, entries = await _inventory(ctx, loc, min_age_days=min_age)
    free = int(body.get("free_bytes") or 0)
    chosen, met = inventory.select_for_prune(
        entries, free_bytes=free, max_bytes=args.get("max_bytes"), min_free_bytes=args.get("min_free_bytes")
    )
    planned = sum(e.reclaimable_bytes for e in chosen)
    if dry_run:
        for e in chosen:
            e.action = "would_remove"
        return [
            _report(
                ctx,
                loc,
                host,
                body,
                entries,
                dry_run=True,
                planned_bytes=planned,
                free_bytes_after=free + planned,
                target_met=met,
            )
        ]
    complete, reclaimed, after = await steps.remove(ctx, loc, chosen, action="removed")
    return [
        _report(
            ctx,
            loc,
            host,
            body,
            entries,
            dry_run=False,
            planned_bytes=planned,
            reclaimed_bytes=reclaimed,
            free_bytes_after=after if after is not None else free,
            measured=after is not None,
            target_met=met and complete,
        )
    ]


def claim_releasable(tracker: inventory.Tracker, *, now: Any, min_age: float, skew: float) -> str | None:
    """Why the claim of ``tracker`` may not be released yet (``None``: it may)."""
    if tracker.last_used is None:
        return None
    seen = (now - tracker.last_used).total_seconds()
    if seen < min_age + skew:
        return (
            f"ModelCache {tracker.name} saw the claim in use {seen:.0f} s ago; a claim is released "
            f"only {min_age + skew:.0f} s after its last use (minimum age plus clock-skew allowance)"
        )
    return None


async def _named_by_pending_job(ctx: OperationContext, workload: str) -> str | None:
    for obj in await ctx.rest.list(DAEMON_JOBS, ctx.namespace):
        if jobs.state_of(obj) in jobs.TERMINAL or obj["metadata"]["name"] == ctx.job_id:
            continue
        text = repr((obj.get("spec") or {}).get("arguments") or {})
        if re.search(rf"(?<![-a-z0-9.]){re.escape(workload)}(?![-a-z0-9.])", text):
            return str(obj["metadata"]["name"])
    return None


def check_reconcile(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    check_location(args)
    if not steps.is_commit(str(args.get("revision"))):
        raise Invalid("model_cache.reconcile requires a full immutable revision (a 40-hex commit)")
    if args.get("confirm_inactive") is not True:
        raise Invalid("confirm_inactive must be true: stop every workload and launch behind the claim first")


async def reconcile(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_reconcile(args)
    loc = await locate(ctx, args)
    model, revision, claim = str(args["model"]), str(args["revision"]), str(args["claim"])
    holders = [
        t for t in steps.trackers(loc) if t.repo == model and t.commit == revision and claim in t.claims
    ]
    if not holders:
        raise NotFound(f"no claim {claim!r} on {model}@{revision} at {loc.cache_dir}")
    if await ctx.rest.get(kube.WORKLOADS, claim, ctx.namespace) is not None:
        raise Conflict(
            f"InferenceWorkload {claim} exists: its claim is live (stop it with workloads.stop or drop its "
            "spec.model.cacheRef; the controller then releases the claim itself)"
        )
    pending = await _named_by_pending_job(ctx, claim)
    if pending is not None:
        raise Conflict(f"DaemonJob {pending} is unfinished and names {claim}; wait for it to finish")
    for t in holders:
        why = claim_releasable(
            t, now=ctx.clock(), min_age=ctx.settings.claim_min_age, skew=ctx.settings.clock_skew
        )
        if why:
            raise Conflict(why)
    await _release(ctx, [t.name for t in holders], claim)
    body, host, entries = await _inventory(ctx, await locate(ctx, args), repo=model)
    for e in entries:
        if e.commit == revision:
            e.action = "reconcile"
    return [_report(ctx, loc, host, body, entries, dry_run=False)]


async def _release(ctx: OperationContext, names: Sequence[str], claim: str) -> None:
    """Ask the ModelCaches' controller (the only author of their status) for a pass, and wait
    until it has dropped ``claim``; 409 when it does not within ``RELEASE_SECONDS``."""
    stamp = f"{ctx.job_id or 'model_cache.reconcile'}@{ctx.clock().isoformat()}"
    patch = {"metadata": {"annotations": {keys.ANNOTATION_RECONCILE_REQUESTED: stamp}}}
    for name in names:
        await ctx.rest.merge_patch(CACHES, name, patch, ctx.namespace)
    deadline = time.monotonic() + RELEASE_SECONDS
    while True:
        held = []
        for name in names:
            obj = await ctx.rest.get(CACHES, name, ctx.namespace)
            if obj is not None and claim in ((obj.get("status") or {}).get("claims") or ()):
                held.append(name)
        if not held:
            return
        if time.monotonic() > deadline:
            raise Conflict(
                f"ModelCaches {', '.join(held)} still record the claim {claim!r} after "
                f"{RELEASE_SECONDS:.0f} s: is the operator's ModelCache controller running?"
            )
        await asyncio.sleep(ctx.settings.poll_interval)


def adopted_name(repo: str, commit: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", repo.rsplit("/", 1)[-1].lower()).strip("-")[:40] or "model"
    return f"{slug}-{commit[:8]}"


def _adopted_cache(
    ctx: OperationContext, loc: Location, entry: inventory.Entry, args: Mapping[str, Any]
) -> dict[str, Any]:
    if args.get("last_used", "now") == "mtime" and entry.mtime is not None:
        last = dt.datetime.fromtimestamp(float(entry.mtime), dt.UTC)
    else:
        last = ctx.clock()
    source: dict[str, Any] = {"repo": entry.repo, "revision": entry.commit}
    if args.get("endpoint"):
        source["endpoint"] = args["endpoint"]
    selector, tolerations = loc.scheduling()
    download: dict[str, Any] = {}
    if selector:
        download["nodeSelector"] = selector
    if tolerations:
        download["tolerations"] = tolerations
    spec: dict[str, Any] = {
        "source": {"huggingFace": source},
        "storage": {"claimName": loc.claim, "path": loc.path},
        "pinned": bool(args.get("pinned", False)),
        "verify": "size",
    }
    if download:
        spec["download"] = download
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelCache",
        "metadata": {
            "name": adopted_name(entry.repo, entry.commit),
            "namespace": ctx.namespace,
            "labels": {keys.LABEL_CACHE_ENROLLED_BY: "adopt"},
            "annotations": {keys.ANNOTATION_ADOPTED_LAST_USED: last.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
        "spec": spec,
    }


def check_adopt(args: Mapping[str, Any], _settings: Settings | None = None) -> None:
    check_location(args)
    all_models = bool(args.get("all_models", False))
    if bool(args.get("model")) == all_models:
        raise Invalid("model_cache.adopt takes either model (optionally revision) or all_models: true")
    if all_models and args.get("revision"):
        raise Invalid("revision narrows model; it cannot be combined with all_models")


async def adopt(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    check_adopt(args)
    loc = await locate(ctx, args)
    model = args.get("model")
    dry_run = bool(args.get("dry_run", True))
    body, host, entries = await _inventory(ctx, loc, repo=str(model) if model else None)
    commit = (
        steps.resolve_revision(body["snapshots"], loc, str(model), args.get("revision")) if model else None
    )
    wanted = [e for e in entries if e.present and (commit is None or e.commit == commit)]
    if commit is not None and not wanted:
        raise NotFound(f"{model}@{commit} is not in the cache at {loc.cache_dir}")
    tool_args = [
        "adopt",
        *(["--repo", str(model)] if model else []),
        *(["--commit", commit] if commit else []),
    ]
    if dry_run:
        tool_args.append("--dry-run")
    event, host = await steps.run_checked(
        ctx,
        steps.tool(ctx, loc, "adopt", tool_args, read_only=dry_run),
        f"adopting at {loc.cache_dir}",
        ok=("report",),
    )
    results = {(r["repo"], r["commit"]): r for r in event.get("adopted") or ()}
    for e in wanted:
        row = results.get((e.repo, e.commit))
        if e.tracked:
            e.reason_code, e.reason = "not_adoptable", f"already tracked by ModelCache {e.trackers[0].name}"
            continue
        if row is None or row["result"] in ("not_adoptable", "adopt_unverifiable"):
            e.reason_code = row["result"] if row else "not_adoptable"
            e.reason = str(row.get("detail") if row else "not found by the tool")
            continue
        e.reason_code, e.reason = "adoptable", str(row.get("detail") or "")
        if dry_run:
            e.action = "would_adopt"
            continue
        try:
            await ctx.rest.create(CACHES, _adopted_cache(ctx, loc, e, args))
        except k8s_errors.KubeAlreadyExists:
            e.reason_code, e.reason = (
                "adopt_failed",
                f"ModelCache {adopted_name(e.repo, e.commit)} already exists",
            )
            continue
        e.action = "adopted"
    return [_report(ctx, loc, host, body, wanted, dry_run=dry_run)]


def _delete_blocks(
    e: inventory.Entry, *, force: bool, allowed: Sequence[str] | None, busy: frozenset[str]
) -> tuple[str, str] | None:
    if e.repo in busy:
        return "download_in_progress", "a ModelCache is downloading or verifying it (force does not override)"
    if e.claims and not force:
        return "workload_claim", f"used by InferenceWorkloads {', '.join(e.claims)} (force: true overrides)"
    if allowed is not None and e.commit not in allowed:
        return "selection_changed", "not in allowed_revisions (it appeared after the preview)"
    return None


async def delete(ctx: OperationContext, args: dict[str, Any]) -> list[dict[str, Any]]:
    loc = await locate(ctx, args)
    model = str(args["model"])
    dry_run, force = bool(args.get("dry_run", True)), bool(args.get("force", False))
    allowed = args.get("allowed_revisions")
    body, host, entries = await _inventory(ctx, loc, repo=model)
    commit = steps.resolve_revision(body["snapshots"], loc, model, args.get("revision"))
    targets = [e for e in entries if e.present and (commit is None or e.commit == commit)]
    blocked = False
    busy = inventory.busy_repos(steps.trackers(loc))
    for e in targets:
        why = _delete_blocks(e, force=force, allowed=allowed, busy=busy)
        e.eligible = why is None
        e.reason_code, e.reason = why or ("explicit_delete", "selected for deletion")
        blocked = blocked or why is not None
    if blocked:
        for e in targets:
            if e.eligible:
                e.eligible, e.reason_code, e.reason = (
                    False,
                    "delete_blocked",
                    "not deleted: another target is blocked",
                )
        return [_report(ctx, loc, host, body, targets, dry_run=dry_run, target_met=False)]
    planned = sum(e.reclaimable_bytes for e in targets)
    if dry_run:
        for e in targets:
            e.action = "would_delete"
        return [_report(ctx, loc, host, body, targets, dry_run=True, planned_bytes=planned)]
    complete, reclaimed, after = await steps.remove(ctx, loc, targets, action="deleted", force=force)
    return [
        _report(
            ctx,
            loc,
            host,
            body,
            targets,
            dry_run=False,
            planned_bytes=planned,
            reclaimed_bytes=reclaimed,
            free_bytes_after=after,
            measured=after is not None,
            target_met=complete,
        )
    ]


CHECKS: dict[str, ArgumentCheck] = {
    "model_cache.list": check_location,
    "model_cache.pin": check_location,
    "model_cache.prune": check_prune,
    "model_cache.reconcile": check_reconcile,
    "model_cache.adopt": check_adopt,
    "model_cache.delete": check_location,
}

EXECUTORS: dict[str, Executor] = {
    "model_cache.list": list_cache,
    "model_cache.pin": pin,
    "model_cache.prune": prune,
    "model_cache.reconcile": reconcile,
    "model_cache.adopt": adopt,
    "model_cache.delete": delete,
}
