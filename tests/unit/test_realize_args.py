"""``recipes.realize`` / ``recipes.plan_build`` (pure parts): which arguments are refused at
submission (named, unless at their default), how overrides are baked into the realized recipe,
and what a build plan says of a recipe (``ops/executors/realize.py``, ADR 0054)."""

from __future__ import annotations

import pytest

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS, realize

RECIPE = RecipeSpec.model_validate(
    {
        "model": "Qwen/Qwen3-8B",
        "runtime": "vllm",
        "container": "vllm/vllm-openai:v0.33.0",
        "defaults": {"tensor_parallel": 1, "served_model_name": "q"},
    }
)


def test_the_checks_run_at_submission() -> None:
    assert ARGUMENT_CHECKS["recipes.realize"] is realize.check_realize
    assert ARGUMENT_CHECKS["recipes.plan_build"] is realize.check_plan_build


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"ensure": True}, "ensure"),
        ({"executor": "docker", "ray_port": 6379}, "ray_port, executor"),
        ({"transfer_mode": "push"}, "transfer_mode"),
        ({"offline": True}, "offline"),
        ({"extra_docker_opts": ["--ipc=host"]}, "extra_docker_opts"),
    ],
)
def test_realize_refuses_settings_it_cannot_honour_naming_them(args: dict[str, object], named: str) -> None:
    with pytest.raises(Invalid) as caught:
        realize.check_realize({"recipe": "r", **args})
    assert str(caught.value).startswith(f"recipes.realize: not supported on Kubernetes: {named} ")


def test_defaults_and_kubernetes_arguments_pass() -> None:
    realize.check_realize(
        {
            "recipe": "r",
            "ensure": False,
            "transfer_mode": "auto",
            "offline": False,
            "executor_config": {},
            "dry_run": True,
            "trust": True,
            "solo": True,
            "overrides": {"tp": 2},
            "recipe_ref": "@official/x",
        }
    )
    realize.check_plan_build({"recipe": "r", "offline": True, "rebuild": True})
    with pytest.raises(Invalid, match="builder_context"):
        realize.check_plan_build({"recipe": "r", "builder_context": {"x": 1}})
    with pytest.raises(Invalid, match="override 'kv_cache_dtype' is not supported"):
        realize.check_realize({"recipe": "r", "overrides": {"kv_cache_dtype": "fp8"}})


def test_overrides_are_baked_into_defaults() -> None:
    data = realize._baked(
        RECIPE, {"recipe": "r", "overrides": {"tp": 2, "max_model_len": 4096}, "solo": True}
    )
    assert data["defaults"] == {"tensor_parallel": 2, "served_model_name": "q", "max_model_len": 4096}
    assert (data["min_nodes"], data["max_nodes"]) == (1, 1)
    assert RECIPE.defaults == {"tensor_parallel": 1, "served_model_name": "q"}  # the Recipe untouched


def test_a_build_plan_says_what_a_build_needs() -> None:
    needs, issues = realize._build_issues(RECIPE)
    assert needs is False
    assert [(i["severity"], i["code"]) for i in issues] == [("warning", "image_not_pinned")]
    digest = RECIPE.model_copy(update={"container": "vllm/vllm-openai@sha256:" + "a" * 64})
    assert realize._build_issues(digest) == (False, [])
    built = RECIPE.model_copy(update={"runtime_config": {"builder": "eugr"}})
    needs, issues = realize._build_issues(built)
    assert needs is True
    assert ("error", "builder_not_run") in [(i["severity"], i["code"]) for i in issues]
