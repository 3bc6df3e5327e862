"""Run one tool Job of a ``model_cache.*`` operation and read its report (its last JSON line).

The Job (``render/cachetool.py``) is created once per DaemonJob and step (named after both, so
an operation resumed after an executor restart finds it), polled until it finishes, its pod's
log tail read (at most ``REPORT_LOG_BYTES``), and deleted. A pod that cannot start
(unschedulable, image or volume errors) fails the operation with Kubernetes' own words once
``Settings.cache_tool_start_seconds`` pass; the whole run is bounded by
``Settings.cache_tool_timeout``.

The log may quote a hostile endpoint, so a report counts only when it agrees with how the tool
ended (:func:`report`): a tool that failed reports an ``error`` event with its own exit code (or,
``inspect`` exiting 7, the ``inspect`` report of what is missing); one that succeeded reports no
error. Anything else fails the operation without quoting the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.clip import echo
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import JOBS, PODS
from sparkrun_operator.ops.errors import DaemonError, Invalid, NotFound, OperationTimeout, Unreachable
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.jobs import MAX_RESULT_BYTES
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.render import keys
from sparkrun_operator.render.cachetool import ToolOptions, ToolRun, render_tool_job

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: What is read of a tool pod's log: its last lines, at most a job's result and the lines before.
REPORT_LOG_BYTES: Final = MAX_RESULT_BYTES + 64 * 1024
#: The downloader's exit code when ``inspect`` found files missing or invalid (its report is the answer).
EXIT_INSPECT_UNCLEAN: Final = 7
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


def exit_code(pod: Mapping[str, Any]) -> int | None:
    """The tool container's exit code, when it has terminated."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == keys.CONTAINER_CACHE_TOOL and isinstance(terminated, Mapping):
            code = terminated.get("exitCode")
            return code if isinstance(code, int) and not isinstance(code, bool) else None
    return None


def report(
    event: dict[str, Any] | None, *, failed: bool, exit_code: int | None, where: str
) -> dict[str, Any]:
    """``event`` when it agrees with how the tool ended; else a ``DaemonError`` that does not
    quote the log (a line there may be a hostile server's words, not the tool's report)."""
    code = "unknown" if exit_code is None else str(exit_code)
    if event is None:
        raise DaemonError(f"{where} printed no report (exit code {code})")
    kind = event.get("event")
    failed = failed or exit_code not in (None, 0)
    if not failed and kind != "error":
        return event
    if failed and kind == "error" and (exit_code is None or event.get("exit_code") == exit_code):
        return event
    unclean = kind == "inspect" and event.get("clean") is False
    if failed and unclean and exit_code == EXIT_INSPECT_UNCLEAN:
        return event
    outcome = "failed" if failed else "succeeded"
    said = echo(kind, 40)
    raise DaemonError(f"{where} {outcome} (exit code {code}) and its last report ({said}) disagrees")


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
    try:
        uid = (await ctx.rest.create(JOBS, doc))["metadata"].get("uid")
    except k8s_errors.KubeAlreadyExists:
        uid = ((await ctx.rest.get(JOBS, name, run.namespace)) or {"metadata": {}})["metadata"].get("uid")
    await ctx.feedback(f"running {run.verb} in Job {name}", stage=run.verb, activity="tool_job")
    try:
        return await _wait(ctx, run, name)
    finally:
        with contextlib.suppress(k8s_errors.KubeError):
            # NB: this Job only (its UID): a same-named successor is someone else's
            await ctx.rest.delete(JOBS, name, run.namespace, uid=uid, propagation="Background")


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
                run.namespace,
                str(pod["metadata"]["name"]),
                container=keys.CONTAINER_CACHE_TOOL,
                lines=5,
                limit_bytes=REPORT_LOG_BYTES,
            )
            event = report(
                last_event(tail),
                failed=bool(status.get("failed")) and not status.get("succeeded"),
                exit_code=exit_code(pod),
                where=f"the tool Job {name} of {run.verb}",
            )
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
