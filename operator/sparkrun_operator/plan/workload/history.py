"""Stage 2, history: which serving revision the pods run, and the revisions kept (ADR 0046).

**The newest revision serves.** The kept ControllerRevision with the highest number
(``plan/workload/revisions.py``) is what the JobSets are rendered from; the desired settings
(the spec, its Recipe, cluster and cache resolved now) reach the pods only through a new
revision:

- no revision yet (a new workload, or one from before revisions were kept): the first is made
  from the desired settings (cause ``Created``);
- ``spec.rollout.revision: N`` (a rollback pin): when the newest is N, or a rollback of N,
  nothing moves; else a new revision copying N's settings is made (cause ``Rollback``,
  ``rollbackOf: N``). While pinned, desired changes are drift (``RevisionPinned``); N not kept:
  ``UpToDate=False`` ``RevisionNotFound`` and the newest keeps serving;
- the desired settings cannot be resolved (Recipe deleted or invalid, invalid spec): the newest
  keeps serving (a failed JobSet is even recreated from it), ``SourcesAvailable=False``;
- ``spec.recipe.revision`` pins a revision the Recipe has moved past: drift
  (``RecipeRevisionPinned``); with no revision yet it blocks, as before;
- the desired hash differs from the newest's: ``apply: Immediate`` makes a new revision (cause
  ``SpecChanged`` when the generation moved, else ``SourceChanged``); ``OnRequest`` records
  ``status.drift`` (``UpToDate=False`` ``DriftPending``) until ``spec.rollout.approve`` names the
  desired hash (cause ``DriftApplied``), and only once a previous pass has shown that hash as
  ``OnRequest`` drift (:func:`approved`): an ``approve`` left from before a rollback never rolls a
  hash out unseen.

Recipe hooks frozen in the serving revision that may no longer run (``hooktrust.py``: trust
withdrawn, the Recipe deleted or invalid) are a security event, not drift: a copy without them
is made whatever the above says (cause ``TrustWithdrawn``), and no rollback brings them back.

A cache, cluster or GPU-memory block stops new pods whatever serves. Revisions beyond
``revisionHistoryLimit`` are deleted oldest first (UID precondition), never the serving one, the
pinned one, or one whose hash a live JobSet runs. A revision's ``served-from`` annotation is set
when its pods are first Ready, ``served-until`` once another one serves.

With ``obs.revisions is None`` (not observed) the stage is off: the desired settings serve.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.history import (
    STATUS_BUDGET_BYTES,
    Change,
    DriftReason,
    DriftStatus,
    EffectiveStatus,
    HistoryStatus,
    RevisionCause,
    RevisionRef,
    ServingRevision,
    SourcedValue,
)
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.plan.workload import hooktrust
from sparkrun_operator.plan.workload.gates import Block, Gates
from sparkrun_operator.plan.workload.model import (
    Annotate,
    Conditions,
    Delete,
    Event,
    Observation,
    ObservedRevision,
    Plan,
)
from sparkrun_operator.plan.workload.revisions import (
    Kept,
    number_in_name,
    render_revision,
    revision_name,
    rollback_refused,
    stamp,
    usable,
)
from sparkrun_operator.recipe import provenance
from sparkrun_operator.render import frozen, keys
from sparkrun_operator.render.workload import Owner, ServingInputs

#: Entries of ``status.drift.changes`` and ``status.history.changes`` (the API's bounds).
DRIFT_CHANGES_MAX = 8
HISTORY_CHANGES_MAX = 8
#: ``ServingRevision.changes`` (the API's bound).
REVISION_CHANGES_MAX = 32
#: Seconds until the pass after one that shows drift its ``approve`` already names (the
#: operator's own status write pokes no pass).
APPROVAL_RECHECK_SECONDS = 1.0
#: The inputs besides the effective spec, and where each comes from.
_EXTRAS: tuple[tuple[str, Literal["workload", "cluster", "modelCache"]], ...] = (
    ("scheduling", "workload"),
    ("placement", "cluster"),
    ("cache", "modelCache"),
    ("pod", "workload"),
)


@dataclass(frozen=True, kw_only=True)
class Serving:
    """What the pods are rendered from (``None``: nothing new may be created) and what blocks."""

    inputs: ServingInputs | None = None
    #: The hash the JobSets carry (the serving revision's).
    revision: str | None = None
    blocked: Block | None = None


@dataclass(frozen=True, kw_only=True)
class _New:
    """A revision to make."""

    number: int
    data: ServingRevision
    inputs: ServingInputs


@dataclass(kw_only=True)
class _Pass:
    """One pass's findings: the kept revisions, what serves, what to make, the drift."""

    obs: Observation
    gates: Gates
    desired: ServingInputs | None
    #: The workload's own revisions with a ServingRevision as data, by number (not yet checked
    #: further: :meth:`usable` reads one's frozen inputs only when it is needed).
    ours: list[ObservedRevision]
    serve: Kept | None = None
    new: _New | None = None
    drift: tuple[DriftReason, str | None] | None = None
    up_to_date: tuple[bool | None, str, str] | None = None
    checked: dict[str, Kept | None] = field(default_factory=dict)

    def usable(self, found: ObservedRevision) -> Kept | None:
        """``found`` when it may serve (``revisions.usable``), read once per pass."""
        if found.uid not in self.checked:
            self.checked[found.uid] = usable(found, workload=self.obs.name, uid=self.obs.uid)
        return self.checked[found.uid]

    def newest_below(self, number: int | None = None) -> Kept | None:
        """The highest-numbered usable revision (below ``number``, when given)."""
        for found in reversed(self.ours):
            if number is not None and found.number >= number:
                continue
            if (kept := self.usable(found)) is not None:
                return kept
        return None

    @property
    def newest(self) -> Kept | None:
        return self.newest_below()


