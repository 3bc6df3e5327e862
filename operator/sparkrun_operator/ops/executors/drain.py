"""``plugins.sparkrun-k8s.clusters.drain`` (admin job, ADR 0049): ask for a drain and follow it.

The job writes a fresh token to the InferenceCluster's ``spec.drain.request`` (the whole
``spec.drain`` in a JSON patch as field manager ``sparkrun-daemon-api``, guarded by
``metadata.generation`` and, under If-Match, by the resourceVersion checked: ``ops/rollout.py``
``write_spec``; a value the apiserver refuses is reported as such, 422), then, unless ``wait:
false``, reads ``status.drain`` every second and sends a feedback event each time a group
changes state, until the drain answering that token is Done or Blocked, another request
replaced it, or ``timeout_seconds`` passed. The operator does
the moving (``plan/drain.py``); the job only asks and reports. Its If-Match target is the
cluster (``ops/executors/targets.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
import time
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.drain import (
    MESSAGE_MAX_LENGTH,
    ClusterDrainStatus,
    DrainGroupReport,
    DrainRequest,
    DrainResult,
)
from sparkrun_operator.api.pluginops import PLUGIN_PREFIX
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER
from sparkrun_operator.ops import kube, rollout
from sparkrun_operator.ops.invocation import Executor, OperationContext

__all__ = ["EXECUTORS", "OPERATION"]

OPERATION: Final = PLUGIN_PREFIX + "clusters.drain"
#: How often the job reads the cluster while it follows the drain.
POLL_SECONDS: Final = 1.0


def new_token(now: dt.datetime) -> str:
    """A fresh request token: when, and random bits (never reused, 30 characters)."""
    return f"drain-{now.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(4)}"


def requested_drain(cluster: Mapping[str, Any], token: str, *, allow_last: bool) -> dict[str, Any]:
    """The cluster's ``spec.drain`` as read, with ``token`` as its request (and as
    ``allowLastReplicaFor`` when asked: the allowance is this request's only, never a standing
    ``allowLastReplica``): written whole (:func:`~sparkrun_operator.ops.rollout.write_spec`)."""
    current = (cluster.get("spec") or {}).get("drain")
    value = dict(current) if isinstance(current, Mapping) else {}
    value["request"] = token
    if allow_last:
        value["allowLastReplicaFor"] = token
    return value


def drain_of(cluster: Mapping[str, Any]) -> ClusterDrainStatus | None:
    """The cluster's ``status.drain`` (``None`` when absent or unreadable)."""
    raw = (cluster.get("status") or {}).get("drain")
    if not isinstance(raw, Mapping):
        return None
    try:
        return ClusterDrainStatus.model_validate(raw)
    except ValidationError:
        return None


def report(name: str, token: str, drain: ClusterDrainStatus | None, *, timed_out: bool) -> DrainResult:
    """The operation's result from the status as last read."""
    if drain is None or drain.request != token:
        return DrainResult(
            cluster=name,
            request=token,
            state="Idle",
            message="the operator has not answered yet",
            timed_out=timed_out,
        )
    groups = [
        DrainGroupReport(
            workload=f"{g.namespace}/{g.workload}",
            replica=g.replica,
            state=g.state,
            from_nodes=list(g.from_nodes),
            to_nodes=list(g.to_nodes),
            message=g.message,
        )
        for g in drain.groups
    ]
    return DrainResult(
        cluster=name,
        request=token,
        state=drain.state,
        nodes=list(drain.nodes),
        groups=groups,
        message=drain.message,
        timed_out=timed_out,
    )


async def _follow(ctx: OperationContext, name: str, token: str, within: float) -> DrainResult:
    """Read ``status.drain`` until the drain of ``token`` is Done or Blocked, or ``within`` seconds;
    a feedback event per group state change."""
    deadline = time.monotonic() + within
    seen: dict[tuple[str, str, int], tuple[str, str]] = {}
    drain: ClusterDrainStatus | None = None
    while True:
        cluster = await rollout.find_cluster(ctx.rest, name)
        drain = drain_of(cluster)
        asked = ((cluster.get("spec") or {}).get("drain") or {}).get("request")
        if asked != token:
            # NB: a later request (or none) replaced this one: the operator never answers it
            ended = report(name, token, drain, timed_out=False)
            message = clip(f"superseded: spec.drain.request is now {asked!r}", MESSAGE_MAX_LENGTH)
            return ended.model_copy(update={"message": message})
        if drain is not None and drain.request == token:
            for g in drain.groups:
                key, now = g.key, (g.state, g.message)
                if seen.get(key, ("", ""))[0] != g.state:
                    await ctx.feedback(
                        f"{g.namespace}/{g.workload} replica {g.replica}: {g.state}: {g.message}",
                        stage="drain",
                        state=g.state,
                        workload=f"{g.namespace}/{g.workload}",
                        replica=g.replica,
                    )
                seen[key] = now
            if drain.state in ("Done", "Blocked"):
                return report(name, token, drain, timed_out=False)
        if time.monotonic() >= deadline:
            return report(name, token, drain, timed_out=True)
        await asyncio.sleep(POLL_SECONDS)


async def drain(ctx: OperationContext, args: Mapping[str, Any]) -> Any:
    """The operation: write the request, then follow it (see the module docs)."""
    request = DrainRequest.model_validate(dict(args))
    cluster = await rollout.find_cluster(ctx.rest, request.cluster)
    token = new_token(ctx.clock())
    await rollout.write_spec(
        ctx.rest.as_manager(DAEMON_API_MANAGER),
        kube.CLUSTERS,
        cluster,
        sets={"/drain": requested_drain(cluster, token, allow_last=request.allow_last_replica)},
        if_match=ctx.if_match,
    )
    await ctx.feedback(f"InferenceCluster {request.cluster}: drain requested ({token})", stage="drain")
    if not request.wait:
        result = report(request.cluster, token, None, timed_out=False)
    else:
        result = await _follow(ctx, request.cluster, token, float(request.timeout_seconds))
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


EXECUTORS: dict[str, Executor] = {OPERATION: drain}
