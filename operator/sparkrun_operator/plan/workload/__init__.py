"""The InferenceWorkload planner: observed state -> next actions and the status to write.

``plan(obs)`` is pure (no I/O, no clock: ``obs.now`` is the time). It stores no progress
anywhere: every decision is derived again from what is observed (the JobSets with their
revision/replica labels, their pods, the ModelCache, the InferenceCluster and the engines'
sleep state), so a restarted operator continues any rollout exactly where it stopped.

Rules (``docs/resources/inferenceworkload.md``, "What runs" and "Changing it"):

- one JobSet per replica slot ``0..replicas-1`` at the desired serving revision; JobSets at
  other revisions are replaced: with ``maxSurge > 0`` the new one is created first and the old
  one deleted once the new leader is Ready; with ``maxSurge == 0`` the old one is deleted first
  (at most ``max(1, maxUnavailable)`` slots down at a time) and the new one created once the old
  one is gone. Never more than ``replicas + maxSurge`` JobSets exist, counting ones still being
  deleted (their pods may hold GPUs);
- scale down deletes the highest replica indices first;
- ``state: Stopped`` suspends every JobSet (with a Kueue queue, where Kueue owns ``suspend``,
  it deletes them instead); ``state: Sleeping`` keeps the pods and asks each Ready leader to
  sleep (an action the executor performs through the engine's ``/sleep``); ``Running`` wakes any
  leader found asleep;
- with ``cacheRef`` no JobSet is created until the ModelCache is Ready;
- a Failed JobSet (``maxRestarts`` exhausted) is deleted after :data:`FAILED_BACKOFF` and
  recreated; a Completed one (the server exited 0) at once;
- children are deleted with UID preconditions (a new object may reuse the name).

:func:`plan` is a pipeline of stages, one module each: ``gates`` (recipe, spec, cache,
cluster: may block) -> ``history`` (the kept revisions: the newest serves; rollback, drift,
pruning, ADR 0046) -> ``identity`` (ids, the served names) -> ``rolloutgate`` (the
benchmark a gated rollout waits for, and its verdict) -> ``children`` (Service,
JobSets) -> ``pool`` (the InferencePool, its endpoint picker, ``PoolAccepted``) -> ``sleep``
(engine sleep/wake calls) -> ``counts``, ``queue`` (Kueue: ``status.queue``, ``Admitted``),
``scheduled``, ``ownership``
(``status.lease``), the drain (``status.drain``: ``obs.drain``, the workload's groups in its
cluster's drain) and ``conditions`` (the status) -> ``scaling`` (``status.scaling``: the
autoscaler's news, the measured wakes; it reads the conditions just set). :func:`status_only`
runs the same stages for the status alone; :func:`finalize` folds what the apiserver refused
into the status to write.
"""

from __future__ import annotations

from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.plan.queue import QueueRead
from sparkrun_operator.plan.workload import (
    children,
    conditions,
    counts,
    gates,
    history,
    hooks,
    identity,
    ownership,
    pool,
    queue,
    rolloutgate,
    scaling,
    scheduled,
    sleep,
)
from sparkrun_operator.plan.workload.conditions import finalize
from sparkrun_operator.plan.workload.model import (
    FAILED_BACKOFF,
    PODLESS_AFTER,
    SLEEP_RECHECK_SECONDS,
    STARTUP_MAX,
    Conditions,
    Delete,
    EngineCall,
    Event,
    NodeCapacity,
    Observation,
    ObservedCache,
    ObservedCluster,
    ObservedGate,
    ObservedJobSet,
    ObservedPod,
    ObservedRecipe,
    Plan,
    SetSuspend,
)
from sparkrun_operator.render.workload import selector_string

__all__ = [
    "FAILED_BACKOFF",
    "PODLESS_AFTER",
    "SLEEP_RECHECK_SECONDS",
    "STARTUP_MAX",
    "Delete",
    "EngineCall",
    "Event",
    "NodeCapacity",
    "Observation",
    "ObservedCache",
    "ObservedCluster",
    "ObservedGate",
    "ObservedJobSet",
    "ObservedPod",
    "ObservedRecipe",
    "Plan",
    "QueueRead",
    "SetSuspend",
    "finalize",
    "plan",
    "status_only",
]


def plan(obs: Observation) -> Plan:
    """Derive the next actions and the complete new status from ``obs``."""
    out = Plan()
    cond = Conditions(obs.status.conditions, obs.generation, obs.now)
    status = _carried(obs)
    found = gates.check(obs, cond, status)
    recipe_hooks = hooks.settle(obs, found.effective, cond)
    serving = history.settle(obs, found, identity.desired(obs, found, recipe_hooks.plan), cond, status, out)
    inputs = serving.inputs
    identity.settle(obs, found, serving, status)
    verdict = rolloutgate.plan_gate(obs, out)
    children.plan_children(obs, out, inputs, verdict)
    pool.plan_pool(obs, out, cond, status)
    engines = sleep.plan_engines(obs, out, out.effective or found.effective)
    counted = counts.count(obs, status, revision=out.revision)
    hooks.timeline(obs, status, out, serving=inputs.hooks if inputs else None, decision=recipe_hooks)
    hooks.post_commands(obs, out, status, recipe_hooks)
    queued = queue.report(
        obs=obs,
        cond=cond,
        status=status,
        counted=counted,
        queue=inputs.queue_name if inputs is not None else None,
    )
    scheduled.scheduled(
        queued=queued,
        cond=cond,
        obs=obs,
        counted=counted,
        inputs=inputs,
        cluster_problem=found.cluster_problem,
        memory_problem=found.memory_problem,
    )
    ownership.report(obs, cond, status)
    status.drain = obs.drain  # the gateway skips the pods it lists (plan/drain.py)
    conditions.report(
        obs=obs,
        out=out,
        cond=cond,
        status=status,
        counted=counted,
        blocked=serving.blocked,
        sleep=engines,
        gate=verdict,
    )
    counts.reset_first_failure(obs, status, out)
    history.fit_budget(status)
    scaling.track(obs, status, out)
    return out


def status_only(obs: Observation) -> InferenceWorkloadStatus | None:
    """The status a full pass would write for ``obs`` when it has no child action to take and no
    Event to post; ``None`` otherwise (only a full pass, which acts and posts, may then write the
    status: a wake that ends posts ``Woke`` in the pass that writes its end)."""
    p = plan(obs)
    return p.status if p.idle and not p.events else None


def _carried(obs: Observation) -> InferenceWorkloadStatus:
    """The fields carried over from the previous status (each stage may update them)."""
    prev = obs.status
    return InferenceWorkloadStatus(
        observed_generation=obs.generation,
        selector=selector_string(obs.name),
        revision=prev.revision,
        workload_id=prev.workload_id,
        intent_id=prev.intent_id,
        recipe_revision=prev.recipe_revision,
        startup=list(prev.startup),
        last_failure=prev.last_failure,
        history=prev.history.model_copy(deep=True) if prev.history is not None else None,
        effective=prev.effective.model_copy(deep=True) if prev.effective is not None else None,
        drift=prev.drift.model_copy(deep=True) if prev.drift is not None else None,
        scaling=prev.scaling.model_copy(deep=True) if prev.scaling is not None else None,
    )
