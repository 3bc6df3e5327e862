"""The pure parts of ``bench.registry`` (issue 32): the registry repository it serves is what the
operator reads as N recipes (through the product's own ``read_registry``; the corpus's SGLang
recipes refused, the rest valid), 4 mods and 2 benchmark profiles; the one-recipe change changes
one file and one model; the apiserver writes are grouped by who made them."""

from __future__ import annotations

from bench import _registry
from sparkrun_operator.recipe.registry_tree import read_registry


def test_the_repository_reads_as_n_distinct_valid_recipes_with_mods_and_profiles() -> None:
    files = _registry.repository(120)
    contents = read_registry(files, "recipes")
    assert len(contents.recipes) == 120
    assert len({r.slug for r in contents.recipes}) == 120
    assert len({r.catalog_name for r in contents.recipes}) == 120
    # NB: the corpus as it is: its SGLang recipes are refused (this operator serves vLLM), the rest valid
    refused = {r.path for r in contents.recipes if any(i.severity == "error" for i in r.issues)}
    sglang = {p for p, text in files.items() if p.startswith("recipes/") and b"runtime: sglang" in text}
    assert refused == sglang
    assert 0 < len(sglang) < 20
    models = {(r.spec or {}).get("model") for r in contents.recipes}
    assert models == {_registry.model_of(i) for i in range(120)}
    assert sorted(m.name for m in contents.mods) == sorted(f"mods/{m}" for m in _registry.MODS)
    assert all(m.problem is None for m in contents.mods)
    assert sorted(p.name for p in contents.benchmark_profiles) == sorted(_registry.PROFILES)
    assert contents.problems == []


def test_one_change_is_one_file_and_one_model() -> None:
    before = _registry.repository(50)
    path, data = _registry.changed_one(50, 3)
    assert path in before
    assert before[path] != data
    after = {**before, path: data}
    old = {r.path: (r.spec or {}).get("model") for r in read_registry(before, "recipes").recipes}
    new = {r.path: (r.spec or {}).get("model") for r in read_registry(after, "recipes").recipes}
    assert [p for p in old if old[p] != new[p]] == [path]
    assert new[path] == _registry.model_of((3 * 7) % 50, 3)


def test_writes_are_grouped_by_who_made_them() -> None:
    grouped = _registry.who_wrote(
        {
            ("recipes", "", "POST"): 200.0,
            ("recipes", "", "PUT"): 1.0,
            ("recipes", "", "PATCH"): 200.0,
            ("recipes", "status", "PATCH"): 200.0,
            ("configmaps", "", "POST"): 6.0,
            ("reciperegistries", "status", "PUT"): 1.0,
            ("reciperegistries", "", "PATCH"): 1.0,
            ("events", "", "POST"): 2.0,
        }
    )
    assert grouped == {
        "recipe_writes": 201.0,
        "configmap_writes": 6.0,
        "registry_status": 1.0,
        "recipe_status_followon": 200.0,
        "recipe_patch_followon": 200.0,
        "bench_requests": 1.0,
        "other": 2.0,
    }
    assert _registry.flat({("recipes", "", "POST"): 2.0}) == {"recipes//POST": 2.0}


def test_rows_and_ratios() -> None:
    ours = [{"wall_s": 2.0, "writes": 1, "cpu_s": 0.5}, {"wall_s": 4.0, "writes": 1, "cpu_s": 0.7}]
    limit = [{"wall_s": 1.0, "writes": 1, "cpu_s": 0.1}, {"wall_s": 1.0, "writes": 1, "cpu_s": 0.1}]
    row = _registry.row("one-change", 200, "operator", ours)
    assert (row["samples"], row["p50_s"], row["min_s"], row["max_s"], row["writes_p50"]) == (
        2,
        3.0,
        2.0,
        4.0,
        1.0,
    )
    assert _registry.ratios(ours, limit) == {"min": 2.0, "median": 3.0, "max": 4.0}
