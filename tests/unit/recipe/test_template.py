"""Command templates and env values as sparkrun renders them (``recipe/flags.py``
``fill_template``, ``api/recipe.py`` env values), and the bounds on what a template may make.

The same rules are checked against the reference sparkrun package by
``test_registry_corpus.py`` (the public registry plus synthetic recipes); these cases run
without it, and add what the reference does not decide (self-reference, growth, NUL).
"""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.flags import _Budget, _resolve_references, fill_template
from sparkrun_operator.recipe.resolve import resolve, validate_recipe
from tests.recipe_corpus import CORPUS, serve

DFLASH_512K = "experimental-recipes/qwen3.6/vllm-dflash/qwen3.6-27b-fp8-dflash-512k-vllm.yaml"
MESH_3X = "experimental-recipes/qwen3.5/vllm-mesh/qwen3.5-397b-a17b-int4-autoround-3x-vllm.yaml"


def _recipe(command: str, **defaults: Any) -> RecipeSpec:
    return RecipeSpec.model_validate({"model": "org/m", "defaults": defaults or None, "command": command})


def _args(command: str, **defaults: Any) -> list[str]:
    workload = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}})
    res = resolve(workload=workload, recipe=_recipe(command, **defaults))
    assert res.spec is not None, res.issues
    return list(res.spec.engine_args)


def test_a_json_default_keeps_every_brace() -> None:
    """Issue 24: ``--hf-overrides '{hf_overrides}'`` lost the last of ``}}}``."""
    served = serve(DFLASH_512K)
    value = served.argv[served.argv.index("--hf-overrides") + 1]
    written = yaml.safe_load((CORPUS / DFLASH_512K).read_text())["defaults"]["hf_overrides"]
    assert value == written
    assert value.endswith("262144}}}")
    assert json.loads(value)["text_config"]["rope_parameters"]["factor"] == 2.0


def test_a_numeric_env_value_is_taken_as_sparkrun_takes_it() -> None:
    """Issue 24: ``VLLM_MARLIN_USE_ATOMIC_ADD: 1`` was refused ("Input should be a valid string")."""
    served = serve(MESH_3X)
    assert served.parse_error is None
    assert served.env["VLLM_MARLIN_USE_ATOMIC_ADD"] == "1"
    assert served.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_env_values_of_every_scalar_type() -> None:
    spec = RecipeSpec.model_validate(
        {"model": "org/m", "env": {"I": 1, "T": True, "F": False, "X": 1.5, "S": "s", "Z": 0}}
    )
    assert spec.env == {"I": "1", "T": "True", "F": "False", "X": "1.5", "S": "s", "Z": "0"}
    assert spec.to_wire()["env"] == spec.env  # stored as strings: the CRD's type


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
def test_env_values_that_are_not_scalars_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="valid string"):
        RecipeSpec.model_validate({"model": "org/m", "env": {"A": value}})


@pytest.mark.parametrize(
    ("template", "settings", "expected"),
    [
        # No "{{" in the template: braces are literal, "}}" closes nested JSON.
        ('\'{"a": {"b": 1}}\' {x}', {"x": 1}, '\'{"a": {"b": 1}}\' 1'),
        # "{{" in the template: both pairs are escapes, placeholders inside still fill.
        ('\'{{"a": {{"b": {x}}}}}\'', {"x": 2}, '\'{"a": {"b": 2}}\''),
        # A substituted value is never unescaped nor re-escaped.
        ("{{x}} {v}", {"v": '{"a": {"b": 1}}}'}, '{x} {"a": {"b": 1}}}'),
        # A value may name another setting; inside a JSON value the reference is not reached.
        ("{u} '{j}'", {"u": "http://h:{p}", "p": 80, "j": '{"m": "{p}"}'}, 'http://h:80 \'{"m": "{p}"}\''),
        # str() of each value, as sparkrun's template engine renders it.
        ("{a} {b} {c} {d}", {"a": True, "b": False, "c": 0.5, "d": 3}, "True False 0.5 3"),
        # Any name a setting has; a span that names none stays as written.
        ('{a.b} { a } {"k": 1}', {"a.b": "x", "a": "y"}, 'x { a } {"k": 1}'),
    ],
)
def test_template_rules(template: str, settings: dict[str, Any], expected: str) -> None:
    assert fill_template(template, settings=settings) == (expected, [])


def test_a_placeholder_nothing_fills_is_reported() -> None:
    assert fill_template("{a} {b} {a}", settings={"b": None}) == ("{a} {b} {a}", ["a", "b", "a"])


def test_defaults_escapes_collapse_only_in_values_that_use_them() -> None:
    args = _args("vllm serve {model} --a '{e}' --b '{j}'", e='{{"k": 1}}', j='{"a": {"b": 1}}')
    assert args == ["--a", '{"k": 1}', "--b", '{"a": {"b": 1}}']