def settle(
    obs: Observation,
    gates: Gates,
    desired: ServingInputs | None,
    cond: Conditions,
    status: InferenceWorkloadStatus,
    out: Plan,
) -> Serving:
    """The serving inputs; revisions to make, prune and annotate into ``out``; ``status.revision``,
    ``history``, ``effective``, ``drift`` and the conditions ``UpToDate`` / ``SourcesAvailable``."""
    if obs.revisions is None:
        serving = _without_history(gates, desired)
    else:
        if desired is not None and (problem := frozen.problem(desired)) is not None:
            # NB: a spec the admission takes may still resolve past what a revision keeps (a
            # Recipe's long command with the workload's arguments): a source problem, the newest
            # revision keeps serving
            source = (c.REASON_INVALID_SPEC, problem)
            gates, desired = dataclasses.replace(gates, source=source, blocked=gates.blocked or source), None
        run = _Pass(obs=obs, gates=gates, desired=desired, ours=_ours(obs))
        serving = _decide(run)
        _act(run, out, serving)
        _report(run, cond, status)
    if serving.inputs is not None:
        out.revision = serving.revision
        out.effective = serving.inputs.spec
        status.revision = serving.revision
    return serving


def _without_history(gates: Gates, desired: ServingInputs | None) -> Serving:
    if desired is None:
        return Serving(blocked=gates.blocked)
    if gates.recipe_pin is not None:
        return Serving(blocked=(c.REASON_RECIPE_REVISION_MISMATCH, gates.recipe_pin))
    return Serving(inputs=desired, revision=desired.revision())


def _ours(obs: Observation) -> list[ObservedRevision]:
    """The workload's revisions that hold a ServingRevision, oldest first (one per number)."""
    found = {
        r.number: r
        for r in obs.revisions or ()
        if r.owner == obs.uid and r.data is not None and not r.deleting
    }
    return [found[number] for number in sorted(found)]


# -- the decision -----------------------------------------------------------------------------


