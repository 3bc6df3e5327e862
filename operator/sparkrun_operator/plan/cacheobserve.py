"""Raw objects -> the ModelCache planner's observed records (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.plan.modelcache import ObservedClaim, ObservedDownloadPod, ObservedJob, parse_log_tail
from sparkrun_operator.plan.observe import parse_time
from sparkrun_operator.render import keys

Obj = Mapping[str, Any]


def _conditions(obj: Obj) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def claim_from(claim: Obj, volume: Obj | None) -> ObservedClaim:
    """A PersistentVolumeClaim, with the node its bound volume is pinned to (if exactly one)."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    modes = status.get("accessModes") or (claim.get("spec") or {}).get("accessModes") or []
    return ObservedClaim(
        name=str(meta.get("name")),
        phase=str(status.get("phase") or "Pending"),
        access_modes=tuple(str(m) for m in modes),
        node=_pinned_node(volume) if volume else None,
        created=parse_time(meta.get("creationTimestamp")),
    )


def _pinned_node(volume: Obj) -> str | None:
    affinity = ((volume.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    nodes: set[str] = set()
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "In":
                nodes.update(str(v) for v in expr.get("values") or [])
    return nodes.pop() if len(nodes) == 1 else None


def job_from(job: Obj) -> ObservedJob:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    done = {str(c.get("type")): c for c in _conditions(job) if c.get("status") == "True"}
    failed = done.get("Failed")
    return ObservedJob(
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        succeeded="Complete" in done or int(status.get("succeeded") or 0) > 0,
        failed=failed is not None,
        reason=str(failed.get("reason") or "") if failed else "",
        message=str(failed.get("message") or "") if failed else "",
    )


def pod_from(pod: Obj, log_tail: str = "") -> ObservedDownloadPod:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    exit_code: int | None = None
    reason = message = ""
    final = ""
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != keys.CONTAINER_DOWNLOAD:
            continue
        state = cs.get("state") or {}
        if "terminated" in state:
            exit_code = int(state["terminated"].get("exitCode") or 0)
            # NB: terminationMessagePolicy FallbackToLogsOnError: the log's end, when the
            # log itself cannot be read (the node is gone).
            final = str(state["terminated"].get("message") or "")
        elif "waiting" in state:
            reason = str(state["waiting"].get("reason") or "")
            message = str(state["waiting"].get("message") or "")
    for cond in _conditions(pod):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = str(cond.get("reason") or "Unschedulable")
            message = str(cond.get("message") or "")
    return ObservedDownloadPod(
        name=str(meta.get("name")),
        node=spec.get("nodeName"),
        phase=str(status.get("phase") or "Pending"),
        created=parse_time(meta.get("creationTimestamp")),
        exit_code=exit_code,
        waiting_reason=reason,
        waiting_message=message,
        last_event=parse_log_tail(log_tail or final) if (log_tail or final) else None,
    )
