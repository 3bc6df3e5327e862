"""Stage 5a, status fields: replica counts, endpoints, the startup timeline, the first and last
failure (plan/failures.py keeps them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.workload import (
    ENGINE_PORT,
    Endpoint,
    FailureRecord,
    InferenceWorkloadStatus,
    StartupEvent,
)
from sparkrun_operator.plan import failures
from sparkrun_operator.plan.workload.model import (
    STARTUP_MAX,
    Observation,
    ObservedJobSet,
    ObservedPod,
    Plan,
    leader_pod,
    slot_of,
)


def count(obs: Observation, status: InferenceWorkloadStatus, *, revision: str | None) -> list[ObservedJobSet]:
    """Fill the counted fields of ``status``; the JobSets counted (live, not terminal)."""
    counted = [js for js in obs.jobsets if not js.deleting and js.terminal is None]
    status.replicas = len(counted)
    status.ready_replicas = len([js for js in counted if js.leader_ready and not js.suspended])
    status.endpoints = endpoints(counted, obs.pods)
    status.restarts = sum(js.restarts for js in counted)
    if revision is not None:
        status.startup = timeline(status.startup, obs=obs, revision=revision)
    status.first_failure, status.last_failure = _kept(obs)
    return counted


def endpoints(counted: Sequence[ObservedJobSet], pods: Sequence[ObservedPod]) -> list[Endpoint]:
    out: list[Endpoint] = []
    for js in sorted(counted, key=lambda j: (slot_of(j), j.name)):
        leader = leader_pod(pods, js.name)
        if leader is None or leader.ip is None or js.replica is None:
            continue
        out.append(
            Endpoint(
                replica=js.replica,
                url=f"http://{leader.ip}:{ENGINE_PORT}",
                ready=js.leader_ready and leader.ready,
            )
        )
    return out


def timeline(previous: list[StartupEvent], *, obs: Observation, revision: str) -> list[StartupEvent]:
    """Keep workload-level stages and this revision's per-replica stages; add newly seen ones."""
    events = [e for e in previous if e.replica is None or e.revision == revision]
    have = {(e.stage, e.replica, e.revision) for e in events}

    def add(stage: Any, replica: int | None, when: dt.datetime | None) -> None:
        key = (stage, replica, revision if replica is not None else None)
        if key in have:
            return
        have.add(key)
        events.append(
            StartupEvent(
                stage=stage,
                time=when or obs.now,
                replica=replica,
                revision=revision if replica is not None else None,
            )
        )

    for js in obs.jobsets:
        if js.revision != revision or js.replica is None or js.deleting:
            continue
        group = [p for p in obs.pods if p.jobset == js.name]
        leader = leader_pod(group, js.name)
        if group and all(p.node for p in group):
            add("scheduled", js.replica, max((p.scheduled_time or obs.now) for p in group))
        if leader is not None and leader.phase == "Running":
            add("running", js.replica, leader.running_time)
        if js.leader_ready and leader is not None and leader.ready:
            add("ready", js.replica, leader.ready_time)
    order = {"accepted": 0, "cacheReady": 1, "scheduled": 2, "running": 3, "ready": 4}
    events.sort(key=lambda e: (e.replica if e.replica is not None else -1, order.get(e.stage, 9), e.time))
    return events[-STARTUP_MAX:]


def failures_seen(obs: Observation) -> list[FailureRecord]:
    """The failures to be seen now: the pod events' records (with log lines), the pods' own and
    the Failed JobSets'."""
    candidates: list[FailureRecord] = list(obs.failures)
    candidates += [p.failure for p in obs.pods if p.failure is not None]
    for js in obs.jobsets:
        # NB: only with a time from the apiserver; "now" would change the status on every pass.
        if js.terminal == "Failed" and js.terminal_time is not None:
            candidates.append(
                FailureRecord(
                    reason="JobSetFailed",
                    message=clip(js.terminal_message, failures.MESSAGE_CHARS),
                    time=js.terminal_time,
                    object=f"JobSet/{js.name}",
                    replica=js.replica if js.replica is not None and js.replica >= 0 else None,
                    revision=js.revision if js.revision and len(js.revision) <= 16 else None,
                )
            )
    return candidates


def _kept(obs: Observation) -> tuple[FailureRecord | None, FailureRecord | None]:
    """The first and last failure with the ones seen now (cleared later, by the Ready set now:
    :func:`reset_first_failure`)."""
    first, last, _ = failures.keep(
        first=obs.status.first_failure,
        last=obs.status.last_failure,
        candidates=failures_seen(obs),
        ready_since=None,
        now=obs.now,
        reset_after=obs.spec.failures.reset_after_ready_seconds,
    )
    return first, last


def reset_first_failure(obs: Observation, status: InferenceWorkloadStatus, out: Plan) -> None:
    """Clear ``status.firstFailure`` once the workload has been Ready (the condition this pass
    set) for ``spec.failures.resetAfterReadySeconds`` without a newer failure; until then, look
    again when that time comes (the Ready condition's ``lastTransitionTime`` is when it began)."""
    ready = next((cond for cond in status.conditions if cond.type == c.READY), None)
    if status.first_failure is None or ready is None or ready.status != "True":
        return
    first, _, left = failures.keep(
        first=status.first_failure,
        last=status.last_failure,
        candidates=(),
        ready_since=ready.last_transition_time,
        now=obs.now,
        reset_after=obs.spec.failures.reset_after_ready_seconds,
    )
    status.first_failure = first
    if left is not None:
        out.later(max(1.0, left))