def _decide(run: _Pass) -> Serving:
    """What serves (module docstring), and what to make."""
    obs, gates, desired, newest = run.obs, run.gates, run.desired, run.newest
    pin = obs.spec.rollout.revision
    if gates.runtime is not None:
        run.up_to_date = (None, gates.runtime[0], gates.runtime[1])
        return Serving(blocked=gates.runtime)
    if newest is None:
        return _first(run)
    wanted = desired.revision() if desired is not None else None
    if pin is not None:
        _pinned(run, pin, wanted)
    elif desired is None or wanted is None:
        assert gates.source is not None
        run.serve = newest
        run.up_to_date = (
            None,
            gates.source[0],
            f"the desired settings cannot be resolved: {gates.source[1]}",
        )
    elif gates.recipe_pin is not None and wanted != newest.data.hash:
        run.serve = newest
        run.drift = ("RecipeRevisionPinned", wanted)
        run.up_to_date = (False, c.REASON_RECIPE_REVISION_PINNED, gates.recipe_pin)
    elif wanted == newest.data.hash:
        run.serve = newest
        run.up_to_date = (True, c.REASON_REVISION_CURRENT, f"revision {newest.number} ({wanted}) is current")
    elif obs.spec.rollout.apply == "Immediate":
        _make(run, desired, _changed(run))
    elif approved(obs, wanted):
        _make(run, desired, "DriftApplied")
    else:
        run.serve = newest
        run.drift = ("OnRequest", wanted)
        run.up_to_date = (
            False,
            c.REASON_DRIFT_PENDING,
            f"the desired settings ({wanted}) differ from revision {newest.number} ({newest.data.hash}); "
            f"set spec.rollout.approve: {wanted!r} to roll them out",
        )
    _withdraw(run)
    return _serving(run)


def approved(obs: Observation, wanted: str) -> bool:
    """``spec.rollout.approve`` names ``wanted`` and the previous pass showed it as pending drift
    (``status.drift`` reason ``OnRequest``, that hash): an approval counts only for what was
    shown. An ``approve`` left over from before a rollback (or set ahead of time) names a hash no
    pass has shown yet: this pass records the drift, and only a later one may roll it out."""
    shown = obs.status.drift
    return (
        obs.spec.rollout.approve == wanted
        and shown is not None
        and shown.reason == "OnRequest"
        and shown.revision == wanted
    )


def _first(run: _Pass) -> Serving:
    """No kept revision: the desired settings make the first (or nothing serves yet)."""
    gates, desired = run.gates, run.desired
    if desired is None:
        assert gates.source is not None
        run.up_to_date = (None, gates.source[0], gates.source[1])
        return Serving(blocked=gates.source)
    if gates.recipe_pin is not None:
        run.up_to_date = (False, c.REASON_RECIPE_REVISION_PINNED, gates.recipe_pin)
        return Serving(blocked=(c.REASON_RECIPE_REVISION_MISMATCH, gates.recipe_pin))
    _make(run, desired, "Created")
    pin = run.obs.spec.rollout.revision
    if pin is not None:
        message = f"spec.rollout.revision pins {pin}, which is not kept; the first revision serves"
        run.up_to_date = (False, c.REASON_REVISION_NOT_FOUND, message)
    return _serving(run)


def _pinned(run: _Pass, pin: int, wanted: str | None) -> None:
    """``spec.rollout.revision: pin``: serve (a copy of) it; desired changes are drift."""
    newest = run.newest
    assert newest is not None
    target = next((run.usable(r) for r in run.ours if r.number == pin), None)
    refused = None
    if target is not None:
        refused = rollback_refused(pin, target.inputs, run.obs.spec)
        refused = refused or hooktrust.rollback_refused(pin, run.obs, target.inputs)
    message = f"spec.rollout.revision pins {pin}: its settings serve"
    message += "; changes to the spec or its sources are drift until the pin is removed"
    if newest.number == pin or newest.data.rollback_of == pin:
        run.serve = newest
    elif target is None:
        run.serve = newest
        message = (
            f"spec.rollout.revision pins {pin}, which is not kept (pruned, or never made); "
            f"revision {newest.number} keeps serving"
        )
        run.up_to_date = (False, c.REASON_REVISION_NOT_FOUND, message)
        return
    elif refused is not None:
        run.serve = newest
        message = f"{refused}; revision {newest.number} keeps serving"
    else:
        data = target.data.model_copy(
            update={
                "cause": "Rollback",
                "rollback_of": pin,
                "generation": run.obs.generation,
                "changes": _changes_between(newest.data, newest.inputs, target.data.effective, target.inputs),
            }
        )
        run.new = _New(number=_next_number(run), data=data, inputs=target.inputs)
    serving_hash = run.new.data.hash if run.new is not None else newest.data.hash
    if wanted is not None and wanted != serving_hash:
        run.drift = ("RevisionPinned", wanted)
    run.up_to_date = (False, c.REASON_REVISION_PINNED, clip(message))


