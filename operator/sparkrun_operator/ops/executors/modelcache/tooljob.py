"""Run one tool Job of a ``model_cache.*`` operation and read its report (its last JSON line).

The Job (``render/cachetool.py``) is created once per DaemonJob and step (named after both, so
an operation resumed after an executor restart finds it), polled until it finishes, its pod's
log tail read, and deleted. A pod that cannot start (unschedulable, image or volume errors)
fails the operation with Kubernetes' own words once ``Settings.cache_tool_start_seconds`` pass;
the whole run is bounded by ``Settings.cache_tool_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import JOBS, PODS
from sparkrun_operator.ops.context import OperationContext
from sparkrun_operator.ops.errors import DaemonError, Invalid, NotFound, OperationTimeout, Unreachable
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.render import keys
from sparkrun_operator.render.cachetool import ToolOptions, ToolRun, render_tool_job

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: Reasons of the tools' error events -> the daemon error they are.
_INVALID = {
    "InvalidArguments",
    "AuthenticationRequired",
    "RepositoryNotFound",
    "RevisionNotFound",
    "EntryNotFound",
}


def options_of(ctx: OperationContext) -> ToolOptions:
    s = ctx.settings
    return ToolOptions(
        image=s.tools_image,
        mount_path=s.cache_mount_path,
        scheduling=dict(s.cache_tool_scheduling),
        deadline_seconds=int(s.cache_tool_timeout),
    )


def _waiting(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason')}: {cond.get('message')}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return f"{waiting.get('reason')}: {waiting.get('message') or ''}".strip()
    return ""


def raise_for(event: Mapping[str, Any], what: str) -> None:
    """Turn a tool's ``error`` event into the daemon error it is."""
    reason, message = str(event.get("reason") or "Failed"), str(event.get("message") or "")
    text = f"{what}: {reason}: {message}"
    if reason == "NotCached":
        raise NotFound(text)
    if reason in _INVALID:
        raise Invalid(text)
    if reason == "HubUnavailable":
        raise Unreachable(text, retryable=True)
    raise DaemonError(text)


async def run_tool(ctx: OperationContext, run: ToolRun) -> tuple[dict[str, Any], str]:
    """Run ``run`` to completion: ``(its last event, the node it ran on)``."""
    options = options_of(ctx)
    doc = render_tool_job(run, options)
    name = doc["metadata"]["name"]
    with contextlib.suppress(k8s_errors.AlreadyExists):
        await ctx.rest.create(JOBS, doc)
    await ctx.feedback(f"running {run.verb} in Job {name}", stage=run.verb, activity="tool_job")
    try:
        return await _wait(ctx, run, name)
    finally:
        with contextlib.suppress(k8s_errors.KubeError):
            await ctx.rest.delete(JOBS, name, run.namespace, propagation="Background")


async def _wait(ctx: OperationContext, run: ToolRun, name: str) -> tuple[dict[str, Any], str]:
    started = time.monotonic()
    settings = ctx.settings
    while True:
        job = await ctx.rest.get(JOBS, name, run.namespace)
        if job is None:
            raise DaemonError(f"the tool Job {name} of {run.verb} was deleted before it finished")
        status = job.get("status") or {}
        pods = await ctx.rest.list(PODS, run.namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
        pod = pods[-1] if pods else None
        if status.get("succeeded") or status.get("failed"):
            if pod is None:
                raise DaemonError(f"the tool Job {name} of {run.verb} finished but its pod is gone")
            tail = await ctx.rest.log_tail(
                run.namespace, str(pod["metadata"]["name"]), container=keys.CONTAINER_CACHE_TOOL, lines=5
            )
            event = last_event(tail)
            if event is None:
                raise DaemonError(f"the tool Job {name} of {run.verb} printed no report")
            return event, str((pod.get("spec") or {}).get("nodeName") or "")
        waited = time.monotonic() - started
        why = _waiting(pod) if pod is not None else ""
        if why and waited > settings.cache_tool_start_seconds:
            raise DaemonError(f"the tool Job {name} of {run.verb} cannot start: {why}")
        if waited > settings.cache_tool_timeout:
            raise OperationTimeout(
                f"the tool Job {name} of {run.verb} did not finish in {settings.cache_tool_timeout:.0f} s"
            )
        await asyncio.sleep(settings.poll_interval)
