"""``status.model`` of a blocked workload whose JobSets still run, with no ``status.model``
recorded: the state of every recipe-based workload right after an upgrade to the version that
writes it (issue 24). The names are the ones the running engines were started with, read from the
leader's container arguments of the running JobSet (``plan/observe.py`` ``jobset_from``), not a
resolution the engines never ran: a Recipe that moved on past a pinned revision must not make the
gateway route a name the engines answer 404 to, and a Recipe this version no longer resolves (or
one deleted) must not take every name from engines that still serve them.

Every JobSet here is the one the planner renders, observed as the index observes it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus, ServedModel
from sparkrun_operator.plan import observe
from sparkrun_operator.plan.served import EMBEDDING, TEXT_GENERATION
from sparkrun_operator.plan.workload import Observation, ObservedJobSet, ObservedRecipe, plan
from sparkrun_operator.plan.workload.model import EngineStart
from sparkrun_operator.render import keys
from tests.unit.plan.served_obs import NOW, observation

MODEL = "Qwen/Qwen3-0.6B"
RECIPE_WL = InferenceWorkloadSpec.model_validate({"recipe": {"name": "rx"}})


def _recipe(**raw: Any) -> RecipeSpec:
    return RecipeSpec.model_validate({"model": MODEL, "runtime": "vllm", **raw})


SERVED_X = _recipe(defaults={"served_model_name": "served-x"})
RENAMED = _recipe(defaults={"served_model_name": "renamed"})
#: A Recipe this version refuses (a default that refers to itself), which an older one ran.
REFUSED = _recipe(defaults={"served_model_name": "served-x", "a": "x{a}"}, command="vllm serve {model} {a}")


def _obs(spec: InferenceWorkloadSpec = RECIPE_WL, **kwargs: Any) -> Observation:
    return observation(spec, **kwargs)


def _started(
    recipe: RecipeSpec, spec: InferenceWorkloadSpec = RECIPE_WL, *, minutes: int = 10
) -> tuple[ObservedJobSet, str]:
    """The JobSet the planner renders for ``spec`` over ``recipe``, as the index observes it once
    it runs (created ``minutes`` ago), and its revision."""
    p = plan(_obs(spec, recipe=ObservedRecipe(name="rx", spec=recipe)))
    assert p.revision is not None
    doc = next(d for d in p.apply if d["kind"] == "JobSet")
    created = (NOW - dt.timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")
    doc = {**doc, "metadata": {**doc["metadata"], "uid": f"u-{minutes}", "creationTimestamp": created}}
    js = observe.jobset_from(doc)
    assert js is not None
    return js, p.revision


def _upgraded(revision: str) -> InferenceWorkloadStatus:
    """A status an older operator wrote: the revision that runs, no ``status.model``."""
    return InferenceWorkloadStatus(revision=revision)


def _names(p: Any) -> tuple[str, list[str], list[str]] | None:
    model: ServedModel | None = p.status.model
    return None if model is None else (model.served_name, model.aliases, model.capabilities)


def test_a_pinned_workload_whose_recipe_moved_on_keeps_the_name_its_engines_run() -> None:
    running, revision = _started(SERVED_X)
    pinned = InferenceWorkloadSpec.model_validate({"recipe": {"name": "rx", "revision": "0" * 12}})
    p = plan(
        _obs(
            pinned,
            recipe=ObservedRecipe(name="rx", spec=RENAMED),
            status=_upgraded(revision),
            jobsets=(running,),
        )
    )
    assert p.revision is None  # the pin blocks
    assert p.status.model == ServedModel(
        name=MODEL, served_name="served-x", aliases=[], capabilities=[TEXT_GENERATION]
    )


def test_a_recipe_this_version_refuses_or_deleted_keeps_the_names_its_engines_run() -> None:
    running, revision = _started(SERVED_X)
    for recipe in (
        ObservedRecipe(name="rx", spec=REFUSED),
        ObservedRecipe(name="rx", exists=False),
        ObservedRecipe(name="rx", spec=None),  # stored, but it no longer parses
    ):
        p = plan(_obs(recipe=recipe, status=_upgraded(revision), jobsets=(running,)))
        assert p.revision is None
        assert _names(p) == ("served-x", [], [TEXT_GENERATION]), recipe


def test_aliases_come_from_the_spec_and_capabilities_from_the_engines_arguments() -> None:
    embed = _recipe(defaults={"served_model_name": "emb"}, command="vllm serve {model} --task embed")
    spec = InferenceWorkloadSpec.model_validate(
        {"recipe": {"name": "rx"}, "model": {"name": MODEL, "aliases": ["e1", "emb", "e1"]}}
    )
    running, revision = _started(embed, spec)
    gone = ObservedRecipe(name="rx", exists=False)
    p = plan(_obs(spec, recipe=gone, status=_upgraded(revision), jobsets=(running,)))
    assert _names(p) == ("emb", ["e1"], [EMBEDDING])
    # declared capabilities win, as in the rule
    declared = spec.model_copy(
        update={"routing": spec.routing.model_copy(update={"capabilities": [TEXT_GENERATION]})}
    )
    p = plan(_obs(declared, recipe=gone, status=_upgraded(revision), jobsets=(running,)))
    assert _names(p) == ("emb", ["e1"], [TEXT_GENERATION])


def test_the_current_revisions_jobset_names_it_else_the_newest() -> None:
    old, old_revision = _started(SERVED_X, minutes=30)
    new, new_revision = _started(RENAMED, minutes=5)
    gone = ObservedRecipe(name="rx", exists=False)
    for status, expected in (
        (_upgraded(new_revision), "renamed"),
        (_upgraded(old_revision), "served-x"),
        (InferenceWorkloadStatus(), "renamed"),  # no revision recorded: the newest
    ):
        p = plan(_obs(recipe=gone, status=status, jobsets=(old, new)))
        assert _names(p) == (expected, [], [TEXT_GENERATION])
    # a JobSet being deleted serves nothing
    leaving = replace(new, deleting=True)
    p = plan(_obs(recipe=gone, status=_upgraded(new_revision), jobsets=(old, leaving)))
    assert _names(p) == ("served-x", [], [TEXT_GENERATION])


def test_a_recorded_status_model_is_kept_and_nothing_running_is_unchanged() -> None:
    running, revision = _started(SERVED_X)
    recorded = ServedModel(name=MODEL, served_name="recorded", aliases=[], capabilities=[TEXT_GENERATION])
    status = InferenceWorkloadStatus(revision=revision, model=recorded)
    gone = ObservedRecipe(name="rx", exists=False)
    assert plan(_obs(recipe=gone, status=status, jobsets=(running,))).status.model == recorded
    # nothing runs: nothing serves the names
    assert plan(_obs(recipe=gone, status=_upgraded(revision))).status.model is None
    # unblocked: the resolution, whatever runs
    p = plan(
        _obs(recipe=ObservedRecipe(name="rx", spec=RENAMED), status=_upgraded(revision), jobsets=(running,))
    )
    assert _names(p) == ("renamed", [], [TEXT_GENERATION])


def test_a_jobset_without_readable_engine_arguments_leaves_the_resolution() -> None:
    running, revision = _started(SERVED_X)
    pinned = InferenceWorkloadSpec.model_validate({"recipe": {"name": "rx", "revision": "0" * 12}})
    unknown = ObservedJobSet(name=running.name, uid="u", replica=0, revision=revision)
    # names no status can carry (a JobSet someone else wrote): the resolution too
    odd = [
        replace(running, engine=EngineStart(model=model, served_name=name, capabilities=()))
        for model, name in (("m" * 513, "n"), (MODEL, "n" * 257))
    ]
    for jobset in (unknown, *odd):
        recipe = ObservedRecipe(name="rx", spec=RENAMED)
        p = plan(_obs(pinned, recipe=recipe, status=_upgraded(revision), jobsets=(jobset,)))
        assert _names(p) == ("renamed", [], [TEXT_GENERATION])


def test_the_engine_start_is_read_defensively_from_a_jobset() -> None:
    labels = {keys.LABEL_WORKLOAD: "wl-x", keys.LABEL_REVISION: "r"}

    def leader(containers: Any) -> dict[str, Any]:
        pod = {"containers": containers}
        job = {"name": keys.ROLE_LEADER, "template": {"spec": {"template": {"spec": pod}}}}
        return {"metadata": {"name": "js", "labels": labels}, "spec": {"replicatedJobs": [job]}}

    def engine(args: Any) -> dict[str, Any]:
        return leader([{"name": keys.CONTAINER_ENGINE, "args": args}])

    read = observe.jobset_from(engine([MODEL, "--served-model-name", "n", "--runner", "pooling"]))
    assert read is not None
    assert read.engine is not None
    assert (read.engine.model, read.engine.served_name, read.engine.capabilities) == (
        MODEL,
        "n",
        (EMBEDDING,),
    )
    spelled = observe.jobset_from(engine([MODEL, "--served-model-name=n2"]))
    assert spelled is not None
    assert spelled.engine is not None
    assert (spelled.engine.served_name, spelled.engine.capabilities) == ("n2", (TEXT_GENERATION,))
    for bad in (
        {"metadata": {"name": "js", "labels": labels}, "spec": {"replicatedJobs": "x"}},
        leader("x"),
        leader([{"name": "other", "args": [MODEL, "--served-model-name", "n"]}]),
        engine("x"),
        engine([]),
        engine([MODEL]),
        engine([MODEL, "--served-model-name"]),
        engine([MODEL, "--served-model-name", ""]),
        engine(["--served-model-name", "n"]),
        engine([MODEL, "--served-model-name", 7]),
    ):
        found = observe.jobset_from(bad)
        assert found is not None
        assert found.engine is None, bad