def _withdraw(run: _Pass) -> None:
    """A kept revision to serve whose recipe hooks may not run now: serve a copy without them."""
    kept = run.serve if run.new is None else None
    why = hooktrust.untrusted(run.obs, kept.inputs) if kept is not None else None
    if kept is None or why is None:
        return
    data, inputs = hooktrust.without_hooks(kept, why, run.obs.generation)
    run.new = _New(number=_next_number(run), data=data, inputs=inputs)
    assert run.up_to_date is not None  # every branch of _decide that serves a kept one sets it
    value, reason, said = run.up_to_date
    run.up_to_date = (value, reason, f"{hooktrust.message(run.new.number, data, kept.number, why)}; {said}")


def _changed(run: _Pass) -> RevisionCause:
    newest = run.newest
    moved = newest is None or newest.data.generation != run.obs.generation
    return "SpecChanged" if moved else "SourceChanged"


def _make(run: _Pass, desired: ServingInputs, cause: RevisionCause) -> None:
    """A new revision from the desired settings."""
    obs = run.obs
    recipe = obs.recipe.spec if obs.spec.recipe is not None and obs.recipe is not None else None
    effective = list(provenance.sourced(workload=obs.spec, recipe=recipe, effective=desired.spec))
    newest = run.newest
    changes = _changes_between(newest.data, newest.inputs, effective, desired) if newest is not None else []
    spec = desired.spec
    data = ServingRevision(
        hash=desired.revision(),
        cause=cause,
        generation=obs.generation,
        inputs=frozen.to_wire(desired),
        effective=effective,
        changes=changes,
        recipe=f"{spec.recipe_name}@{spec.recipe_revision}" if spec.recipe_name else None,
    )
    run.new = _New(number=_next_number(run), data=data, inputs=desired)
    run.up_to_date = (
        True,
        c.REASON_REVISION_CURRENT,
        f"revision {run.new.number} ({data.hash}) is made ({cause})",
    )


def _next_number(run: _Pass) -> int:
    """One above every number seen (any revision labelled with the workload: names never collide),
    and above the number any such revision's name takes (one named ``w-7`` numbered 3)."""
    found = run.obs.revisions or ()
    named = (number_in_name(r.name, run.obs.name) for r in found)
    return max((*(r.number for r in found), *(n for n in named if n is not None)), default=0) + 1


def _serving(run: _Pass) -> Serving:
    if run.new is not None:
        return Serving(inputs=run.new.inputs, revision=run.new.data.hash)
    assert run.serve is not None
    return Serving(inputs=run.serve.inputs, revision=run.serve.data.hash)


# -- provenance -------------------------------------------------------------------------------


def _extras(inputs: ServingInputs) -> list[SourcedValue]:
    """The inputs besides the effective spec as sourced values (compared like effective fields)."""
    wire = frozen.to_wire(inputs)
    return [SourcedValue(field=key, value=wire.get(key), source=source) for key, source in _EXTRAS]


def _changes_between(
    before: ServingRevision,
    before_inputs: ServingInputs,
    after: Sequence[SourcedValue],
    after_inputs: ServingInputs,
) -> list[Change]:
    """What differs from ``before`` to ``after`` (effective fields, then the other inputs)."""
    return provenance.changes([*before.effective, *_extras(before_inputs)], [*after, *_extras(after_inputs)])


