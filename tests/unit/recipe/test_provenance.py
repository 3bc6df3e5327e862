"""Where each effective setting came from (``recipe/provenance.py``, ADR 0046).

Tested: each precedence rule of ``recipe/resolve.py`` gives the source it should (a table), the
sources agree with what ``resolve()`` really did for every recipe of the tests' fixtures
(``tests/unit/recipes`` and the vendored registry corpus) under several workloads (an oracle
that reads each value back from the place its source names), merged lists carry per-item
sources, environment values never appear (not in values, sources, summaries or changes), the
status summary's bound, and ``changes()``: field-level, readable argument diffs, bounded text for
hostile values (a 100 KiB argument, unicode, control and bidi characters) and linear work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api.history import Change, SourcedValue
from sparkrun_operator.api.meta import EnvVar
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import DEFAULT_ENGINE_IMAGE, InferenceWorkloadSpec
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.recipes import parse_recipe
from sparkrun_operator.recipe import provenance
from sparkrun_operator.recipe.resolve import EffectiveSpec, Topology, resolve
from tests.recipe_corpus import CORPUS

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
TOKEN = "hf_" + "Q" * 34  # looks like a Hugging Face token
SECRET_VALUES = (TOKEN, "s3cr3t-recipe-value", "sk-live-0123456789abcdef")


def _recipe(**extra: Any) -> RecipeSpec:
    doc: dict[str, Any] = {
        "model": "Qwen/Qwen3-8B",
        "container": "example/vllm:1",
        "defaults": {"tensor_parallel": 2, "max_model_len": 4096, "served_model_name": "q8"},
        "env": {"A": "recipe", "B": "s3cr3t-recipe-value"},
    }
    doc.update(extra)
    return RecipeSpec.model_validate(doc)


def _workload(**extra: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}, **extra})


def _plain(**extra: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate({"model": {"name": "org/m"}, **extra})


def _sourced(workload: InferenceWorkloadSpec, recipe: RecipeSpec | None) -> dict[str, SourcedValue]:
    resolution = resolve(workload=workload, recipe=recipe)
    assert resolution.spec is not None, resolution.issues
    values = provenance.sourced(workload=workload, recipe=recipe, effective=resolution.spec)
    assert [v.field for v in values] == list(provenance.FIELDS)
    return {v.field: v for v in values}


def _wire(values: dict[str, SourcedValue] | list[Any] | tuple[Any, ...]) -> str:
    items = values.values() if isinstance(values, dict) else values
    return json.dumps([v.to_wire() for v in items])


# -- the rules, one by one ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "recipe", "field", "source", "detail"),
    [
        # no recipe: the workload, else the operator's defaults
        (_plain(), None, "model", "workload", "spec.model.name"),
        (_plain(), None, "servedName", "workload", "spec.model.name"),
        (
            _plain(model={"name": "org/m", "servedName": "x"}),
            None,
            "servedName",
            "workload",
            "spec.model.servedName",
        ),
        (_plain(), None, "modelRevision", "default", "none (the model's default branch)"),
        (
            _plain(model={"name": "org/m", "revision": "abc"}),
            None,
            "modelRevision",
            "workload",
            "spec.model.revision",
        ),
        (_plain(), None, "engine.image", "default", f"operator default {DEFAULT_ENGINE_IMAGE}"),
        (_plain(engine={"image": "x/y:1"}), None, "engine.image", "workload", "spec.engine.image"),
        (_plain(), None, "topology", "default", "operator default 1 node, 1 GPU"),
        (
            _plain(topology={"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2}),
            None,
            "topology",
            "workload",
            "spec.topology",
        ),
        (_plain(), None, "engineArgs", "default", "none"),
        (_plain(engine={"args": ["--enforce-eager"]}), None, "engineArgs", "workload", "spec.engine.args"),
        (_plain(), None, "maxModelLen", "default", "none (vLLM derives it from the model)"),
        (_plain(engine={"maxModelLen": 9}), None, "maxModelLen", "workload", "spec.engine.maxModelLen"),
        (_plain(engine={"gpuMemoryUtilization": 0.5}), None, "gpuMemoryUtilization", "workload", None),
        (_plain(), None, "enableSleepMode", "default", "operator default false"),
        (_plain(engine={"enableSleepMode": True}), None, "enableSleepMode", "workload", None),
        (_plain(), None, "aliases", "default", "none"),
        (
            _plain(model={"name": "org/m", "aliases": ["a"]}),
            None,
            "aliases",
            "workload",
            "spec.model.aliases",
        ),
        (_plain(model={"name": "org/m", "cacheRef": {"name": "c"}}), None, "cacheRef", "workload", None),
        # a recipe: its fields and defaults under the workload's own choices
        (_workload(), _recipe(), "model", "recipe", "@ model"),
        (_workload(model={"name": "Qwen/Qwen3-8B"}), _recipe(), "model", "workload", "spec.model.name"),
        (_workload(), _recipe(modelRevision="abc"), "modelRevision", "recipe", "@ modelRevision"),
        (
            _workload(model={"name": "Other/M"}),
            _recipe(modelRevision="abc"),
            "modelRevision",
            "default",
            "none (spec.model.name is not the Recipe's model)",
        ),
        (_workload(), _recipe(), "servedName", "recipeDefaults", "@ defaults.served_model_name"),
        (_workload(), _recipe(defaults={}), "servedName", "recipe", None),
        (_workload(model={"name": "O/M"}), _recipe(defaults={}), "servedName", "workload", "spec.model.name"),
        (_workload(), _recipe(), "engine.image", "recipe", "@ container"),
        (_workload(), _recipe(container=None), "engine.image", "default", None),
        (_workload(engine={"image": "x/y:2"}), _recipe(), "engine.image", "workload", "spec.engine.image"),
        (_workload(), _recipe(), "maxModelLen", "recipeDefaults", "@ defaults.max_model_len"),
        (_workload(engine={"maxModelLen": 7}), _recipe(), "maxModelLen", "workload", None),
        (
            _workload(),
            _recipe(defaults={"gpu_memory_utilization": 0.7}),
            "gpuMemoryUtilization",
            "recipeDefaults",
            None,
        ),
        (_workload(), _recipe(), "gpuMemoryUtilization", "default", "none (vLLM's default)"),
        (_workload(), _recipe(), "topology", "recipeDefaults", None),
        (_workload(), _recipe(defaults={}, minNodes=1), "topology", "recipe", None),
        (
            _workload(topology={"nodes": 1, "gpusPerNode": 4, "tensorParallel": 4}),
            _recipe(),
            "topology",
            "workload",
            "spec.topology",
        ),
        (_workload(), _recipe(), "engineArgs", "default", "none"),
        (_workload(), _recipe(defaults={"max_num_seqs": 8}), "engineArgs", "recipeDefaults", None),
        (_workload(), _recipe(command="vllm serve {model} --max-num-seqs 8"), "engineArgs", "recipe", None),
        (
            _workload(engine={"args": ["--enforce-eager"]}),
            _recipe(command="vllm serve {model} --max-num-seqs 8"),
            "engineArgs",
            "merged",
            None,
        ),
        (_workload(), _recipe(), "env", "recipe", "@ env"),
        (_workload(engine={"env": [{"name": "C", "value": "w"}]}), _recipe(), "env", "merged", None),
        (_workload(), _recipe(env=None), "env", "default", "none"),
    ],
)
def test_each_rule_names_its_source(
    workload: InferenceWorkloadSpec, recipe: RecipeSpec | None, field: str, source: str, detail: str | None
) -> None:
    """``detail``: how it starts ("@ " stands for the Recipe and its revision)."""
    value = _sourced(workload, recipe)[field]
    assert value.source == source, value
    if detail is not None:
        revision = resolve(workload=workload, recipe=recipe).spec
        assert revision is not None
        expected = detail.replace("@ ", f"r@{revision.recipe_revision} ", 1)
        assert (value.detail or "").startswith(expected), value


def test_merged_lists_carry_each_items_source() -> None:
    recipe = _recipe(command="vllm serve {model} --max-num-seqs 8")
    workload = _workload(
        engine={
            "args": ["--enforce-eager"],
            "env": [{"name": "B", "value": TOKEN}, {"name": "C", "value": "1"}],
        }
    )
    values = _sourced(workload, recipe)
    args = values["engineArgs"]
    assert args.value == ["--max-num-seqs", "8", "--enforce-eager"]
    assert [(i.field, i.source) for i in args.items or []] == [
        ("--max-num-seqs", "recipe"),
        ("8", "recipe"),
        ("--enforce-eager", "workload"),
    ]
    env = values["env"]
    assert [(i.field, i.source) for i in env.items or []] == [
        ("A", "recipe"),
        ("B", "workload"),
        ("C", "workload"),
    ]
    assert [e["name"] for e in env.value] == ["A", "B", "C"]
    assert env.source == "merged"


# -- the oracle: every fixture recipe, several workloads ----------------------------------------


def _fixture_recipes() -> list[tuple[str, RecipeSpec]]:
    out: list[tuple[str, RecipeSpec]] = []
    for path in [*sorted(RECIPES.glob("*.yaml")), *sorted(CORPUS.rglob("*.yaml"))]:
        try:
            out.append((path.name, parse_recipe(path.read_text())[1]))
        except Invalid:
            continue  # refused at import: never resolved
    return out


FIXTURES = _fixture_recipes()
WORKLOADS = [
    {},
    {"model": {"name": "Other/Model", "servedName": "mine", "aliases": ["al"], "cacheRef": {"name": "c"}}},
    {
        "engine": {
            "image": "example/own:1",
            "args": ["--enforce-eager"],
            "env": [
                {"name": "NCCL_DEBUG", "value": TOKEN},
                {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
            "maxModelLen": 2048,
            "gpuMemoryUtilization": 0.8,
            "enableSleepMode": True,
        }
    },
]


def _read_back(value: SourcedValue, workload: InferenceWorkloadSpec, recipe: RecipeSpec) -> Any:
    """The value at the place ``value``'s source names (the oracle), or ``value.value`` when the
    source is not a single place (a default, a topology, a list)."""
    detail = value.detail or ""
    where = detail.split(" ", 1)[1] if value.source in {"recipe", "recipeDefaults"} else detail
    places: dict[tuple[str, str], Any] = {
        ("workload", "spec.model.name"): workload.model.name if workload.model else None,
        ("workload", "spec.model.servedName"): workload.model.served_name if workload.model else None,
        ("workload", "spec.model.revision"): workload.model.revision if workload.model else None,
        ("workload", "spec.engine.image"): workload.engine.image,
        ("workload", "spec.engine.maxModelLen"): workload.engine.max_model_len,
        ("workload", "spec.engine.gpuMemoryUtilization"): workload.engine.gpu_memory_utilization,
        ("recipe", "model"): recipe.model,
        ("recipe", "modelRevision"): recipe.model_revision,
        ("recipe", "container"): recipe.container,
    }
    if value.source == "recipeDefaults" and where.startswith("defaults.") and "," not in where:
        raw = (recipe.defaults or {})[where.removeprefix("defaults.")]
        return type(value.value)(raw)
    if value.source == "default" and value.field not in {"engine.image", "topology", "enableSleepMode"}:
        return value.value if value.value in (None, [], False) else "not a default"
    return places.get((value.source, where), value.value)


@pytest.mark.parametrize("workload_doc", WORKLOADS, ids=["names-only", "own-model", "own-engine"])
@pytest.mark.parametrize(("name", "recipe"), FIXTURES, ids=[n for n, _ in FIXTURES])
def test_sources_agree_with_resolve(name: str, recipe: RecipeSpec, workload_doc: dict[str, Any]) -> None:
    workload = _workload(**workload_doc)
    resolution = resolve(workload=workload, recipe=recipe)
    if resolution.spec is None:
        return  # refused: nothing is served, nothing is sourced
    spec = resolution.spec
    values = {v.field: v for v in provenance.sourced(workload=workload, recipe=recipe, effective=spec)}
    identity = spec.serving_identity()
    for field in ("model", "modelRevision", "servedName", "maxModelLen", "gpuMemoryUtilization"):
        assert values[field].value == identity[field], field
        assert _read_back(values[field], workload, recipe) == identity[field], (field, values[field])
    assert values["engine.image"].value == identity["image"]
    assert _read_back(values["engine.image"], workload, recipe) == identity["image"]
    assert values["topology"].value == identity["topology"]
    assert values["engineArgs"].value == identity["engineArgs"]
    assert [e["name"] for e in values["env"].value] == [e["name"] for e in identity["env"]]
    # merged lists: the workload's items are its own, in its order, at the end
    args_items = values["engineArgs"].items or []
    assert [i.field for i in args_items if i.source == "workload"] == list(workload.engine.args)
    mine = {e.name for e in workload.engine.env}
    for item in values["env"].items or []:
        assert item.source == ("workload" if item.field in mine else "recipe"), item
    # every detail names the recipe's revision when the source is the recipe
    for value in values.values():
        if value.source in {"recipe", "recipeDefaults"}:
            assert (value.detail or "").startswith(f"r@{spec.recipe_revision} "), value
    wire = _wire(values)
    for secret in SECRET_VALUES:
        assert secret not in wire


def test_the_fixtures_are_there() -> None:
    assert len(FIXTURES) >= 30  # the unit recipes and the corpus, so the oracle ran over them


# -- env values never appear ---------------------------------------------------------------------


def test_env_values_never_appear_anywhere() -> None:
    recipe = _recipe(env={"RECIPE_TOKEN": "sk-live-0123456789abcdef", "B": "s3cr3t-recipe-value"})
    before = _sourced(_workload(engine={"env": [{"name": "HF_TOKEN", "value": TOKEN}]}), recipe)
    after = _sourced(
        _workload(
            engine={
                "env": [
                    {"name": "HF_TOKEN", "value": TOKEN + "x"},
                    {"name": "REF", "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "token"}}},
                ]
            }
        ),
        recipe,
    )
    changed = provenance.changes(list(before.values()), list(after.values()))
    everything = _wire(before) + _wire(after) + _wire(changed)
    everything += _wire(provenance.summary(list(after.values())))
    for secret in (*SECRET_VALUES, TOKEN + "x", "hf-secret"):
        assert secret not in everything
    ref = next(e for e in after["env"].value if e["name"] == "REF")
    assert ref["valueFrom"] == "secretKeyRef"
    env_change = next(c for c in changed if c.field == "env")
    # a new value under the same name is a change, shown by name
    assert json.loads(env_change.before or "") == ["HF_TOKEN"]
    assert json.loads(env_change.after or "") == ["HF_TOKEN", "REF"]


# -- summary and changes -------------------------------------------------------------------------


def test_summary_is_bounded_and_has_no_values() -> None:
    values = list(_sourced(_workload(), _recipe()).values())
    summary = provenance.summary(values * 3)
    assert len(summary) == provenance.SUMMARY_MAX
    assert [s.field for s in provenance.summary(values)] == list(provenance.FIELDS)
    assert "value" not in json.dumps([s.to_wire() for s in summary])


def test_changes_name_the_field_its_source_and_both_values() -> None:
    before = _sourced(_workload(), _recipe())
    after = _sourced(_workload(engine={"image": "example/vllm:2", "maxModelLen": 1024}), _recipe())
    changed = {c.field: c for c in provenance.changes(list(before.values()), list(after.values()))}
    assert set(changed) == {"engine.image", "maxModelLen"}
    assert changed["engine.image"] == Change(
        field="engine.image",
        source="workload",
        detail="spec.engine.image",
        before='"example/vllm:1"',
        after='"example/vllm:2"',
    )
    assert (changed["maxModelLen"].before, changed["maxModelLen"].after) == ("4096", "1024")
    assert provenance.changes(list(before.values()), list(before.values())) == []


def test_argument_diff_shows_the_changed_middle_with_context() -> None:
    base = [f"--flag-{i}" for i in range(40)]
    before = [
        SourcedValue(field="engineArgs", value=[*base, "--max-num-seqs", "8", "--x"], source="workload")
    ]
    after = [
        SourcedValue(field="engineArgs", value=[*base, "--max-num-seqs", "16", "--x"], source="workload")
    ]
    (change,) = provenance.changes(before, after)
    assert json.loads(change.before or "") == ["…", "--max-num-seqs", "8", "…"]
    assert json.loads(change.after or "") == ["…", "--max-num-seqs", "16", "…"]
    appended = [
        SourcedValue(field="engineArgs", value=[*base, "--max-num-seqs", "8", "--x", "--y"], source="merged")
    ]
    (change,) = provenance.changes(before, appended)
    assert json.loads(change.before or "") == ["…", "--x"]
    assert json.loads(change.after or "") == ["…", "--x", "--y"]


def test_a_field_only_one_side_has() -> None:
    old = [SourcedValue(field="cacheRef", value="c", source="workload")]
    new = [SourcedValue(field="model", value="m", source="recipe")]
    changed = provenance.changes(old, new)
    assert [(c.field, c.before, c.after) for c in changed] == [
        ("model", None, '"m"'),
        ("cacheRef", '"c"', None),
    ]


HOSTILE = [
    "a" * (100 * 1024),
    "é" * 5000 + "漢字",
    "\u202e" + "evil\nline\x00" * 100,
    "\U0001f600" * 400,
]


@pytest.mark.parametrize("arg", HOSTILE, ids=["100KiB", "unicode", "control-bidi", "astral"])
def test_hostile_values_give_bounded_escaped_text(arg: str) -> None:
    before = [SourcedValue(field="engineArgs", value=["--a", arg], source="workload")]
    after = [SourcedValue(field="engineArgs", value=["--a", arg + "x", "--b"], source="workload")]
    for change in provenance.changes(before, after) + provenance.changes(after, []):
        for text in (change.before, change.after):
            if text is None:
                continue
            assert len(text) <= provenance.CHANGE_TEXT_MAX
            for bad in ("\n", "\x00", "\u202e"):
                assert bad not in text
    # an effective spec carrying such an argument is sourced as is (the value is the spec's)
    effective = _effective(engine_args=(arg,))
    (args,) = [
        v
        for v in provenance.sourced(workload=_plain(), recipe=None, effective=effective)
        if v.field == "engineArgs"
    ]
    assert args.value == [arg]


def _effective(**extra: Any) -> EffectiveSpec:
    fields: dict[str, Any] = {
        "model": "org/m",
        "model_revision": None,
        "served_name": "org/m",
        "image": DEFAULT_ENGINE_IMAGE,
        "topology": Topology(nodes=1, gpus_per_node=1, tensor_parallel=1, pipeline_parallel=1),
        "intent_id": "0" * 16,
    }
    fields.update(extra)
    return EffectiveSpec(**fields)


def test_item_sources_are_bounded() -> None:
    args = tuple(f"--a{i}" for i in range(3000))
    workload = _plain(engine={"args": ["--z"]})
    effective = _effective(engine_args=args)
    (value,) = [
        v
        for v in provenance.sourced(workload=workload, recipe=None, effective=effective)
        if v.field == "engineArgs"
    ]
    assert len(value.items or []) == provenance.ITEMS_MAX


def test_env_entry_of_a_reference_is_its_kind() -> None:
    entry = provenance.env_entry(EnvVar(name="X", value_from={"fieldRef": {"fieldPath": "status.podIP"}}))
    assert entry["valueFrom"] == "fieldRef"
    assert "status.podIP" not in json.dumps(entry)


def test_changes_are_linear() -> None:
    """Twice the input takes about twice the time, not four times (no quadratic diff)."""

    def run(n: int) -> float:
        before = [SourcedValue(field="engineArgs", value=[f"a{i}" for i in range(n)], source="workload")]
        after = [SourcedValue(field="engineArgs", value=[f"b{i}" for i in range(n)], source="workload")]
        env_b = [
            SourcedValue(
                field="env", value=[{"name": f"N{i}", "digest": "0"} for i in range(n)], source="workload"
            )
        ]
        env_a = [
            SourcedValue(
                field="env", value=[{"name": f"N{i}", "digest": "1"} for i in range(n)], source="workload"
            )
        ]
        start = time.perf_counter()
        provenance.changes(before, after)
        provenance.changes(env_b, env_a)
        return time.perf_counter() - start

    small = min(run(20_000) for _ in range(3))
    large = min(run(80_000) for _ in range(3))
    assert large < small * 12  # linear: ~4x; quadratic would be ~16x
