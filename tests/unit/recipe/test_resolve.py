"""Effective spec of a workload on top of a Recipe (``recipe/resolve.py``, ``recipe/flags.py``).

Tested: the precedence (ADR 0010) field by field, topology from the recipe vs the workload's own,
min/max nodes, the command template (filling, owned flags removed, errors), defaults that become
flags, user arguments that try to set operator-owned flags, intent ids equal to sparkrun's when
the workload changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.flags import fill_template, strip_owned
from sparkrun_operator.recipe.resolve import resolve, validate_recipe


def _recipe(**extra: Any) -> RecipeSpec:
    doc: dict[str, Any] = {
        "model": "Qwen/Qwen3-8B",
        "container": "example/vllm:1",
        "defaults": {"tensor_parallel": 2, "max_model_len": 4096, "served_model_name": "q8"},
        "env": {"A": "recipe", "B": "recipe"},
    }
    doc.update(extra)
    return RecipeSpec.model_validate(doc)


def _workload(**extra: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}, **extra})


def test_recipe_fills_what_the_workload_leaves_default() -> None:
    res = resolve(workload=_workload(), recipe=_recipe())
    spec = res.spec
    assert spec is not None, res.issues
    assert (spec.model, spec.served_name, spec.image) == ("Qwen/Qwen3-8B", "q8", "example/vllm:1")
    assert (spec.topology.nodes, spec.topology.gpus_per_node, spec.topology.tensor_parallel) == (1, 2, 2)
    assert spec.max_model_len == 4096
    assert [(e.name, e.value) for e in spec.env] == [("A", "recipe"), ("B", "recipe")]
    assert spec.recipe_revision == recipe_identity.recipe_revision(_recipe().to_v2())
    # the workload changes nothing: same intent id as `sparkrun run` of the recipe
    assert spec.intent_id == recipe_identity.intent_id(_recipe().to_v2())


def test_workload_fields_win() -> None:
    workload = _workload(
        model={"name": "Qwen/Qwen3-8B", "servedName": "mine", "aliases": ["a"]},
        engine={
            "image": "example/vllm:2",
            "maxModelLen": 1024,
            "env": [{"name": "B", "value": "workload"}],
            "args": ["--enforce-eager"],
        },
        topology={"nodes": 1, "gpusPerNode": 4, "tensorParallel": 4},
    )
    spec = resolve(workload=workload, recipe=_recipe()).spec
    assert spec is not None
    assert (spec.served_name, spec.image, spec.max_model_len) == ("mine", "example/vllm:2", 1024)
    assert spec.topology.tensor_parallel == 4
    assert [(e.name, e.value) for e in spec.env] == [("A", "recipe"), ("B", "workload")]
    assert spec.engine_args[-1] == "--enforce-eager"
    assert spec.aliases == ("a",)
    assert spec.intent_id != recipe_identity.intent_id(_recipe().to_v2())


def test_other_model_drops_the_recipe_revision() -> None:
    recipe = _recipe(modelRevision="abc")
    same = resolve(workload=_workload(), recipe=recipe).spec
    other = resolve(workload=_workload(model={"name": "Other/Model"}), recipe=recipe).spec
    assert same is not None
    assert other is not None
    assert same.model_revision == "abc"
    assert other.model_revision is None


def test_recipe_topology_over_min_nodes() -> None:
    recipe = _recipe(minNodes=2, defaults={"tensor_parallel": 8, "pipeline_parallel": 2})
    spec = resolve(workload=_workload(), recipe=recipe).spec
    assert spec is not None
    topo = spec.topology
    assert (topo.nodes, topo.gpus_per_node, topo.tensor_parallel, topo.pipeline_parallel) == (2, 8, 8, 2)


@pytest.mark.parametrize(
    ("recipe_extra", "workload_extra", "message"),
    [
        ({"minNodes": 3, "defaults": {"tensor_parallel": 2}}, {}, "cannot be split evenly"),
        (
            {"maxNodes": 1},
            {"topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2}},
            "at most max_nodes",
        ),
        ({"minNodes": 2}, {"topology": {"nodes": 1, "gpusPerNode": 4, "tensorParallel": 4}}, "at least"),
        ({"runtime": "sglang"}, {}, "not served by this operator"),
        ({"command": "python serve.py {model}"}, {}, "must start with 'vllm serve'"),
        ({"command": "vllm serve {model} --x {nope}"}, {}, "{nope}"),
        ({}, {"engine": {"args": ["--port", "9000"]}}, "may not set --port"),
        ({}, {"engine": {"args": ["--tensor_parallel_size=4"]}}, "spec.topology.tensorParallel"),
    ],
)
def test_errors_stop_serving(
    recipe_extra: dict[str, Any], workload_extra: dict[str, Any], message: str
) -> None:
    res = resolve(workload=_workload(**workload_extra), recipe=_recipe(**recipe_extra))
    assert res.spec is None
    assert any(message in e.message for e in res.errors), res.issues


def test_template_owned_flags_are_rendered_by_the_operator() -> None:
    recipe = _recipe(
        command="vllm serve {model} --port {port} -tp {tensor_parallel} --served-model-name x y "
        "--max-num-seqs 8 --max-model-len={max_model_len} --headless --kv-cache-dtype fp8",
    )
    spec = resolve(workload=_workload(), recipe=recipe).spec
    assert spec is not None
    assert spec.engine_args == ("--max-num-seqs", "8", "--kv-cache-dtype", "fp8")


def test_defaults_become_flags_and_unknown_ones_warn() -> None:
    recipe = _recipe(
        defaults={
            "kv_cache_dtype": "fp8",
            "enable_prefix_caching": False,
            "trust_remote_code": True,
            "odd": 1,
        }
    )
    res = resolve(workload=_workload(), recipe=recipe)
    assert res.spec is not None
    assert res.spec.engine_args == (
        "--no-enable-prefix-caching",
        "--kv-cache-dtype",
        "fp8",
        "--trust-remote-code",
    )
    assert [i.field for i in res.issues if i.severity == "warning"] == ["defaults.odd"]


def test_validate_recipe_reports_hooks_and_identity_errors() -> None:
    issues = validate_recipe(_recipe(preExec=["echo hi"]))
    assert [(i.severity, i.field) for i in issues] == [("warning", "pre_exec")]
    bad = validate_recipe(_recipe(runtimeConfig={"include": "base.yaml"}))
    assert any("include" in i.message for i in bad if i.severity == "error")


def test_fill_template_escapes_and_missing() -> None:
    text, missing = fill_template("a {x} {{lit}} {y}", settings={"x": True})
    assert text == "a True {lit} {y}"
    assert missing == ["y"]


def test_strip_owned_handles_values_and_equals() -> None:
    tokens = ["--port", "1", "--served-model-name", "a", "b", "--keep", "v", "--nnodes=2", "--headless", "x"]
    assert strip_owned(tokens) == ["--keep", "v", "x"]


def test_plain_workload_needs_a_model() -> None:
    res = resolve(workload=_workload(), recipe=None)
    assert res.spec is None
    assert res.errors[0].field == "spec.model"
