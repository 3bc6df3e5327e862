"""The daemon API's endpoints report a workload's names and capabilities by the one naming rule.

``ops/executors/endpoints.py`` ``endpoint_entry`` (``workloads.endpoints``, ``discovery.snapshot``,
``workloads.find_intent``, ``proxy.models``, ``proxy.start``) reads ``status.model`` (written by
the operator, ``plan/served.py``), so it reports what the gateway routes; before the operator has
written it, the same rule applied to the namespace's Recipe. Every entry is checked against the
reference daemon's result schema of ``workloads.endpoints``.
"""

from __future__ import annotations

from typing import Any

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.ops import catalog
from sparkrun_operator.ops.executors import recipes
from sparkrun_operator.ops.executors.endpoints import endpoint_entry, sweep
from sparkrun_operator.ops.schema import SchemaValidator

_ENDPOINTS = SchemaValidator(catalog.load().get("workloads.endpoints").result_schema)

_RECIPE_X = RecipeSpec.model_validate(
    {
        "model": "org/m",
        "runtime": "vllm",
        "container": "vllm/vllm-openai:v0.11.0",
        "defaults": {"served_model_name": "served-x"},
    }
)
_RECIPE_EMBED = RecipeSpec.model_validate(
    {
        "model": "org/e",
        "runtime": "vllm",
        "container": "vllm/vllm-openai:v0.11.0",
        "defaults": {"served_model_name": "served-e"},
        "command": "vllm serve {model} --task embed --served-model-name {served_model_name}",
    }
)


def _iw(name: str, spec: dict[str, Any], model: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
    if model is not None:
        status["model"] = model
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": status}


def _entry(workload: dict[str, Any], recipes: dict[str, RecipeSpec]) -> dict[str, Any]:
    entry = endpoint_entry(workload, recipes)
    _ENDPOINTS.check_result("workloads.endpoints", sweep([entry], mode="live", hosts=[]))
    return entry


def _names(entry: dict[str, Any]) -> tuple[Any, ...]:
    return entry["model"], entry["served_model_name"], entry["actual_models"], entry["capabilities"]


def test_a_recipe_served_under_its_own_name_reports_status_model() -> None:
    recorded = {
        "name": "org/m",
        "servedName": "served-x",
        "aliases": ["x"],
        "capabilities": ["text-generation"],
    }
    wl = _iw("wl-x", {"recipe": {"name": "r-x"}, "model": {"aliases": ["x"]}}, recorded)
    # the Recipe is not even needed once the operator wrote status.model
    assert _names(_entry(wl, {})) == ("org/m", "served-x", ["served-x", "x"], ["text-generation"])


def test_status_model_wins_over_a_recipe_changed_since() -> None:
    # status.model is what the gateway routes: the daemon reports the same names until the
    # operator has resolved the Recipe's new revision.
    recorded = {"name": "org/m", "servedName": "served-old", "aliases": [], "capabilities": ["embedding"]}
    wl = _iw("wl-x", {"recipe": {"name": "r-x"}}, recorded)
    assert _names(_entry(wl, {"r-x": _RECIPE_X})) == ("org/m", "served-old", ["served-old"], ["embedding"])


def test_capabilities_are_real() -> None:
    recorded = {"name": "org/e", "servedName": "served-e", "aliases": [], "capabilities": ["embedding"]}
    wl = _iw("wl-e", {"recipe": {"name": "r-e"}}, recorded)
    assert _entry(wl, {})["capabilities"] == ["embedding"]
    plain = _iw("plain", {"model": {"name": "org/p"}, "engine": {"args": ["--runner", "pooling"]}})
    assert _names(_entry(plain, {})) == ("org/p", "org/p", ["org/p"], ["embedding"])


def test_before_status_model_the_same_rule_resolves_the_recipe() -> None:
    wl = _iw("wl-e", {"recipe": {"name": "r-e"}})
    assert _names(_entry(wl, {"r-e": _RECIPE_EMBED})) == ("org/e", "served-e", ["served-e"], ["embedding"])
    wl = _iw(
        "wl-x",
        {"recipe": {"name": "r-x"}, "model": {"name": "org/m", "servedName": "mine", "aliases": ["m"]}},
    )
    assert _names(_entry(wl, {"r-x": _RECIPE_X})) == ("org/m", "mine", ["mine", "m"], ["text-generation"])


def test_an_unresolvable_recipe_workload_has_no_names() -> None:
    # No status.model and no Recipe: the engine cannot run, and its workload name is no model name.
    wl = _iw("wl-x", {"recipe": {"name": "missing"}})
    entry = _entry(wl, {"r-x": _RECIPE_X})
    assert entry["served_model_name"] is None
    assert entry["actual_models"] == []
    assert entry["capabilities"] == []
    assert "wl-x" not in entry["actual_models"]


def test_catalog_recipe_reports_the_capabilities_of_its_arguments() -> None:
    # catalog.recipe: the rule's capabilities of the recipe's rendered engine arguments.
    def detail(spec: RecipeSpec) -> dict[str, Any]:
        obj = {"metadata": {"name": "r", "namespace": "ml"}, "spec": spec.model_dump(by_alias=True)}
        return recipes._detail(obj, None)

    assert detail(_RECIPE_EMBED)["capabilities"] == ["embedding"]
    assert detail(_RECIPE_X)["capabilities"] == ["text-generation"]
