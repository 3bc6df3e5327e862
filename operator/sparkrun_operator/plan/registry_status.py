"""A RecipeRegistry's status and when it syncs next (pure; time is passed in).

A sync is due when the spec changed (``metadata.generation`` is not ``status.observedGeneration``),
when the ``sparkrun.dev/sync-requested`` annotation holds a value the last sync did not answer,
and every ``syncIntervalSeconds`` after the last attempt (after a failed one, at most
:data:`RETRY_FAILED_SECONDS`). A disabled registry never syncs; its objects stay. A failed sync
changes only the conditions and times: the recipes, digests and ConfigMaps of the last
successful one stay in status, so that what it wrote stays trusted and served. A synced status
is cut to its size budget (``plan/registry_budget.py``) and the ``Synced`` message says what was cut.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.meta import set_condition
from sparkrun_operator.api.registry import (
    RecipeRegistrySpec,
    RecipeRegistryStatus,
    RegisteredConfigMap,
    RegistryProblem,
    RegistryRecipeEntry,
)
from sparkrun_operator.plan.registry import SyncPlan
from sparkrun_operator.plan.registry_budget import fit

#: The longest wait before a failed sync is tried again.
RETRY_FAILED_SECONDS: Final = 300.0
#: The longest ``sparkrun.dev/sync-requested`` value kept (a longer one is cut: still a change).
REQUEST_MAX: Final = 256


@dataclass(frozen=True, kw_only=True)
class Moment:
    """Where a registry stands when a pass looks at it."""

    generation: int
    request: str | None
    now: dt.datetime


def request_of(annotation: object) -> str | None:
    return clip(annotation, REQUEST_MAX) if isinstance(annotation, str) and annotation else None


def _failed(status: RecipeRegistryStatus) -> bool:
    synced = next((x for x in status.conditions if x.type == c.SYNCED), None)
    return synced is not None and synced.status == "False"


def seconds_to_sync(spec: RecipeRegistrySpec, status: RecipeRegistryStatus, at: Moment) -> float | None:
    """Seconds until the next sync is due (0: now); ``None`` for a disabled registry."""
    if not spec.enabled:
        return None
    if status.observed_generation != at.generation or (at.request and at.request != status.sync_request):
        return 0.0
    if status.last_attempt_time is None:
        return 0.0
    interval = float(spec.sync_interval_seconds)
    if _failed(status):
        interval = min(interval, RETRY_FAILED_SECONDS)
    return max(0.0, (status.last_attempt_time - at.now).total_seconds() + interval)


def _base(previous: RecipeRegistryStatus, at: Moment) -> RecipeRegistryStatus:
    return previous.model_copy(
        deep=True, update={"observed_generation": at.generation, "conditions": list(previous.conditions)}
    )


def _conditions(
    status: RecipeRegistryStatus, at: Moment, *, synced: bool, reason: str, message: str, ready: bool
) -> None:
    set_condition(
        status.conditions,
        type=c.SYNCED,
        status="True" if synced else "False",
        reason=reason,
        message=message,
        observed_generation=at.generation,
        now=at.now,
    )
    set_condition(
        status.conditions,
        type=c.READY,
        status="True" if ready else "False",
        reason=reason,
        message=message,
        observed_generation=at.generation,
        now=at.now,
    )


def idle(
    spec: RecipeRegistrySpec, previous: RecipeRegistryStatus, at: Moment, *, served: bool
) -> RecipeRegistryStatus:
    """The status of a pass that does not sync: a disabled registry, a target namespace the
    operator does not serve, or a sync not due (then the status as it was, with this generation)."""
    status = _base(previous, at)
    if not spec.enabled:
        message = "disabled: not fetched; the Recipes and ConfigMaps it wrote stay as they are (not trusted)"
        _conditions(status, at, synced=False, reason=c.REASON_DISABLED, message=message, ready=False)
    elif not served:
        message = (
            f"this operator does not serve namespace {spec.target_namespace}: add it to the chart's "
            "watchNamespaces, or choose a served targetNamespace"
        )
        _conditions(status, at, synced=False, reason=c.REASON_TARGET_NOT_SERVED, message=message, ready=False)
    elif not status.conditions:
        _conditions(
            status, at, synced=False, reason=c.REASON_SYNC_PENDING, message="not synced yet", ready=False
        )
    return status


def may_skip(previous: RecipeRegistryStatus, at: Moment) -> bool:
    """Whether a sync may end early when the remote's commit is still ``status.commit``: the
    last sync succeeded at this generation (a spec change always syncs in full)."""
    synced = next((x for x in previous.conditions if x.type == c.SYNCED), None)
    return (
        previous.commit is not None
        and previous.observed_generation == at.generation
        and synced is not None
        and synced.status == "True"
        and synced.observed_generation == at.generation
    )


def unchanged(previous: RecipeRegistryStatus, at: Moment) -> RecipeRegistryStatus:
    """A sync that found the same commit and every object as recorded: only the times move."""
    status = _base(previous, at)
    status.last_sync_time = status.last_attempt_time = at.now
    status.sync_request = at.request
    return status


def failed(previous: RecipeRegistryStatus, at: Moment, *, reason: str, message: str) -> RecipeRegistryStatus:
    """A sync that could not fetch (or had no usable credentials): what was written stays."""
    status = _base(previous, at)
    status.last_attempt_time = at.now
    status.sync_request = at.request
    kept = f"; the objects of commit {status.commit[:12]} stay" if status.commit else ""
    _conditions(
        status, at, synced=False, reason=reason, message=f"{message}{kept}", ready=status.commit is not None
    )
    return status


def synced(
    previous: RecipeRegistryStatus,
    at: Moment,
    *,
    commit: str,
    planned: SyncPlan,
    entries: Sequence[RegistryRecipeEntry],
    config_maps: Sequence[RegisteredConfigMap],
    problems: Sequence[RegistryProblem],
) -> RecipeRegistryStatus:
    """The status after a sync at ``commit`` wrote what it could."""
    status = _base(previous, at)
    status.commit = commit
    status.last_sync_time = status.last_attempt_time = at.now
    status.sync_request = at.request
    status.counts = planned.counts
    status.recipes = list(entries)
    status.config_maps = list(config_maps)
    status.problems = list(problems)
    status.mods, status.benchmark_profiles, status.tuning = planned.mods, planned.profiles, planned.tuning
    fitted = fit(status)
    status = fitted.status
    counts = planned.counts
    summary = f"commit {commit[:12]}: {counts.valid} of {counts.recipes} recipes valid"
    if fitted.note:
        summary = f"{summary}; {fitted.note}"
    if problems:
        message = f"{summary}; {len(problems)} problem(s) in status.problems, first: {problems[0].message}"
        _conditions(
            status, at, synced=True, reason=c.REASON_SYNCED_WITH_PROBLEMS, message=message, ready=True
        )
    else:
        _conditions(status, at, synced=True, reason=c.REASON_SYNCED, message=summary, ready=True)
    return status
