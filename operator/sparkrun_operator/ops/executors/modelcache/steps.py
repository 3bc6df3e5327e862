"""Steps the ``model_cache.*`` verbs share: scan a location, resolve a revision, run the cache
tool, retire the ModelCaches that track revisions being removed."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sparkrun_operator.api.credentials import HUGGING_FACE, withheld
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import JOBS
from sparkrun_operator.ops.errors import Invalid, NotFound
from sparkrun_operator.ops.executors.modelcache import inventory
from sparkrun_operator.ops.executors.modelcache.location import CACHES, Location
from sparkrun_operator.ops.executors.modelcache.tooljob import raise_for, run_tool
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.render import keys
from sparkrun_operator.render.cachetool import DOWNLOAD_MODULE, TOOL_MODULE, ToolRun

COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: How long removal waits for the ModelCaches it deletes to be gone (their finalizer).
RETIRE_SECONDS = 30.0


def is_commit(value: str | None) -> bool:
    return bool(value) and COMMIT.match(str(value)) is not None


def tool(
    ctx: OperationContext,
    loc: Location | None,
    verb: str,
    args: Sequence[str],
    *,
    module: str = TOOL_MODULE,
    read_only: bool = True,
    token: bool = False,
    endpoint: str | None = None,
) -> ToolRun:
    """A tool command of this operation at ``loc`` (an emptyDir root when ``loc`` is None).

    ``token``: the operator's Hub token goes with it, with the origins it may be sent to (the
    downloader goes anonymous elsewhere: an endpoint recorded on the volume), and not at all when
    the allowlist is empty or ``endpoint`` (the caller's) is not on it (ADR 0040)."""
    selector, tolerations = loc.scheduling() if loc is not None else ({}, [])
    settings = ctx.settings
    origins = settings.credential_endpoints.origins(HUGGING_FACE)
    permitted = endpoint is None or settings.credential_endpoints.permits(HUGGING_FACE, endpoint)
    secret = settings.hub_token_secret if token and origins and permitted else None
    return ToolRun(
        job_id=ctx.job_id or "query",
        job_uid=ctx.job_uid or "",
        namespace=ctx.namespace,
        verb=verb,
        module=module,
        args=list(args),
        claim=loc.claim if loc is not None else None,
        sub_path=loc.path if loc is not None else "",
        read_only=read_only,
        token_secret=secret,
        token_origins=tuple(origins) if secret is not None else (),
        node_selector=selector,
        tolerations=tolerations,
    )


async def downloader(
    ctx: OperationContext,
    loc: Location | None,
    verb: str,
    args: Sequence[str],
    endpoint: str | None,
    *,
    read_only: bool = True,
) -> ToolRun:
    """The downloader with the operator's Hub token as far as the allowlist lets it go; the
    caller hears when its ``endpoint`` gets anonymous requests instead (ADR 0040)."""
    allowlist = ctx.settings.credential_endpoints
    if endpoint and ctx.settings.hub_token_secret and not allowlist.permits(HUGGING_FACE, endpoint):
        await ctx.feedback(withheld(HUGGING_FACE, endpoint, allowlist.origins(HUGGING_FACE)))
    return tool(
        ctx, loc, verb, args, module=DOWNLOAD_MODULE, read_only=read_only, token=True, endpoint=endpoint
    )


async def run_checked(
    ctx: OperationContext, run: ToolRun, what: str, *, ok: Sequence[str]
) -> tuple[dict[str, Any], str]:
    """Run the tool; its event must be one of ``ok`` (an ``error`` event raises)."""
    event, host = await run_tool(ctx, run)
    if event.get("event") == "error":
        raise_for(event, what)
    if event.get("event") not in ok:
        raise Invalid(f"{what}: unexpected tool output {event.get('event')!r}")
    return event, host or "cluster"


async def scan(
    ctx: OperationContext, loc: Location, *, repo: str | None = None, step: str = "scan"
) -> tuple[dict[str, Any], str]:
    args = ["scan", *(["--repo", repo] if repo else [])]
    return await run_checked(ctx, tool(ctx, loc, step, args), f"scanning {loc.cache_dir}", ok=("report",))


def trackers(loc: Location) -> list[inventory.Tracker]:
    return [inventory.Tracker.of(c) for c in loc.caches]


def resolve_revision(
    rows: Sequence[Mapping[str, Any]], loc: Location, repo: str, revision: str | None
) -> str | None:
    """A commit for ``revision`` (a commit, or a ref name resolved through the cache's refs, then
    through what ModelCaches at the location resolved it to); ``None`` when ``revision`` is None."""
    if revision is None:
        return None
    if is_commit(revision):
        return revision
    for row in rows:
        if row["repo"] == repo and revision in (row.get("refs") or ()):
            return str(row["commit"])
    for t in trackers(loc):
        if t.repo == repo and t.revision == revision and t.commit:
            return t.commit
    raise NotFound(f"{repo}: no ref {revision!r} in the cache at {loc.cache_dir} (pass a full commit)")


async def retire(
    ctx: OperationContext, entries: Sequence[inventory.Entry], *, force: bool = False
) -> list[inventory.Entry]:
    """Delete the ModelCaches tracking ``entries`` (orphaning their claim: the location outlives
    them) and wait until they are gone; the entries whose trackers are gone, safe to remove."""
    uids = {t.name: t.uid for e in entries for t in e.trackers}
    names = sorted(uids)
    # NB: every write carries the UID read: a same-named ModelCache created since is another
    # tracker of the location (kept, and its entries are not safe to remove)
    replaced: set[str] = set()
    for name in names:
        try:
            if force:
                patch: dict[str, Any] = {
                    "metadata": {"annotations": {keys.ANNOTATION_FORCE_DELETE: "model_cache.delete"}}
                }
                if uids[name]:
                    patch["metadata"]["uid"] = uids[name]  # NB: a precondition in a patch
                with contextlib.suppress(k8s_errors.KubeNotFound):
                    await ctx.rest.merge_patch(CACHES, name, patch, ctx.namespace)
            with contextlib.suppress(k8s_errors.KubeNotFound):
                await ctx.rest.delete(CACHES, name, ctx.namespace, uid=uids[name], propagation="Orphan")
        except k8s_errors.KubeConflict:
            replaced.add(name)
    deadline = time.monotonic() + RETIRE_SECONDS
    remaining = set(names) - replaced
    while remaining and time.monotonic() < deadline:
        for name in sorted(remaining):
            found = await ctx.rest.get(CACHES, name, ctx.namespace)
            if found is None or (uids[name] and found["metadata"].get("uid") != uids[name]):
                remaining.discard(name)
        if remaining:
            await asyncio.sleep(ctx.settings.poll_interval)
    remaining |= replaced
    for name in names:
        if name not in remaining:  # NB: the download Jobs were orphaned with the claim
            for job in await ctx.rest.list(
                JOBS, ctx.namespace, label_selector=f"{keys.LABEL_MODEL_CACHE}={name}"
            ):
                with contextlib.suppress(k8s_errors.KubeNotFound, k8s_errors.KubeConflict):
                    await ctx.rest.delete(
                        JOBS,
                        job["metadata"]["name"],
                        ctx.namespace,
                        uid=job["metadata"].get("uid"),
                        propagation="Background",
                    )
    safe = []
    for e in entries:
        if any(t.name in remaining for t in e.trackers):
            e.eligible, e.action = False, None
            e.reason_code = "usage_changed_during_cleanup"
            e.reason = (
                "a workload claimed it while it was being removed; its ModelCache waits (DeletionBlocked)"
            )
        else:
            safe.append(e)
    return safe


async def remove_files(
    ctx: OperationContext, loc: Location, entries: Sequence[inventory.Entry]
) -> dict[str, Any]:
    """Remove the snapshots of ``entries`` from the volume (tool ``remove``); its report."""
    if not entries:
        return {"reclaimed_bytes": 0, "free_bytes_after": None, "removed": []}
    args = ["remove", *[a for e in entries for a in ("--target", f"{e.repo}@{e.commit}")]]
    event, _host = await run_checked(
        ctx, tool(ctx, loc, "remove", args, read_only=False), f"removing from {loc.cache_dir}", ok=("report",)
    )
    return event


async def remove(
    ctx: OperationContext,
    loc: Location,
    targets: Sequence[inventory.Entry],
    *,
    action: str,
    force: bool = False,
) -> tuple[bool, int, int | None]:
    """Retire the targets' ModelCaches, remove their files, set ``action`` on each removed one:
    ``(all removed, reclaimed bytes, measured free bytes after or None)``."""
    safe = await retire(ctx, targets, force=force)
    done = await remove_files(ctx, loc, safe)
    removed = {(r["repo"], r["commit"]) for r in done.get("removed") or () if r.get("removed")}
    for e in safe:
        e.action = action if (e.repo, e.commit) in removed else None
    after = done.get("free_bytes_after")
    return (
        len(safe) == len(targets),
        int(done.get("reclaimed_bytes") or 0),
        int(after) if after is not None else None,
    )


__all__ = ["DOWNLOAD_MODULE", "TOOL_MODULE"]
