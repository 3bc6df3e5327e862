"""Recipe hooks a serving revision froze stop once they may no longer run (``hooktrust.py``).

Losing trust (the registry untrusted, the Recipe deleted or invalid, the workload naming another
Recipe) is a security event, not drift: under ``rollout.apply: OnRequest``, a recipe pin and a
rollback pin alike, a copy of the serving revision without its hooks and mods is made (cause
``TrustWithdrawn``), a rollback pin never brings them back while untrusted (and does once trusted
again), and a rollout gate never holds the old hooked replicas serving.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import ObservedJobSet, ObservedPod, ObservedRecipe, Plan, plan
from sparkrun_operator.plan.workload.hooksource import HookSource
from sparkrun_operator.plan.workload.model import ObservedGate, ObservedRevision
from sparkrun_operator.render import gate as render_gate
from tests.unit.plan.test_history import _seen
from tests.unit.plan.test_hooks_plan import NOW, RECIPE, TRUSTED, UNTRUSTED, _obs

PRE = "/tmp/pre"  # what RECIPE's pre_exec writes


def _spec(recipe: dict[str, Any] | None = None, **rollout: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate({"recipe": recipe or {"name": "r"}, "rollout": rollout})


def _running(revision: str, replica: int = 0, *, suffix: str = "") -> ObservedJobSet:
    return ObservedJobSet(
        name=f"qwen-{replica}-{revision[:5]}{suffix}",
        uid=f"uid-{revision}{suffix}",
        replica=replica,
        revision=revision,
        leader_ready=True,
    )


def _leader(js: ObservedJobSet) -> ObservedPod:
    return ObservedPod(
        name=f"{js.name}-leader",
        jobset=js.name,
        role="leader",
        replica=js.replica,
        revision=js.revision,
        phase="Running",
        ready=True,
        ip="10.0.0.9",
        node="n",
        ready_time=NOW,
    )


def _script(p: Plan) -> str:
    """The engine container's command of the JobSet ``p`` makes (exactly one)."""
    (js,) = [d for d in p.apply if d["kind"] == "JobSet"]
    engine = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return " ".join([*engine.get("command", []), *engine.get("args", [])])


def _cond(p: Plan, type_: str) -> tuple[str, str, str]:
    found = find_condition(p.status.conditions, type_)
    assert found is not None, f"no {type_}"
    return found.status, found.reason, found.message


def _trusted_world(
    spec: InferenceWorkloadSpec, **kwargs: Any
) -> tuple[Plan, tuple[ObservedRevision, ...], str]:
    """Revision 1 made while trusted, its hooks frozen in it."""
    first = plan(_obs(TRUSTED, spec=spec, revisions=(), **kwargs))
    assert first.revision is not None
    assert PRE in _script(first)
    return first, _seen(first), first.revision


def _withdrawn(p: Plan, serving: str) -> dict[str, Any]:
    """``p`` makes a copy of ``serving`` without hooks (revision 2) and rolls to it."""
    (doc,) = p.revisions
    data: dict[str, Any] = doc["data"]
    assert doc["metadata"]["name"] == "qwen-2"
    assert data["cause"] == "TrustWithdrawn"
    assert data.get("rollbackOf") is None
    assert "hooks" not in data["inputs"]
    assert [ch["field"] for ch in data["changes"]] == ["hooks"]
    assert p.revision == data["hash"] != serving
    assert PRE not in _script(p)  # the replacement pod runs the plain engine command
    assert [e.reason for e in p.events if e.reason == "RevisionCreated"] == ["RevisionCreated"]
    return data


def test_on_request_does_not_keep_untrusted_hooks_serving() -> None:
    spec = _spec(apply="OnRequest")
    first, revisions, rev1 = _trusted_world(spec)
    running = (_running(rev1),)
    p = plan(_obs(UNTRUSTED, spec=spec, revisions=revisions, jobsets=running, status=first.status))
    data = _withdrawn(p, rev1)
    # the copy is what an untrusted recipe resolves to: nothing is left to approve
    assert data["hash"] == plan(_obs(UNTRUSTED, spec=spec)).revision
    message = _cond(p, c.UP_TO_DATE)[2]
    assert "copies revision 1 without its recipe hooks and mods" in message
    assert "RecipeRegistry reg is not trusted" in message
    assert p.status.history is not None
    assert p.status.history.cause == "TrustWithdrawn"
    # the next pass sees revision 2: it is current, nothing more is made, no drift
    again = plan(
        _obs(
            UNTRUSTED,
            spec=spec,
            revisions=revisions + _seen(p),
            jobsets=(_running(data["hash"]),),
            status=p.status,
        )
    )
    assert not again.revisions
    assert again.status.drift is None
    assert _cond(again, c.UP_TO_DATE)[:2] == ("True", c.REASON_REVISION_CURRENT)