# -- actions ----------------------------------------------------------------------------------


def _act(run: _Pass, out: Plan, serving: Serving) -> None:
    """The revision to make, the ones to prune, the annotations to set."""
    obs = run.obs
    if run.new is not None:
        out.revisions.append(
            render_revision(
                namespace=obs.namespace,
                workload=obs.name,
                owner=Owner(name=obs.name, uid=obs.uid),
                number=run.new.number,
                data=run.new.data,
            )
        )
        data = run.new.data
        out.rollback_of = data.rollback_of
        verb = f"a rollback to revision {data.rollback_of}" if data.rollback_of else data.cause
        out.events.append(
            Event(
                type="Normal",
                reason="RevisionCreated",
                message=f"Revision {run.new.number} ({data.hash}) made: {verb}",
            )
        )
    elif run.serve is not None:
        out.rollback_of = run.serve.data.rollback_of
    if obs.spec.rollout.gate is not None:  # old replicas running untrusted hooks: promote at once
        kept = (run.usable(r) for r in run.ours)
        out.hooks_withdrawn = hooktrust.running_untrusted(obs, [k for k in kept if k is not None])
    if run.drift is not None and run.drift[0] == "OnRequest" and obs.spec.rollout.approve == run.drift[1]:
        out.later(APPROVAL_RECHECK_SECONDS)  # shown now: the next pass may honour the approve
    _prune(run, out)
    _annotate(run, out, serving)


def _prune(run: _Pass, out: Plan) -> None:
    """Revisions beyond the limit, oldest first, except the serving, pinned and running ones."""
    obs = run.obs
    ours = sorted(
        (r for r in obs.revisions or () if r.owner == obs.uid and not r.deleting), key=lambda r: r.number
    )
    excess = len(ours) + (1 if run.new is not None else 0) - obs.spec.rollout.revision_history_limit
    if excess <= 0:
        return
    running = {js.revision for js in obs.jobsets if not js.deleting and js.revision}
    keep = {obs.spec.rollout.revision}
    if run.newest is not None:
        keep.add(run.newest.number)
    if run.serve is not None:
        keep.add(run.serve.number)
    for found in ours:
        if excess <= 0:
            break
        if (
            found.number in keep
            or (found.hash in running)
            or (found.data is not None and found.data.hash in running)
        ):
            continue
        out.delete.append(
            Delete(
                kind="ControllerRevision",
                name=found.name,
                uid=found.uid,
                reason=f"beyond revisionHistoryLimit {obs.spec.rollout.revision_history_limit}",
            )
        )
        excess -= 1


def _annotate(run: _Pass, out: Plan, serving: Serving) -> None:
    """``served-from`` on the serving revision once its pods are Ready; ``served-until`` on the
    others that served, once the serving one's pods are Ready or none of theirs runs."""
    obs = run.obs
    if run.serve is None or serving.revision is None:
        return  # a revision being made is annotated once it is seen
    live = [js for js in obs.jobsets if not js.deleting and js.terminal is None]
    ready = any(js.revision == serving.revision and js.leader_ready and not js.suspended for js in live)
    now = stamp(obs.now)
    current = run.serve.found
    if ready and current.served_from is None:
        out.annotate.append(Annotate(name=current.name, annotations={keys.ANNOTATION_SERVED_FROM: now}))
    for found in run.ours:
        if found.number == current.number or found.served_from is None or found.served_until is not None:
            continue
        assert found.data is not None
        if ready or not any(js.revision == found.data.hash for js in live):
            out.annotate.append(Annotate(name=found.name, annotations={keys.ANNOTATION_SERVED_UNTIL: now}))


# -- status -----------------------------------------------------------------------------------


