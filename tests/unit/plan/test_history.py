"""Serving revisions (``plan/workload/history.py``, ADR 0046): the newest revision serves.

Table cases for every rule: the first revision (upgrade), Immediate, OnRequest with approve (and
a stale approve), a rollback pin (made, satisfied by a rollback after pruning, missing), the
recipe revision pin as drift, a deleted Recipe and an invalid edit (the newest keeps serving, a
failed JobSet recreated from it), pruning (never the newest, pinned or running ones), revisions
not owned or malformed ignored, served-from/until annotations, the rollout gate's onRollback,
the status budget, and that a pass over an unchanged world is idle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.history import (
    FAILURE_LOG_BYTES,
    FAILURE_LOG_LINE_CHARS,
    FAILURE_LOG_LINES,
    STATUS_BUDGET_BYTES,
    Change,
    DriftStatus,
    EffectiveStatus,
    FieldSource,
    HistoryStatus,
    RevisionRef,
)
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import FailureRecord, InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import (
    FAILED_BACKOFF,
    ObservedJobSet,
    ObservedRecipe,
    Plan,
    plan,
    status_only,
)
from sparkrun_operator.plan.workload.history import fit_budget
from sparkrun_operator.plan.workload.model import ObservedRevision
from sparkrun_operator.plan.workload.revisions import revision_from
from sparkrun_operator.render import keys
from tests.unit.plan.test_workload_plan import NAME, NOW, SERVICE, _js, _leader, _obs, _spec

IMAGE_A = "vllm/vllm-openai:v0.11.0"
IMAGE_B = "vllm/vllm-openai:v0.11.2"


def _image(image: str, **extra: Any) -> InferenceWorkloadSpec:
    return _spec(engine={"image": image}, **extra)


def _seen(p: Plan, *, uid: str = "uid-w", **meta: Any) -> tuple[ObservedRevision, ...]:
    """The revisions ``p`` makes as the watch will show them."""
    out = []
    for doc in p.revisions:
        body = {**doc, "metadata": {**doc["metadata"], "uid": f"uid-{doc['metadata']['name']}", **meta}}
        found = revision_from(body)
        assert found is not None
        assert found.owner == uid
        out.append(found)
    return tuple(out)


def _cond(p: Plan, type_: str) -> tuple[str, str, str]:
    found = find_condition(p.status.conditions, type_)
    assert found is not None, f"no {type_}"
    return found.status, found.reason, found.message


def _world(spec: InferenceWorkloadSpec, **kwargs: Any) -> tuple[Plan, tuple[ObservedRevision, ...], str]:
    """A workload that served ``spec`` as revision 1 (Ready): its plan, revisions, hash."""
    first = plan(_obs(spec, revisions=(), **kwargs))
    revisions = _seen(first)
    assert first.revision is not None
    return first, revisions, first.revision


def _running(revision: str, **kwargs: Any) -> tuple[ObservedJobSet, ...]:
    return (_js(0, revision, **kwargs),)


# -- the first revision -------------------------------------------------------------------------


def test_a_workload_without_revisions_gets_its_first_from_the_desired_settings() -> None:
    # an upgrade: the JobSet runs what the spec says, no revision is kept yet
    desired = plan(_obs(_image(IMAGE_A))).revision
    assert desired is not None
    p = plan(_obs(_image(IMAGE_A), revisions=(), jobsets=_running(desired)))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-1"]
    doc = p.revisions[0]
    assert doc["revision"] == 1
    assert doc["metadata"]["labels"][keys.LABEL_REVISION] == desired
    assert doc["metadata"]["ownerReferences"][0]["uid"] == "uid-w"
    assert doc["data"]["cause"] == "Created"
    assert doc["data"]["hash"] == desired
    assert p.revision == desired
    assert not [d for d in p.apply if d["kind"] == "JobSet"]  # nothing rolls
    assert p.status.history is not None
    assert p.status.history.current is not None
    assert p.status.history.current.number == 1
    assert _cond(p, c.UP_TO_DATE)[:2] == ("True", c.REASON_REVISION_CURRENT)
    assert _cond(p, c.SOURCES_AVAILABLE)[:2] == ("True", c.REASON_SOURCES_AVAILABLE)


def test_an_unchanged_world_is_idle_once_the_revision_is_seen() -> None:
    first, revisions, rev = _world(_image(IMAGE_A))
    ready = _running(rev)
    leader = _leader(ready[0])
    again = plan(
        _obs(_image(IMAGE_A), revisions=revisions, jobsets=ready, pods=(leader,), status=first.status)
    )
    # the pods became Ready: served-from is stamped once
    assert [(a.name, dict(a.annotations)) for a in again.annotate] == [
        (f"{NAME}-1", {keys.ANNOTATION_SERVED_FROM: "2026-09-01T12:00:00Z"})
    ]
    stamped = tuple(dataclasses.replace(r, served_from=NOW) for r in revisions)
    settled = _obs(
        _image(IMAGE_A),
        revisions=stamped,
        jobsets=ready,
        pods=(leader,),
        status=again.status,
        service=SERVICE,
    )
    p = plan(settled)
    assert p.idle
    assert not p.revisions
    assert not p.annotate
    assert status_only(settled) is not None


# -- Immediate and OnRequest --------------------------------------------------------------------


def test_immediate_makes_a_new_revision_and_rolls_it_out() -> None:
    first, revisions, rev_a = _world(_image(IMAGE_A))
    p = plan(
        _obs(_image(IMAGE_B), generation=4, revisions=revisions, jobsets=_running(rev_a), status=first.status)
    )
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-2"]
    data = p.revisions[0]["data"]
    assert data["cause"] == "SpecChanged"
    image = next(ch for ch in data["changes"] if ch["field"] == "engine.image")
    assert image["source"] == "workload"
    assert IMAGE_B in image["after"]
    assert IMAGE_A in image["before"]
    assert p.revision != rev_a
    assert p.revision == data["hash"]
    assert [d["metadata"]["labels"][keys.LABEL_REVISION] for d in p.apply if d["kind"] == "JobSet"] == [
        p.revision
    ]
    assert p.status.history is not None
    assert p.status.history.current is not None
    assert (p.status.history.current.number, p.status.history.previous) == (
        2,
        RevisionRef(number=1, hash=rev_a, name=f"{NAME}-1"),
    )
    assert "engine.image (workload)" in p.status.history.changes


def test_a_source_change_at_the_same_generation_is_source_changed() -> None:
    recipe_a = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_A)))
    recipe_b = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_B)))
    spec = _spec(model=None, recipe={"name": "rx"})
    first, revisions, rev = _world(spec, recipe=recipe_a)
    p = plan(_obs(spec, recipe=recipe_b, revisions=revisions, jobsets=_running(rev), status=first.status))
    assert [d["data"]["cause"] for d in p.revisions] == ["SourceChanged"]
    assert p.status.effective is not None
    assert p.status.effective.recipe is not None
    assert p.status.effective.recipe.startswith("rx@")


def _on_request(image: str, **rollout: Any) -> InferenceWorkloadSpec:
    return _image(image, rollout={"apply": "OnRequest", **rollout})


def test_on_request_records_drift_and_keeps_the_pods() -> None:
    first, revisions, rev_a = _world(_on_request(IMAGE_A))
    running = _running(rev_a)
    p = plan(_obs(_on_request(IMAGE_B), revisions=revisions, jobsets=running, status=first.status))
    assert not p.revisions
    assert p.revision == rev_a
    assert not [d for d in p.apply if d["kind"] == "JobSet"]
    assert not p.delete
    drift = p.status.drift
    assert drift is not None
    assert drift.reason == "OnRequest"
    assert drift.since == NOW
    assert drift.revision is not None
    assert drift.revision != rev_a
    assert [ch.field for ch in drift.changes] == ["engine.image"]
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_DRIFT_PENDING)
    assert drift.revision in message
    # later: the drift keeps its first sighting
    later = _obs(
        _on_request(IMAGE_B),
        revisions=revisions,
        jobsets=running,
        status=p.status,
        now=NOW + dt.timedelta(minutes=5),
    )
    kept = plan(later).status.drift
    assert kept is not None
    assert kept.since == NOW
    # a stale approve applies nothing
    stale = plan(
        _obs(
            _on_request(IMAGE_B, approve="0123456789"), revisions=revisions, jobsets=running, status=p.status
        )
    )
    assert not stale.revisions
    assert stale.status.drift is not None
    # the pending hash applies it
    approved = plan(
        _obs(
            _on_request(IMAGE_B, approve=drift.revision),
            revisions=revisions,
            jobsets=running,
            status=p.status,
        )
    )
    assert [d["data"]["cause"] for d in approved.revisions] == ["DriftApplied"]
    assert approved.revision == drift.revision
    assert approved.status.drift is None
    assert _cond(approved, c.UP_TO_DATE)[:2] == ("True", c.REASON_REVISION_CURRENT)


# -- rollback ---------------------------------------------------------------------------------------


def _two(**rollout: Any) -> tuple[Plan, tuple[ObservedRevision, ...], str, str]:
    """Revision 1 at IMAGE_A, revision 2 at IMAGE_B (serving)."""
    first, one, rev_a = _world(_image(IMAGE_A))
    second = plan(
        _obs(_image(IMAGE_B), generation=4, revisions=one, jobsets=_running(rev_a), status=first.status)
    )
    assert second.revision is not None
    return second, one + _seen(second), rev_a, second.revision


def test_a_rollback_pin_makes_a_new_revision_with_the_old_settings() -> None:
    second, both, rev_a, rev_b = _two()
    pinned = _image(IMAGE_B, rollout={"revision": 1})
    p = plan(_obs(pinned, generation=5, revisions=both, jobsets=_running(rev_b), status=second.status))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-3"]
    data = p.revisions[0]["data"]
    assert (data["cause"], data["rollbackOf"], data["hash"]) == ("Rollback", 1, rev_a)
    assert any(ch["field"] == "engine.image" and IMAGE_A in ch["after"] for ch in data["changes"])
    assert p.revision == rev_a
    jobsets = [d for d in p.apply if d["kind"] == "JobSet"]
    assert [d["metadata"]["labels"][keys.LABEL_REVISION] for d in jobsets] == [rev_a]
    engine = jobsets[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert engine["image"] == IMAGE_A
    assert p.rollback_of == 1
    assert p.status.history is not None
    assert p.status.history.rollback_of == 1
    assert _cond(p, c.UP_TO_DATE)[:2] == ("False", c.REASON_REVISION_PINNED)
    # the spec still says IMAGE_B: that is drift while pinned
    assert p.status.drift is not None
    assert (p.status.drift.reason, p.status.drift.revision) == (
        "RevisionPinned",
        rev_b,
    )
    # once seen, the pin is satisfied by revision 3: nothing more is made
    three = both + _seen(p)
    again = plan(_obs(pinned, generation=5, revisions=three, jobsets=_running(rev_a), status=p.status))
    assert not again.revisions
    assert again.revision == rev_a


def test_a_pin_satisfied_by_a_rollback_survives_the_pruning_of_its_target() -> None:
    second, both, rev_a, rev_b = _two()
    pinned = _image(IMAGE_B, rollout={"revision": 1})
    p = plan(_obs(pinned, revisions=both, jobsets=_running(rev_b), status=second.status))
    pruned = both[1:] + _seen(p)  # revision 1 is gone
    again = plan(_obs(pinned, revisions=pruned, jobsets=_running(rev_a), status=p.status))
    assert not again.revisions
    assert again.revision == rev_a
    assert _cond(again, c.UP_TO_DATE)[1] == c.REASON_REVISION_PINNED


def test_a_pin_to_a_revision_not_kept_leaves_the_newest_serving() -> None:
    _second, both, _, rev_b = _two()
    p = plan(_obs(_image(IMAGE_B, rollout={"revision": 7}), revisions=both, jobsets=_running(rev_b)))
    assert not p.revisions
    assert p.revision == rev_b
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_REVISION_NOT_FOUND)
    assert "7" in message


# -- sources ------------------------------------------------------------------------------------------


def _recipe(image: str, revision_marker: str = "") -> dict[str, Any]:
    return {
        "model": "Qwen/Qwen3-8B",
        "runtime": "vllm",
        "container": image,
        "defaults": {"served_model_name": "qwen3-8b" + revision_marker},
    }


def test_a_recipe_revision_pin_the_recipe_moved_past_is_drift() -> None:
    recipe_a = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_A)))
    first, revisions, rev = _world(_spec(model=None, recipe={"name": "rx"}), recipe=recipe_a)
    assert first.status.recipe_revision is not None
    pinned = _spec(model=None, recipe={"name": "rx", "revision": first.status.recipe_revision})
    moved = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_B)))
    running = _running(rev)
    p = plan(_obs(pinned, recipe=moved, revisions=revisions, jobsets=running, pods=(_leader(running[0]),)))
    assert not p.revisions
    assert p.revision == rev
    assert not [d for d in p.apply if d["kind"] == "JobSet"]
    assert p.status.drift is not None
    assert p.status.drift.reason == "RecipeRevisionPinned"
    assert _cond(p, c.UP_TO_DATE)[:2] == ("False", c.REASON_RECIPE_REVISION_PINNED)
    assert _cond(p, c.RECIPE_RESOLVED)[:2] == ("False", c.REASON_RECIPE_REVISION_MISMATCH)
    assert _cond(p, c.READY)[0] == "True"


def test_a_recipe_revision_pin_without_any_revision_still_blocks() -> None:
    recipe_a = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_A)))
    pinned = _spec(model=None, recipe={"name": "rx", "revision": "0" * 12})
    p = plan(_obs(pinned, recipe=recipe_a, revisions=()))
    assert not p.revisions
    assert p.revision is None
    assert not p.apply[1:]
    assert _cond(p, c.READY)[1] == c.REASON_RECIPE_REVISION_MISMATCH


def test_a_deleted_recipe_keeps_the_newest_revision_serving_and_recreates_failed_jobsets() -> None:
    recipe_a = ObservedRecipe(name="rx", spec=RecipeSpec.model_validate(_recipe(IMAGE_A)))
    spec = _spec(model=None, recipe={"name": "rx"})
    first, revisions, rev = _world(spec, recipe=recipe_a)
    gone = ObservedRecipe(name="rx", exists=False)
    failed = _js(0, rev, ready=False, terminal="Failed", terminal_time=NOW - 2 * FAILED_BACKOFF)
    p = plan(_obs(spec, recipe=gone, revisions=revisions, jobsets=(failed,), status=first.status))
    assert p.revision == rev
    assert [d.name for d in p.delete] == [failed.name]
    status, reason, message = _cond(p, c.SOURCES_AVAILABLE)
    assert (status, reason) == ("False", c.REASON_RECIPE_NOT_FOUND)
    assert f"revision 1 ({rev}) keeps serving" in message
    # the failed group is gone: a new one is made from the revision, not the (missing) recipe
    again = plan(_obs(spec, recipe=gone, revisions=revisions, status=p.status))
    made = [d for d in again.apply if d["kind"] == "JobSet"]
    assert [d["metadata"]["labels"][keys.LABEL_REVISION] for d in made] == [rev]
    assert again.status.model == first.status.model
    # Ready stays while the group runs
    ok = _running(rev)
    serving = plan(_obs(spec, recipe=gone, revisions=revisions, jobsets=ok, pods=(_leader(ok[0]),)))
    assert _cond(serving, c.READY)[0] == "True"
    assert not serving.delete


def test_an_invalid_edit_keeps_the_newest_revision_serving() -> None:
    first, revisions, rev = _world(_image(IMAGE_A))
    bad = _image(IMAGE_B, state="Sleeping")  # Sleeping needs engine.enableSleepMode
    p = plan(_obs(bad, revisions=revisions, jobsets=_running(rev), status=first.status))
    assert not p.revisions
    assert p.revision == rev
    assert not p.delete
    assert _cond(p, c.SOURCES_AVAILABLE)[:2] == ("False", c.REASON_INVALID_SPEC)
    assert _cond(p, c.UP_TO_DATE)[0] == "Unknown"


def test_a_cache_that_is_not_ready_still_blocks_new_pods() -> None:
    first, revisions, _rev = _world(_image(IMAGE_A))
    cached = _image(IMAGE_A, model={"name": "Qwen/Qwen3-0.6B", "cacheRef": {"name": "c"}})
    p = plan(_obs(cached, revisions=revisions, status=first.status))
    assert not [d for d in p.apply if d["kind"] == "JobSet"]
    assert p.revision is None


# -- revisions that are not ours ---------------------------------------------------------------------


def test_revisions_not_owned_or_malformed_are_ignored_and_never_collide() -> None:
    first, revisions, rev = _world(_image(IMAGE_A))
    stranger = dataclasses.replace(revisions[0], name=f"{NAME}-5", uid="u5", number=5, owner="someone-else")
    broken = ObservedRevision(name=f"{NAME}-6", uid="u6", number=6, data=None, owner="uid-w")
    p = plan(
        _obs(
            _image(IMAGE_B),
            revisions=(*revisions, stranger, broken),
            jobsets=_running(rev),
            status=first.status,
        )
    )
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-7"]
    assert p.status.history is not None
    assert p.status.history.previous is not None
    assert p.status.history.previous.number == 1


# -- pruning -----------------------------------------------------------------------------------------------


def test_pruning_removes_the_oldest_but_never_the_newest_pinned_or_running() -> None:
    spec = _image(IMAGE_A)
    p0, revisions, _ = _world(spec)
    images = [f"vllm/vllm-openai:v0.{n}" for n in range(2, 7)]
    status = p0.status
    for image in images:  # revisions 2..6
        p = plan(_obs(_image(image), revisions=revisions, status=status))
        revisions += _seen(p)
        status = p.status
    assert [r.number for r in revisions] == [1, 2, 3, 4, 5, 6]
    hashes = {r.number: r.hash for r in revisions}
    assert all(hashes.values())
    # limit 2, pinned to 2 (served by a rollback 6? no: a new rollback 7), revision 1 still runs
    pinned = _image(images[-1], rollout={"revision": 2, "revisionHistoryLimit": 2})
    running = _running(str(hashes[1]))
    p = plan(_obs(pinned, revisions=revisions, jobsets=running, status=status))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-7"]
    deleted = [(d.kind, d.name) for d in p.delete if d.kind == "ControllerRevision"]
    assert deleted == [
        ("ControllerRevision", f"{NAME}-3"),
        ("ControllerRevision", f"{NAME}-4"),
        (
            "ControllerRevision",
            f"{NAME}-5",
        ),
    ]
    assert all(d.uid == f"uid-{d.name}" for d in p.delete if d.kind == "ControllerRevision")


# -- annotations -----------------------------------------------------------------------------------------


def test_served_until_is_stamped_once_the_next_revision_serves() -> None:
    _second, both, _rev_a, rev_b = _two()
    stamped = (dataclasses.replace(both[0], served_from=NOW - dt.timedelta(hours=1)), both[1])
    ready = _running(rev_b)
    p = plan(_obs(_image(IMAGE_B), revisions=stamped, jobsets=ready, pods=(_leader(ready[0]),)))
    assert sorted((a.name, tuple(a.annotations)) for a in p.annotate) == [
        (f"{NAME}-1", (keys.ANNOTATION_SERVED_UNTIL,)),
        (f"{NAME}-2", (keys.ANNOTATION_SERVED_FROM,)),
    ]


# -- the rollout gate --------------------------------------------------------------------------------------

GATE: dict[str, Any] = {
    "benchmark": {"scenarios": [{"name": "single", "requests": 2}]},
    "thresholds": [{"metric": "ttftP99", "max": 100}],
}


def _gate_rollback(on_rollback: str) -> Plan:
    second, both, rev_a, rev_b = _two()
    spec = _image(
        IMAGE_B,
        replicas=1,
        rollout={"maxSurge": 1, "revision": 1, "gate": {**GATE, "onRollback": on_rollback}},
    )
    made = plan(_obs(spec, revisions=both, jobsets=_running(rev_b), status=second.status))
    three = both + _seen(made)
    old, new = _js(0, rev_b), _js(0, rev_a)
    new = dataclasses.replace(new, name=new.name + "-n")
    return plan(_obs(spec, revisions=three, jobsets=(old, new), pods=(_leader(new, ip="10.0.0.9"),)))


def test_a_rollback_is_gated_unless_on_rollback_skip() -> None:
    gated = _gate_rollback("Gate")
    assert [d["kind"] for d in gated.apply if d["kind"] == "InferenceBenchmark"] == ["InferenceBenchmark"]
    assert not [d for d in gated.delete if d.kind == "JobSet"]
    skipped = _gate_rollback("Skip")
    assert not [d for d in skipped.apply if d["kind"] == "InferenceBenchmark"]
    assert [d.kind for d in skipped.delete] == ["JobSet"]  # the old revision's replica goes


# -- the status budget -------------------------------------------------------------------------------------


def test_the_largest_day_two_status_fits_the_budget() -> None:
    longest = "x" * 400
    change = Change(
        field="f" * 64, source="recipeDefaults", detail="d" * 128, before="b" * 160, after="a" * 160
    )
    failure = FailureRecord(
        reason="Error",
        message=longest,
        time=NOW,
        object="pod/" + "p" * 250,
        exit_code=137,
        replica=99,
        rank=15,
        role="worker",
        revision="0123456789",
        log=["l" * (FAILURE_LOG_BYTES // FAILURE_LOG_LINES)] * FAILURE_LOG_LINES,
    )
    assert len("".join(failure.log)) <= FAILURE_LOG_BYTES
    assert len(failure.log[0]) <= FAILURE_LOG_LINE_CHARS
    ref = RevisionRef(number=100, hash="0123456789", name="n" * 253)
    status = InferenceWorkloadStatus(
        history=HistoryStatus(
            current=ref, previous=ref, kept=100, cause="Rollback", rollback_of=99, changes=["c" * 96] * 8
        ),
        effective=EffectiveStatus(
            recipe="r" * 320,
            sources=[FieldSource(field="f" * 64, source="recipeDefaults", detail="d" * 128)] * 16,
        ),
        drift=DriftStatus(
            reason="RecipeRevisionPinned", revision="0123456789", since=NOW, changes=[change] * 8
        ),
        first_failure=failure,
        last_failure=failure,
    )
    # history and effective at their largest fit without trimming (fit_budget skips the count)
    alone = {
        "history": status.history.to_wire() if status.history else None,
        "effective": status.effective.to_wire() if status.effective else None,
    }
    assert len(json.dumps(alone, separators=(",", ":"))) < STATUS_BUDGET_BYTES
    fit_budget(status)
    parts = {
        key: getattr(status, key).to_wire()
        for key in ("history", "effective", "drift", "first_failure", "last_failure")
    }
    assert len(json.dumps(parts, separators=(",", ":"))) <= STATUS_BUDGET_BYTES
    assert status.drift is not None
    assert status.drift.more > 0


# -- reading a ControllerRevision -------------------------------------------------------------------------


def test_a_controller_revision_is_read_defensively() -> None:
    first = plan(_obs(_image(IMAGE_A), revisions=()))
    doc = first.revisions[0]
    good = {
        **doc,
        "metadata": {**doc["metadata"], "uid": "u1", "annotations": {keys.ANNOTATION_SERVED_FROM: "bad"}},
    }
    found = revision_from(good)
    assert found is not None
    assert (found.number, found.owner, found.served_from) == (1, "uid-w", None)
    assert found.data is not None
    # not a revision at all
    assert revision_from({"metadata": "x"}) is None
    assert revision_from({**good, "revision": "1"}) is None
    assert revision_from({**good, "revision": 0}) is None
    assert revision_from({**good, "revision": True}) is None
    # a revision whose data, owner or annotations are not what the operator writes
    odd = revision_from(
        {
            **good,
            "data": {"kind": "Something"},
            "metadata": {
                **good["metadata"],
                "ownerReferences": "me",
                "annotations": ["x"],
                "labels": {"a": 1},
            },
        }
    )
    assert odd is not None
    assert (odd.data, odd.owner, odd.served_from, odd.hash) == (None, None, None, None)
    # data that validates but whose frozen inputs do not read back is never served
    broken = {**good, "data": {**good["data"], "inputs": {"version": 1, "spec": {"model": ""}}}}
    bad_inputs = revision_from(broken)
    assert bad_inputs is not None
    assert bad_inputs.data is not None
    p = plan(_obs(_image(IMAGE_A), revisions=(bad_inputs,)))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-2"]


def test_the_served_from_mark_does_not_hold_the_readiness_write_back() -> None:
    """The mark falls due in the pass that sees a replica turn Ready: it must not make that pass
    look busy (the status lane leaves a busy pass's status to the full lane, ADR 0030: readiness
    waited behind full passes, p99 59 s in bench.scale at 1,000 workloads), nor report progress."""
    first, revisions, rev = _world(_image(IMAGE_A))
    ready = _running(rev)
    obs = _obs(
        _image(IMAGE_A),
        revisions=revisions,
        jobsets=ready,
        pods=(_leader(ready[0]),),
        status=first.status,
        service=SERVICE,
    )
    p = plan(obs)
    assert [a.name for a in p.annotate] == [f"{NAME}-1"]
    assert p.idle
    written = status_only(obs)
    assert written is not None
    assert written.ready_replicas == 1
    progressing = find_condition(written.conditions, c.PROGRESSING)
    assert progressing is not None
    assert progressing.status == "False"


def test_a_rollback_serves_and_routes_the_names_of_the_revision_it_copies() -> None:
    """The gateway, the daemon API and kubectl read names from status.model: after a rollback to a
    revision served under another name, they must see the name its engine answers to again (a
    workload, model and served name that all differ)."""

    def named(served: str, **extra: Any) -> InferenceWorkloadSpec:
        return _spec(model={"name": "org/Some-Model-7B", "servedName": served}, **extra)

    first, one, rev_a = _world(named("team-chat"))
    assert first.status.model is not None
    assert first.status.model.served_name == "team-chat"
    second = plan(
        _obs(named("team-chat-v2"), generation=4, revisions=one, jobsets=_running(rev_a), status=first.status)
    )
    assert second.status.model is not None
    assert second.status.model.served_name == "team-chat-v2"
    assert second.revision is not None
    both = one + _seen(second)
    pinned = named("team-chat-v2", rollout={"revision": 1})
    p = plan(
        _obs(pinned, generation=5, revisions=both, jobsets=_running(second.revision), status=second.status)
    )
    assert p.revision == rev_a
    assert p.status.model is not None
    assert p.status.model.served_name == "team-chat"
    jobsets = [d for d in p.apply if d["kind"] == "JobSet"]
    args = jobsets[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "team-chat" in args
    assert "team-chat-v2" not in args