def test_line_continuations_join_as_the_shell_joins_them() -> None:
    # a blank after the backslash is repaired (sparkrun does); a continuation inside a word joins it
    assert _args("vllm serve {model} \\ \n --enforce-eager \\\n --max-num-seqs 1\\\n6") == [
        "--enforce-eager",
        "--max-num-seqs",
        "16",
    ]


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ({"a": "x{a}"}, "refers to itself"),
        ({"a": "{b}{b}{b}{b}", "b": "{c}{c}{c}{c}", "c": "{d}{d}{d}{d}", "d": "y" * 30000}, "grows past"),
        ({"a": "x\x00y"}, "NUL"),
    ],
    ids=["self-reference", "growth", "nul"],
)
def test_templates_that_cannot_be_filled_are_errors(defaults: dict[str, Any], message: str) -> None:
    recipe = _recipe("vllm serve {model} --x {a}", **defaults)
    workload = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}})
    res = resolve(workload=workload, recipe=recipe)
    assert res.spec is None
    (error,) = res.errors
    assert error.field == "command"
    assert error.message.startswith("command template cannot be filled: ")
    assert message in error.message
    assert [i.message for i in validate_recipe(recipe) if i.severity == "error"] == [error.message]


def test_references_resolve_as_the_shortest_brace_span_on_a_line() -> None:
    """``_resolve_references`` is sparkrun's later passes (``re.sub(r"\\{(.*?)\\}", ...)`` with the
    braces stripped from the match for the lookup), compared on generated text."""
    settings = {"a": "<A>", "b": None, "{a": "<{A>", "a b": "<AB>", "": "<E>"}

    def regex(text: str) -> str:
        def sub(match: re.Match[str]) -> str:
            value = settings.get(match.group(0).strip("{}"))
            return match.group(0) if value is None else str(value)

        return re.sub(r"\{(.*?)\}", sub, text)

    rng = random.Random(24)
    for _ in range(3000):
        text = "".join(rng.choice("{{}}ab \n") for _ in range(rng.randint(0, 24)))
        assert _resolve_references(text, settings, _Budget()) == regex(text), repr(text)


def test_filling_is_linear_in_hostile_braces() -> None:
    # A line of 64,000 "{" without a "}" (within the 64 KiB bound): a backtracking regex rescans
    # it from every "{" (about 15 s); one pass over it takes microseconds.
    started = time.perf_counter()
    text, missing = fill_template("{a}{a}{a}{a}", settings={"a": "{" * 16000})
    assert (len(text), missing) == (4 * 16000, [])
    assert time.perf_counter() - started < 2


#: The review's hostile recipe (issue 24): 32 KB of words, referenced 31 times by a default the
#: command uses once. Before the bound it filled to ~1 MB, split into 496,000 engine arguments in
#: ~0.4 s on the operator's loop (every pass), and rendered a ~2 MB JobSet that etcd refuses.
HOSTILE_GROWTH = {"a": "x " * 16000, "b": "{a}" * 31}


def test_a_command_filled_past_64_kib_is_refused_while_it_is_filled() -> None:
    # refused by the fill itself (before the command is split or anything rendered)
    with pytest.raises(ValueError, match="grows past 65536 characters"):
        fill_template("vllm serve {model} {b}", settings={"model": "org/m", **HOSTILE_GROWTH})
    recipe = _recipe("vllm serve {model} {b}", **HOSTILE_GROWTH)
    workload = InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}})
    res = resolve(workload=workload, recipe=recipe)
    assert res.spec is None
    (error,) = res.errors
    assert (error.field, error.message) == (
        "command",
        "command template cannot be filled: the filled command grows past 65536 characters",
    )
    assert [i.message for i in validate_recipe(recipe) if i.severity == "error"] == [error.message]


def test_a_command_at_64_kib_is_filled() -> None:
    template = "vllm serve {model} --chat-template {t}"
    fixed = len(template) - len("{model}") - len("{t}") + len("org/m")
    text, _ = fill_template(template, settings={"model": "org/m", "t": "x" * (65536 - fixed - 16)})
    assert len(text) == 65536 - 16
    assert len(_args("vllm serve {model} --chat-template {t}", t="x" * 32768)[1]) == 32768


def test_a_command_of_more_than_1024_words_is_refused() -> None:
    words = " ".join(["--x"] * 1021)  # with "vllm serve {model}": 1024 words
    assert len(_args(f"vllm serve {{model}} {words}")) == 1021
    recipe = _recipe(f"vllm serve {{model}} {words} --y")
    res = resolve(workload=InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}}), recipe=recipe)
    assert res.spec is None
    (error,) = res.errors
    assert (error.field, error.message) == ("command", "command template makes more than 1024 words")
    assert [i.message for i in validate_recipe(recipe) if i.severity == "error"] == [error.message]
