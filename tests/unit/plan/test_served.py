"""The one naming rule (``plan/served.py``, issue 24), the claims of the names index built on it
(``plan/names.py`` ``claim_of``), and ``status.model`` as the workload planner writes it: every
branch of the rule, capabilities from the recipe's arguments, alias de-duplication, a recipe
served under its own name, a template that hard-codes ``--served-model-name``, and the bound on
a recipe's served name."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus, ServedModel
from sparkrun_operator.gateway.kube import build_entries
from sparkrun_operator.gateway.routing import RoutingTable
from sparkrun_operator.plan import names, served
from sparkrun_operator.plan.served import EMBEDDING, TEXT_GENERATION, Served
from sparkrun_operator.plan.workload import Observation, ObservedJobSet, ObservedRecipe, plan
from sparkrun_operator.recipe.resolve import resolve, validate_recipe
from tests.unit.plan.served_obs import observation

MODEL = "Qwen/Qwen3-0.6B"


def _spec(**raw: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(raw)


def _recipe(**raw: Any) -> RecipeSpec:
    return RecipeSpec.model_validate({"model": MODEL, "runtime": "vllm", **raw})


def _served(raw: dict[str, Any], recipe: RecipeSpec | None = None) -> Served:
    resolution = resolve(workload=_spec(**raw), recipe=recipe)
    assert resolution.spec is not None, resolution.errors
    return served.served(raw, resolution.spec)


# -- the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "recipe", "model", "name"),
    [
        # without a recipe: servedName, else the model
        ({"model": {"name": MODEL, "servedName": "tiny"}}, None, MODEL, "tiny"),
        ({"model": {"name": MODEL}}, None, MODEL, MODEL),
        # a recipe served under its own name (issue 24's scenario: not the workload's name)
        ({"recipe": {"name": "rx"}}, _recipe(defaults={"served_model_name": "served-x"}), MODEL, "served-x"),
        # a recipe without one: its model
        ({"recipe": {"name": "rx"}}, _recipe(), MODEL, MODEL),
        # the workload's servedName beats the recipe's
        (
            {"recipe": {"name": "rx"}, "model": {"name": MODEL, "servedName": "mine"}},
            _recipe(defaults={"served_model_name": "served-x"}),
            MODEL,
            "mine",
        ),
        # the workload's model replaces the recipe's; the recipe's served name still applies
        (
            {"recipe": {"name": "rx"}, "model": {"name": "org/other"}},
            _recipe(defaults={"served_model_name": "served-x"}),
            "org/other",
            "served-x",
        ),
        ({"recipe": {"name": "rx"}, "model": {"name": "org/other"}}, _recipe(), "org/other", "org/other"),
    ],
)
def test_the_served_name_is_the_engines(
    raw: dict[str, Any], recipe: RecipeSpec | None, model: str, name: str
) -> None:
    got = _served(raw, recipe)
    assert (got.model, got.served_name) == (model, name)
    assert got.names[0] == name
    assert served.to_status(got) == {
        "name": model,
        "servedName": name,
        "aliases": [],
        "capabilities": [TEXT_GENERATION],
    }


def test_aliases_drop_the_served_name_and_repeats() -> None:
    raw = {"model": {"name": MODEL, "servedName": "tiny", "aliases": ["a", "tiny", "b", "a"]}}
    got = _served(raw)
    assert got.aliases == ("a", "b")
    assert got.names == ("tiny", "a", "b")
    recorded = {
        "spec": {"recipe": {"name": "rx"}},
        "status": {"model": {"name": MODEL, "servedName": "tiny", "aliases": ["tiny", "a", "a", ""]}},
    }
    found = served.of_workload(recorded)
    assert found is not None
    assert found.aliases == ("a",)


@pytest.mark.parametrize(
    ("recipe", "args", "declared", "expected"),
    [
        (_recipe(command="vllm serve {model} --task embed"), [], [], (EMBEDDING,)),
        (_recipe(command="vllm serve {model} --task=embedding"), [], [], (EMBEDDING,)),
        (_recipe(command="vllm serve {model} --runner pooling --port {port}"), [], [], (EMBEDDING,)),
        (_recipe(command="vllm serve {model} --task generate"), [], [], (TEXT_GENERATION,)),
        (_recipe(), ["--task", "embed"], [], (EMBEDDING,)),  # the workload's own arguments
        (_recipe(), ["--convert", "embed"], [], (EMBEDDING,)),
        (_recipe(), ["--runner=pooling"], [], (EMBEDDING,)),
        # the last of a flag wins, as in the engine: the workload's after the recipe's
        (_recipe(command="vllm serve {model} --task embed"), ["--task", "generate"], [], (TEXT_GENERATION,)),
        (_recipe(command="vllm serve {model} --task generate"), ["--task=embed"], [], (EMBEDDING,)),
        (_recipe(), [], [], (TEXT_GENERATION,)),
        # declared capabilities win over the arguments, in a fixed order
        (_recipe(command="vllm serve {model} --task embed"), [], [TEXT_GENERATION], (TEXT_GENERATION,)),
        (_recipe(), [], [EMBEDDING, TEXT_GENERATION], (TEXT_GENERATION, EMBEDDING)),
    ],
)
def test_capabilities_come_from_the_effective_arguments(
    recipe: RecipeSpec, args: list[str], declared: list[str], expected: tuple[str, ...]
) -> None:
    raw: dict[str, Any] = {"recipe": {"name": "r"}, "engine": {"args": args}}
    if declared:
        raw["routing"] = {"capabilities": declared}
    assert _served(raw, recipe).capabilities == expected


def test_capabilities_of_ignores_unknown_declarations() -> None:
    assert served.capabilities_of(["chat", 7], ["--task", "embed"]) == (EMBEDDING,)
    assert served.capabilities_of([], ["--task"]) == (TEXT_GENERATION,)
    assert served.capabilities_of([], ["--seed", "--task", "embed"]) == (EMBEDDING,)
    assert served.capabilities_of([], ["--max_model_len", "8", "--runner_x", "pooling"]) == (TEXT_GENERATION,)


def test_of_workload_reads_a_recipe_workloads_status_and_a_plain_workloads_spec() -> None:
    status_model = {"name": MODEL, "servedName": "served-x", "aliases": ["x"], "capabilities": [EMBEDDING]}
    recipe_wl = {"metadata": {"name": "wl-x"}, "spec": {"recipe": {"name": "rx"}}}
    # a recipe-based workload the operator has not resolved has no names (not its own name)
    assert served.of_workload(recipe_wl) is None
    found = served.of_workload({**recipe_wl, "status": {"model": status_model}})
    assert found == Served(model=MODEL, served_name="served-x", aliases=("x",), capabilities=(EMBEDDING,))
    # a workload without a recipe: the rule on its spec, whatever its status says
    plain = {"spec": {"model": {"name": MODEL, "servedName": "spec-name"}}}
    assert served.of_workload({**plain, "status": {"model": status_model}}) == Served(
        model=MODEL, served_name="spec-name"
    )
    # a plain workload before its first pass: the rule on its spec (its engine arguments)
    before = served.of_workload(
        {"spec": {"model": {"name": MODEL}, "engine": {"args": ["--runner", "pooling"]}}}
    )
    assert before == Served(model=MODEL, served_name=MODEL, capabilities=(EMBEDDING,))
    # a status without a served name is not a record; nothing to claim without a model
    assert served.of_workload({**recipe_wl, "status": {"model": {"name": MODEL}}}) is None
    assert served.of_workload({"spec": {}}) is None
    assert served.of_workload({"status": "garbage", "spec": {"model": {"name": MODEL}}}) is not None


# -- the names index's claims ------------------------------------------------------------


def test_claim_of_takes_the_resolved_names() -> None:
    meta = {"name": "wl-x", "namespace": "a", "creationTimestamp": "2026-12-06T10:00:00Z"}
    recipe_wl = {"metadata": meta, "spec": {"recipe": {"name": "rx"}}}
    assert names.claim_of(recipe_wl) is None  # not resolved yet: claims nothing
    claim = names.claim_of(
        {**recipe_wl, "status": {"model": {"name": MODEL, "servedName": "served-x", "aliases": ["x", "x"]}}}
    )
    assert claim is not None
    assert (claim.key, claim.served, claim.aliases) == ("a/wl-x", "served-x", ("x",))
    assert claim.created == dt.datetime(2026, 12, 6, 10, 0, tzinfo=dt.UTC)
    plain = names.claim_of(
        {"metadata": {"name": "p"}, "spec": {"model": {"name": MODEL, "aliases": [MODEL, "q"]}}}
    )
    assert plain is not None
    assert (plain.key, plain.names, plain.created) == ("default/p", (MODEL, "q"), None)
    assert names.claim_of({"metadata": {}, "spec": {"model": {"name": MODEL}}}) is None
    assert names.claim_of({"metadata": {"name": "n"}, "spec": {}}) is None


# -- status.model as the planner writes it -------------------------------------------------


def _obs(spec: InferenceWorkloadSpec, **kwargs: Any) -> Observation:
    return observation(spec, **kwargs)


RECIPE_WL = _spec(recipe={"name": "rx"})
SERVED_X = _recipe(defaults={"served_model_name": "served-x"})


def _leader_args(p: Any) -> list[str]:
    jobset = next(doc for doc in p.apply if doc["kind"] == "JobSet")
    leader = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    return list(leader["args"])


def _served_name_in(args: list[str]) -> str:
    assert args.count("--served-model-name") == 1, args
    return args[args.index("--served-model-name") + 1]


def test_the_planner_writes_the_recipes_served_name_and_starts_the_engine_with_it() -> None:
    p = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=SERVED_X), holders=lambda _: ()))
    assert p.status.model == ServedModel(
        name=MODEL, served_name="served-x", aliases=[], capabilities=[TEXT_GENERATION]
    )
    assert p.status.model.to_wire() == {
        "name": MODEL,
        "servedName": "served-x",
        "aliases": [],
        "capabilities": [TEXT_GENERATION],
    }
    assert _served_name_in(_leader_args(p)) == "served-x"
    routable = next(cond for cond in p.status.conditions if cond.type == c.ROUTABLE)
    assert routable.message == "the gateway routes 'served-x'"


@pytest.mark.parametrize(
    ("defaults", "expected"),
    [({}, MODEL), ({"served_model_name": "from-defaults"}, "from-defaults")],
)
def test_a_template_that_hard_codes_its_served_name_is_served_by_the_rule(
    defaults: dict[str, Any], expected: str
) -> None:
    """``--served-model-name`` is a flag the operator owns: a template's literal one is taken out
    and the rule's name rendered instead, so the status names what the engine is started with."""
    recipe = _recipe(
        defaults=defaults,
        command="vllm serve {model} --served-model-name literal-name --port {port} --seed 1",
    )
    p = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=recipe)))
    args = _leader_args(p)
    assert p.status.model is not None
    assert p.status.model.served_name == expected == _served_name_in(args)
    assert "literal-name" not in args
    assert args[-2:] == ["--seed", "1"]