def test_on_request_with_other_drift_still_strips_the_hooks_and_keeps_the_drift() -> None:
    spec = _spec(apply="OnRequest")
    first, revisions, rev1 = _trusted_world(spec)
    edited = dataclasses.replace(TRUSTED, trust=UNTRUSTED.trust)
    moved = InferenceWorkloadSpec.model_validate(
        {
            "recipe": {"name": "r"},
            "rollout": {"apply": "OnRequest"},
            "engine": {"image": "vllm/vllm-openai:v0.11.2"},
        }
    )
    p = plan(
        _obs(
            edited,
            spec=moved,
            generation=2,
            revisions=revisions,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    data = _withdrawn(p, rev1)
    (js,) = [d for d in p.apply if d["kind"] == "JobSet"]
    engine = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert engine["image"] != "vllm/vllm-openai:v0.11.2"  # the settings stay the approved ones
    assert p.status.drift is not None
    assert p.status.drift.reason == "OnRequest"
    assert p.status.drift.revision != data["hash"]
    assert _cond(p, c.UP_TO_DATE)[:2] == ("False", c.REASON_DRIFT_PENDING)


def test_trusted_hooks_that_changed_stay_pending_drift() -> None:
    spec = _spec(apply="OnRequest")
    first, revisions, rev1 = _trusted_world(spec)
    newer = ObservedRecipe(name="r", spec=RECIPE.model_copy(update={"pre_exec": ["echo new > /tmp/pre2"]}))
    p = plan(
        _obs(
            TRUSTED,
            spec=spec,
            recipe=newer,
            revisions=revisions,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    assert not p.revisions
    assert p.revision == rev1
    assert _cond(p, c.UP_TO_DATE)[:2] == ("False", c.REASON_DRIFT_PENDING)


def test_a_deleted_or_invalid_recipe_stops_its_hooks() -> None:
    spec = _spec(apply="OnRequest")
    first, revisions, rev1 = _trusted_world(spec)
    for recipe, why in (
        (ObservedRecipe(name="r", exists=False), "Recipe r is deleted"),
        (ObservedRecipe(name="r", spec=None), "Recipe r is invalid"),
    ):
        p = plan(
            _obs(
                None,
                spec=spec,
                recipe=recipe,
                revisions=revisions,
                jobsets=(_running(rev1),),
                status=first.status,
            )
        )
        _withdrawn(p, rev1)
        assert why in _cond(p, c.UP_TO_DATE)[2]
        assert _cond(p, c.SOURCES_AVAILABLE)[0] == "False"
        assert "revision 2" in _cond(p, c.SOURCES_AVAILABLE)[2]


def test_naming_another_trusted_recipe_stops_the_old_ones_hooks() -> None:
    spec = _spec(apply="OnRequest")
    first, revisions, rev1 = _trusted_world(spec)
    other = _spec({"name": "other"}, apply="OnRequest")
    recipe = ObservedRecipe(name="other", spec=RECIPE)
    p = plan(
        _obs(
            TRUSTED,
            spec=other,
            recipe=recipe,
            generation=2,
            revisions=revisions,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    _withdrawn(p, rev1)
    assert "no longer names Recipe r" in _cond(p, c.UP_TO_DATE)[2]
    assert p.status.drift is not None  # the other Recipe (with its own hooks) waits for approval


def test_a_recipe_pin_does_not_keep_untrusted_hooks_serving() -> None:
    first, revisions, rev1 = _trusted_world(_spec())
    pinned = _spec({"name": "r", "revision": first.status.recipe_revision})
    moved = ObservedRecipe(name="r", spec=RECIPE.model_copy(update={"model": "Qwen/Qwen3-8B"}))
    p = plan(
        _obs(
            UNTRUSTED,
            spec=pinned,
            recipe=moved,
            revisions=revisions,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    data = _withdrawn(p, rev1)
    assert "Qwen3-8B" not in _script(p)
    assert p.status.drift is not None
    assert (p.status.drift.reason, _cond(p, c.UP_TO_DATE)[1]) == (
        "RecipeRevisionPinned",
        c.REASON_RECIPE_REVISION_PINNED,
    )
    assert data["recipe"] == first.revisions[0]["data"]["recipe"]  # the pinned recipe revision's


def _pinned_world() -> tuple[Plan, tuple[ObservedRevision, ...], str, str]:
    """Revision 1 (trusted, hooks), revision 2 (made while untrusted, no hooks) serving."""
    first, one, rev1 = _trusted_world(_spec())
    second = plan(
        _obs(
            UNTRUSTED,
            spec=_spec(),
            revisions=one,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    assert second.revision is not None
    assert second.revision != rev1
    assert [d["data"]["cause"] for d in second.revisions] == ["SourceChanged"]
    return second, one + _seen(second), rev1, second.revision


def test_a_rollback_pin_never_brings_untrusted_hooks_back() -> None:
    second, both, rev1, rev2 = _pinned_world()
    pinned = _spec(revision=1)
    p = plan(
        _obs(
            UNTRUSTED,
            spec=pinned,
            generation=3,
            revisions=both,
            jobsets=(_running(rev2),),
            status=second.status,
        )
    )
    assert not p.revisions
    assert p.revision == rev2
    assert not [d for d in p.apply if d["kind"] == "JobSet"]
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_REVISION_PINNED)
    assert "spec.rollout.revision pins 1, whose engine pods ran the recipe's hooks and mods" in message
    assert "revision 2 keeps serving" in message
    # trusted again: the pin makes the rollback, hooks and all
    back = plan(
        _obs(TRUSTED, spec=pinned, generation=3, revisions=both, jobsets=(_running(rev2),), status=p.status)
    )
    assert [(d["data"]["cause"], d["data"].get("rollbackOf")) for d in back.revisions] == [("Rollback", 1)]
    assert back.revision == rev1
    assert PRE in _script(back)


def test_a_satisfied_rollback_pin_loses_its_hooks_with_the_trust() -> None:
    second, both, rev1, rev2 = _pinned_world()
    pinned = _spec(revision=1)
    back = plan(
        _obs(
            TRUSTED,
            spec=pinned,
            generation=3,
            revisions=both,
            jobsets=(_running(rev2),),
            status=second.status,
        )
    )
    three = both + _seen(back)
    assert three[-1].data is not None
    assert three[-1].data.rollback_of == 1
    p = plan(
        _obs(
            UNTRUSTED,
            spec=pinned,
            generation=3,
            revisions=three,
            jobsets=(_running(rev1),),
            status=back.status,
        )
    )
    (doc,) = p.revisions
    assert doc["metadata"]["name"] == "qwen-4"
    assert doc["data"]["cause"] == "TrustWithdrawn"
    assert p.revision == rev2  # revision 1's settings without hooks: what revision 2 is
    assert PRE not in _script(p)
    # seen: the pin is refused (its target has hooks), revision 4 keeps serving, nothing more is made
    four = three + _seen(p)
    again = plan(
        _obs(UNTRUSTED, spec=pinned, generation=3, revisions=four, jobsets=(_running(rev2),), status=p.status)
    )
    assert not again.revisions
    assert again.revision == rev2
    assert "whose engine pods ran the recipe's hooks" in _cond(again, c.UP_TO_DATE)[2]


def test_the_rollout_gate_never_holds_untrusted_hooks_serving() -> None:
    gate = {
        "benchmark": {"scenarios": [{"name": "single", "requests": 2}]},
        "thresholds": [{"metric": "ttftP99", "max": 100}],
    }
    spec = InferenceWorkloadSpec.model_validate(
        {
            "recipe": {"name": "r"},
            "replicas": 1,
            "rollout": {"apply": "OnRequest", "maxSurge": 1, "gate": gate},
        }
    )
    first, revisions, rev1 = _trusted_world(spec)
    made = plan(
        _obs(UNTRUSTED, spec=spec, revisions=revisions, jobsets=(_running(rev1),), status=first.status)
    )
    rev2 = made.revision
    assert rev2 is not None
    two = revisions + _seen(made)
    old, new = _running(rev1), _running(rev2, suffix="-n")
    assert spec.rollout.gate is not None
    template = render_gate.template_hash(spec.rollout.gate.benchmark)
    name = render_gate.gate_name(workload="qwen", revision=rev2, template=template)
    failed = ObservedGate(
        name=name, uid="uid-g", revision=rev2, template=template, phase="Failed", failure=("Error", "boom")
    )
    world: dict[str, Any] = {"spec": spec, "revisions": two, "jobsets": (old, new), "pods": (_leader(new),)}
    p = plan(_obs(UNTRUSTED, gates=(failed,), status=made.status, **world))
    assert not [d for d in p.apply if d["kind"] == "InferenceBenchmark"]
    assert [(d.kind, d.name) for d in p.delete if d.kind == "JobSet"] == [("JobSet", old.name)]
    assert (
        find_condition(p.status.conditions, "Promoted") is None
        or _cond(p, "Promoted")[1] != "BenchmarkFailed"
    )
    # the same world with the recipe still trusted (an ordinary rollout) is held by the failed benchmark
    ordinary = plan(_obs(TRUSTED, gates=(failed,), status=made.status, **world))
    assert _cond(ordinary, "Promoted")[:2] == ("False", c.REASON_BENCHMARK_FAILED)
    assert not [d for d in ordinary.delete if d.kind == "JobSet" and d.name == old.name]


def test_hooks_source_without_mods_is_still_trusted() -> None:
    # a trusted recipe whose mod is missing keeps its hooks: trust, not mods, decides
    source = HookSource(trust=TRUSTED.trust)
    first, revisions, rev1 = _trusted_world(_spec(apply="OnRequest"))
    p = plan(
        _obs(
            source,
            spec=_spec(apply="OnRequest"),
            revisions=revisions,
            jobsets=(_running(rev1),),
            status=first.status,
        )
    )
    assert not [d for d in p.revisions if d["data"]["cause"] == "TrustWithdrawn"]
    assert p.revision == rev1
