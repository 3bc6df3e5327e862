"""The pure parts of ``bench.registry``: the registry repository it serves (N recipes made from
the vendored public-registry corpus, a few mods and benchmark profiles, sparkrun's manifest),
the one-recipe change, the apiserver writes grouped by who made them, and the summary rows."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import _common

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "recipe-registry"
MANIFEST = """\
registries:
  - name: bench
    description: bench.registry
    recipes: recipes
    mods: mods
    benchmarks: benchmarks
"""
#: The mods the corpus names most (written as directories with a run.sh), and extra files.
MODS = ("fix-qwen3.5-chat-template", "fix-qwen3-coder-next", "fix-gemma4-tool-parser", "drop-caches")
PROFILES = ("spark-arena-v2", "short-prompts")
_MODEL = re.compile(r"^model: *(\S+) *$", re.M)


def corpus() -> list[tuple[str, str]]:
    """The 37 recipe files of the corpus: ``(stem, text)``, sorted by path."""
    files = sorted(CORPUS.rglob("*.yaml"))
    if not files:
        raise SystemExit(f"no recipe corpus under {CORPUS}")
    return [(p.stem, p.read_text()) for p in files]


def model_of(index: int, revision: int = 0) -> str:
    return f"bench-org/model-{index:05d}" + (f"-rev{revision}" if revision else "")


def recipe_text(text: str, index: int, revision: int = 0) -> str:
    """A corpus recipe whose model is ``model_of(index, revision)`` (so every file differs)."""
    changed, count = _MODEL.subn(f"model: {model_of(index, revision)}", text, count=1)
    return changed if count else f"model: {model_of(index, revision)}\n{text}"


def recipe_path(stem: str, index: int) -> str:
    # NB: a directory per 100 recipes, as registries group by family; every stem unique
    return f"recipes/group-{index // 100:03d}/{stem}-{index:05d}.yaml"


def repository(size: int, source: Sequence[tuple[str, str]] | None = None) -> dict[str, bytes]:
    """The files of a registry of ``size`` recipes (path -> bytes)."""
    items = list(source or corpus())
    files: dict[str, bytes] = {".sparkrun/registry.yaml": MANIFEST.encode()}
    for i in range(size):
        stem, text = items[i % len(items)]
        files[recipe_path(stem, i)] = recipe_text(text, i).encode()
    for mod in MODS:
        files[f"mods/{mod}/run.sh"] = f"#!/bin/sh\nset -e\necho applying {mod}\n".encode()
        files[f"mods/{mod}/patch.txt"] = (f"# {mod}\n" + "x" * 2048 + "\n").encode()
    for profile in PROFILES:
        files[f"benchmarks/{profile}.yaml"] = (
            f"framework: llama-benchy\nargs:\n  pp: [512, 2048]\n  tg: [128]\n  depth: [0]\n# {profile}\n"
        ).encode()
    return files


def changed_one(
    size: int, revision: int, source: Sequence[tuple[str, str]] | None = None
) -> tuple[str, bytes]:
    """The file that changes in the ``revision``-th one-recipe commit and its new bytes: the
    model of one recipe (a different recipe each revision)."""
    items = list(source or corpus())
    index = (revision * 7) % size
    stem, text = items[index % len(items)]
    return recipe_path(stem, index), recipe_text(text, index, revision).encode()


def who_wrote(writes: Mapping[tuple[str, str, str], float]) -> dict[str, float]:
    """apiserver writes (resource, subresource, verb) -> count, grouped: the registry sync's own
    (Recipes and ConfigMaps created, replaced or deleted: POST, PUT, DELETE; the registry's
    status), the Recipe controller's that follow (its status and kopf's PATCH of a Recipe), the
    bench's own (a RecipeRegistry created or its sync requested, a namespace), the rest."""
    out = {"recipe_writes": 0.0, "configmap_writes": 0.0, "registry_status": 0.0}
    out |= {"recipe_status_followon": 0.0, "recipe_patch_followon": 0.0, "bench_requests": 0.0, "other": 0.0}
    for (resource, subresource, verb), count in writes.items():
        if resource == "recipes" and not subresource and verb == "PATCH":
            out["recipe_patch_followon"] += count
        elif resource == "recipes" and not subresource:
            out["recipe_writes"] += count
        elif resource == "recipes" and subresource == "status":
            out["recipe_status_followon"] += count
        elif resource == "configmaps" and not subresource:
            out["configmap_writes"] += count
        elif resource == "reciperegistries" and subresource == "status":
            out["registry_status"] += count
        elif resource == "reciperegistries" or (resource, verb) == ("namespaces", "POST"):
            out["bench_requests"] += count
        else:
            out["other"] += count
    return out


def flat(writes: Mapping[tuple[str, str, str], float]) -> dict[str, float]:
    """``{"resource/subresource/VERB": count}`` (for the JSON)."""
    return {"/".join(key): count for key, count in sorted(writes.items())}


def row(case: str, size: int, path: str, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One table row: wall seconds (p50/p99/min/max), median writes and CPU seconds."""
    walls = [float(s["wall_s"]) for s in samples]
    writes = [float(s.get("writes", 0.0)) for s in samples]
    cpu = [float(s.get("cpu_s", float("nan"))) for s in samples]
    return {
        "case": case,
        "n_recipes": size,
        "path": path,
        "samples": len(samples),
        "p50_s": _common.median(walls),
        "p99_s": _common.pct(walls, 0.99),
        "min_s": min(walls) if walls else float("nan"),
        "max_s": max(walls) if walls else float("nan"),
        "writes_p50": _common.median(writes),
        "cpu_s_p50": _common.median(cpu),
    }


def ratios(ours: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per round ``ours / other`` wall time: min, median, max (rounds paired by position)."""
    pairs = [
        float(a["wall_s"]) / float(b["wall_s"]) for a, b in zip(ours, other, strict=False) if b["wall_s"]
    ]
    if not pairs:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan")}
    return {"min": min(pairs), "median": _common.median(pairs), "max": max(pairs)}