def test_status_model_follows_the_revision_that_runs() -> None:
    """Blocked (the Recipe gone): the names of the JobSets still running are kept; with nothing
    running they go (nothing serves them). Waiting for a cache with nothing running: the names
    the engine will be started with."""
    first = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=SERVED_X)))
    assert first.revision is not None
    assert first.status.model is not None
    running = ObservedJobSet(
        name="wl-x-0-abcde", uid="u", replica=0, revision=first.revision, leader_ready=True
    )
    gone = ObservedRecipe(name="rx", exists=False)
    kept = plan(_obs(RECIPE_WL, recipe=gone, status=first.status, jobsets=(running,)))
    assert kept.status.model == first.status.model
    assert plan(_obs(RECIPE_WL, recipe=gone, status=first.status)).status.model is None
    deleting = ObservedJobSet(name=running.name, uid="u", replica=0, revision=first.revision, deleting=True)
    assert plan(_obs(RECIPE_WL, recipe=gone, status=first.status, jobsets=(deleting,))).status.model is None
    # a new served name while the old revision runs and a gate blocks: the running one's name
    renamed = _recipe(defaults={"served_model_name": "renamed"})
    pinned = _spec(recipe={"name": "rx", "revision": "0" * 12})
    held = plan(
        _obs(pinned, recipe=ObservedRecipe(name="rx", spec=renamed), status=first.status, jobsets=(running,))
    )
    assert held.status.model == first.status.model
    waiting = _spec(recipe={"name": "rx"}, model={"name": MODEL, "cacheRef": {"name": "weights"}})
    pending = plan(_obs(waiting, recipe=ObservedRecipe(name="rx", spec=SERVED_X)))
    assert pending.revision is None
    assert pending.status.model is not None
    assert pending.status.model.served_name == "served-x"


