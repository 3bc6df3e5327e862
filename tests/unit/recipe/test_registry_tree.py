"""``recipe/registry_tree.py``: a registry commit's files read as sparkrun 0.4.2 reads a checkout."""

from __future__ import annotations

from sparkrun_operator.recipe.registry_tree import (
    MANIFEST_PATH,
    MOD_MAX_BYTES,
    manifest_subpaths,
    read_registry,
    slug,
)

RECIPE = b"model: org/model-a\nruntime: vllm\ndefaults:\n  tensor_parallel: 1\n"
MANIFEST = b"""registries:
  - name: official
    recipes: official-recipes
    mods: shared/mods
    benchmarks: bench
    tuning: tune
  - name: other
    subpath: other-recipes
    mods_subpath: ../../etc
"""

TREE = {
    MANIFEST_PATH: MANIFEST,
    "official-recipes/qwen/vllm/qwen-a.yaml": RECIPE,
    "official-recipes/qwen/sglang/qwen-a.yaml": RECIPE.replace(b"model-a", b"model-b"),
    "official-recipes/solo.yml": RECIPE,
    "official-recipes/solo.yaml": RECIPE.replace(b"model-a", b"model-c"),
    "official-recipes/.drafts/hidden.yaml": RECIPE,
    "official-recipes/broken.yaml": b"model: [unclosed\n",
    "official-recipes/notes.txt": b"not a recipe",
    "shared/mods/fix-chat/run.sh": b"#!/bin/sh\necho fix\n",
    "shared/mods/fix-chat/templates/chat.jinja": b"{{ x }}",
    "shared/mods/no-run/readme.md": b"no run.sh: not a mod",
    "shared/mods/too-big/run.sh": b"x" * (MOD_MAX_BYTES + 1),
    "bench/spark-arena-v2.yaml": b"benchmark:\n  framework: llama-benchy\n",
    "bench/bad.yaml": b"- a list\n",
    "tune/vllm/shape-1.json": b"{}",
    "tune/vllm/readme.md": b"",
}


def test_a_registry_reads_as_sparkrun_does() -> None:
    out = read_registry(TREE, "official-recipes", {"shared/mods/fix-chat/run.sh": 0o100755})
    assert out.layout.mods == "shared/mods"
    assert {r.path: r.catalog_name for r in out.recipes} == {
        "official-recipes/broken.yaml": "broken",
        "official-recipes/qwen/sglang/qwen-a.yaml": "qwen/sglang/qwen-a",
        "official-recipes/qwen/vllm/qwen-a.yaml": "qwen/vllm/qwen-a",
        "official-recipes/solo.yaml": "solo",  # NB: the .yaml of a stem wins over its .yml
    }
    by_name = {r.catalog_name: r for r in out.recipes}
    assert by_name["solo"].spec is not None
    assert by_name["solo"].spec["model"] == "org/model-c"
    assert by_name["qwen/vllm/qwen-a"].valid
    assert not by_name["broken"].valid
    assert by_name["broken"].issues[0].severity == "error"
    assert len({r.slug for r in out.recipes}) == 4
    mods = {m.name: m for m in out.mods}
    assert set(mods) == {"mods/fix-chat", "mods/too-big"}
    assert set(mods["mods/fix-chat"].files) == {"run.sh", "templates/chat.jinja"}
    assert mods["mods/fix-chat"].modes["run.sh"] == 0o100755
    assert mods["mods/fix-chat"].problem is None
    assert "at most" in (mods["mods/too-big"].problem or "")
    profiles = {p.name: p for p in out.benchmark_profiles}
    assert profiles["spark-arena-v2"].document == {"benchmark": {"framework": "llama-benchy"}}
    assert profiles["bad"].problem == "not a YAML mapping"
    assert out.tuning == ["vllm/shape-1"]
    assert out.problems == []


def test_without_a_matching_manifest_entry_a_registry_has_recipes_only() -> None:
    out = read_registry(TREE, "other-recipes")
    assert out.layout.mods is None
    assert out.recipes == []
    assert out.problems[0].path == MANIFEST_PATH
    assert "not a safe relative path" in out.problems[0].message
    assert manifest_subpaths(MANIFEST) == [
        "bench",
        "official-recipes",
        "other-recipes",
        "shared/mods",
        "tune",
    ]
    assert manifest_subpaths(b"&a [*a]") == []


def test_slugs_are_subdomains_and_never_shared() -> None:
    assert slug("qwen3.5-27b-fp8") == "qwen3.5-27b-fp8"
    names = ["qwen/vllm/qwen-a", "qwen-vllm-qwen-a", "Qwen-A", "qwen-a", "x" * 200, "x" * 201, "..", "a..b"]
    slugs = [slug(n) for n in names]
    assert len(set(slugs)) == len(names)
    assert all(len(s) <= 63 and s[0].isalnum() and s[-1].isalnum() for s in slugs)
    assert slug("a..b") != "a..b"