def _report(run: _Pass, cond: Conditions, status: InferenceWorkloadStatus) -> None:
    """``status.history`` / ``effective`` / ``drift`` and ``UpToDate`` / ``SourcesAvailable``."""
    current = _current(run)
    status.history = _history(run, current)
    if current is not None:
        data = current[1]
        status.effective = EffectiveStatus(recipe=data.recipe, sources=provenance.summary(data.effective))
    else:
        status.effective = None
    status.drift = _drift(run, current)
    if run.up_to_date is not None:
        value, reason, message = run.up_to_date
        cond.set(c.UP_TO_DATE, value, reason, clip(message))
    source = run.gates.source
    if source is None:
        cond.set(c.SOURCES_AVAILABLE, True, c.REASON_SOURCES_AVAILABLE, "every source of the settings exists")
    else:
        serves = (
            f"revision {current[0]} ({current[1].hash}) keeps serving"
            if current is not None
            else "no revision to serve yet"
        )
        cond.set(c.SOURCES_AVAILABLE, False, source[0], clip(f"{source[1]}; {serves}"))


def _current(run: _Pass) -> tuple[int, ServingRevision, ServingInputs] | None:
    """The revision that serves after this pass (made now, or kept)."""
    if run.new is not None:
        return run.new.number, run.new.data, run.new.inputs
    if run.serve is not None:
        return run.serve.number, run.serve.data, run.serve.inputs
    newest = run.newest
    return (newest.number, newest.data, newest.inputs) if newest is not None else None


def _history(run: _Pass, current: tuple[int, ServingRevision, ServingInputs] | None) -> HistoryStatus | None:
    if current is None:
        return None
    number, data, _ = current
    name = revision_name(run.obs.name, number)
    previous = run.newest_below(number)
    kept = len({r.number for r in run.ours} | {number})
    return HistoryStatus(
        current=RevisionRef(number=number, hash=data.hash, name=name),
        previous=(
            RevisionRef(number=previous.number, hash=previous.data.hash, name=previous.found.name)
            if previous is not None
            else None
        ),
        kept=kept,
        cause=data.cause,
        rollback_of=data.rollback_of,
        changes=[clip(f"{ch.field} ({ch.source})", 96) for ch in data.changes[:HISTORY_CHANGES_MAX]],
    )


def _drift(run: _Pass, current: tuple[int, ServingRevision, ServingInputs] | None) -> DriftStatus | None:
    """``status.drift``: since when (kept while the same drift stays), and what would change."""
    if run.drift is None or current is None:
        return None
    reason, wanted = run.drift
    previous = run.obs.status.drift
    same = previous is not None and previous.reason == reason and previous.revision == wanted
    since = previous.since if same and previous is not None else run.obs.now
    found: list[Change] = []
    if run.desired is not None:
        obs = run.obs
        recipe = obs.recipe.spec if obs.spec.recipe is not None and obs.recipe is not None else None
        after = provenance.sourced(workload=obs.spec, recipe=recipe, effective=run.desired.spec)
        found = _changes_between(current[1], current[2], after, run.desired)
    return DriftStatus(
        reason=reason,
        revision=wanted,
        since=since,
        changes=found[:DRIFT_CHANGES_MAX],
        more=max(0, len(found) - DRIFT_CHANGES_MAX),
    )


def _day_two_size(status: InferenceWorkloadStatus) -> int:
    parts = {
        key: getattr(status, key).to_wire() if getattr(status, key) is not None else None
        for key in ("history", "effective", "drift", "first_failure", "last_failure")
    }
    return len(json.dumps(parts, separators=(",", ":"), default=str))


def fit_budget(status: InferenceWorkloadStatus) -> None:
    """Keep the day-two status fields within :data:`STATUS_BUDGET_BYTES` together: the drift's
    changes go first (counted in ``more``), then the effective sources, then the history's
    changes (the revision object keeps every one of them)."""
    if status.drift is None and status.first_failure is None and status.last_failure is None:
        return  # history and effective alone stay far below the budget (their bounds)
    while _day_two_size(status) > STATUS_BUDGET_BYTES:
        if status.drift is not None and status.drift.changes:
            status.drift.changes.pop()
            status.drift.more += 1
        elif status.effective is not None and status.effective.sources:
            status.effective.sources.pop()
        elif status.history is not None and status.history.changes:
            status.history.changes.pop()
        else:
            return