# -- the bound on a recipe's served name ---------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["x" * 257, "tab\there", "line\nbreak", "nul\x00", "bidi\u202eeman", ["a"], True],
)
def test_a_recipe_served_name_that_cannot_route_is_a_resolution_error(bad: Any) -> None:
    recipe = _recipe(defaults={"served_model_name": bad})
    p = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=recipe)))
    resolved = next(cond for cond in p.status.conditions if cond.type == c.RECIPE_RESOLVED)
    assert (resolved.status, resolved.reason) == ("False", c.REASON_RECIPE_INVALID)
    assert "defaults.served_model_name" in resolved.message
    assert p.status.model is None
    assert all(doc["kind"] != "JobSet" for doc in p.apply)
    assert any(
        i.field == "defaults.served_model_name" and i.severity == "error" for i in validate_recipe(recipe)
    )
    # the workload's own served name replaces the recipe's: nothing to refuse then
    own = _spec(recipe={"name": "rx"}, model={"name": MODEL, "servedName": "mine"})
    assert resolve(workload=own, recipe=recipe).spec is not None


def test_a_long_recipe_model_without_a_served_name_is_refused_not_written() -> None:
    long_model = "org/" + "m" * 300  # a recipe's model may be 512 long; a served name 256
    recipe = _recipe(model=long_model)
    p = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=recipe)))
    resolved = next(cond for cond in p.status.conditions if cond.type == c.RECIPE_RESOLVED)
    assert (resolved.status, resolved.reason) == ("False", c.REASON_RECIPE_INVALID)
    named = _recipe(model=long_model, defaults={"served_model_name": "short"})
    ok = plan(_obs(RECIPE_WL, recipe=ObservedRecipe(name="rx", spec=named)))
    assert ok.status.model is not None
    assert (ok.status.model.name, ok.status.model.served_name) == (
        long_model,
        "short",
    )
    assert resolve(workload=RECIPE_WL, recipe=_recipe(defaults={"served_model_name": 7})).spec is not None


# -- who may name a workload: not a writer of its status (hostile review of issue 24) ------


def test_status_model_from_a_non_operator_writer_is_not_trusted_over_spec() -> None:
    """A workload without a recipe: its spec says ``mine``; its ``status.model``, writable by
    anyone granted ``inferenceworkloads/status`` (a wildcard namespace role), says ``gpt-prod``.
    The names index, the conflict rule and the gateway take the spec: nothing in the status is
    needed to apply the rule to it."""
    spec = {"model": {"name": MODEL, "servedName": "mine", "aliases": ["mine-2"]}}
    forged = {"name": "evil/m", "servedName": "gpt-prod", "aliases": ["x"], "capabilities": [EMBEDDING]}
    meta = {"name": "w", "namespace": "tenant-a", "creationTimestamp": "2026-01-01T00:00:00Z"}
    obj = {"metadata": meta, "spec": spec, "status": {"phase": "Running", "model": forged}}
    assert served.of_workload(obj) == Served(model=MODEL, served_name="mine", aliases=("mine-2",))
    claim = names.claim_of(obj)
    assert claim is not None
    assert claim.names == ("mine", "mine-2")
    table = RoutingTable.build(build_entries([obj], []), 1)
    assert table.lookup("gpt-prod") is None
    assert table.lookup("x") is None
    found = table.lookup("mine")
    assert found is not None
    assert found.key == "tenant-a/w"
    # the planner's own claim (the Routable condition) is the same: the spec's names
    forged_status = InferenceWorkloadStatus.model_validate({"model": forged})
    p = plan(_obs(_spec(**spec), status=forged_status, holders=lambda _: ()))
    routable = next(cond for cond in p.status.conditions if cond.type == c.ROUTABLE)
    assert routable.message == "the gateway routes 'mine', 'mine-2'"
    # a recipe-based workload is still named by its status (only the operator reads its Recipe)
    recipe_obj = {"metadata": meta, "spec": {"recipe": {"name": "rx"}}, "status": {"model": forged}}
    recorded = served.of_workload(recipe_obj)
    assert recorded is not None
    assert recorded.served_name == "gpt-prod"


# -- one definition of a served name (api/servedname.py) -------------------------------------

#: Names admission refuses in ``spec.model.servedName``/``aliases``/``name`` and a Recipe's served name.
HOSTILE = [
    "gpt-prod\n",
    "gpt-prod\r\n",
    "gpt-\u202eprod",
    "gpt\u2066prod",
    "gpt-prod\u200b",
    "\ufeffgpt",
    "\x1b[2Jgpt",
    "tab\there",
    "nul\x00",
    "line\u2028sep",
    " gpt-prod",
    "gpt-prod ",
    "gpt-prod\u00a0",
    "\u3000gpt",
]


def _spec_cases(bad: str) -> list[tuple[dict[str, Any], RecipeSpec | None, str]]:
    """Each place a workload names what it serves, holding ``bad``, with the field refused."""
    return [
        ({"model": {"name": MODEL, "servedName": bad}}, None, "spec.model.servedName"),
        ({"model": {"name": MODEL, "aliases": ["ok", bad]}}, None, "spec.model.aliases[1]"),
        ({"model": {"name": bad}}, None, "spec.model.name"),
        (
            {"recipe": {"name": "rx"}, "model": {"name": MODEL, "servedName": bad}},
            SERVED_X,
            "spec.model.servedName",
        ),
        (
            {"recipe": {"name": "rx"}, "model": {"name": MODEL, "aliases": [bad]}},
            SERVED_X,
            "spec.model.aliases[0]",
        ),
    ]


@pytest.mark.parametrize("bad", HOSTILE)
def test_spec_served_name_is_held_to_the_same_rule_as_a_recipes(bad: str) -> None:
    """A workload's own names are checked by the rule a recipe's served name is: a workload
    stored before admission checked them (CRD validation ratcheting) resolves to an error, gets
    no ``status.model`` and starts nothing, and is routed by no name."""
    for raw, recipe, field in _spec_cases(bad):
        resolution = resolve(workload=_spec(**raw), recipe=recipe)
        assert resolution.spec is None, (raw, resolution.issues)
        assert any(i.field == field and i.severity == "error" for i in resolution.errors), resolution.errors
        observed = ObservedRecipe(name="rx", spec=recipe) if recipe is not None else None
        p = plan(_obs(_spec(**raw), recipe=observed))
        assert p.status.model is None
        assert all(doc["kind"] != "JobSet" for doc in p.apply)
        assert any(cond.reason == c.REASON_INVALID_SPEC for cond in p.status.conditions)
        if recipe is None:
            assert served.of_workload({"spec": raw}) is None
            assert names.claim_of({"metadata": {"name": "w"}, "spec": raw}) is None


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_recipes_served_name_is_refused_by_the_same_rule(bad: str) -> None:
    issues = validate_recipe(_recipe(defaults={"served_model_name": bad}))
    assert any(i.field == "defaults.served_model_name" and i.severity == "error" for i in issues)
    assert resolve(workload=RECIPE_WL, recipe=_recipe(defaults={"served_model_name": bad})).spec is None


@pytest.mark.parametrize(
    "name",
    [
        "gpt prod",  # an inner space (the engine gets one argument)
        "gpt\u00a0prod",  # an inner no-break space: a look-alike, not a control
        "\u0433pt-prod",  # Cyrillic ghe: a look-alike (NFKC does not fold it either)
        "\uff47\uff50\uff54",  # fullwidth "gpt": NFKC folds it to "gpt", still not refused
        "\u00e9t\u00e9",
        "x" * 256,
    ],
)
def test_look_alikes_are_served_names_of_their_own(name: str) -> None:
    """NFKC look-alikes are not refused: they are distinct names, routed and listed as written
    (the gateway matches names exactly), so one never answers for another."""
    raw = {"model": {"name": MODEL, "servedName": name, "aliases": [name.upper()]}}
    assert _served(raw).names == (name, name.upper())
    assert (
        _served({"recipe": {"name": "rx"}}, _recipe(defaults={"served_model_name": name})).served_name == name
    )
