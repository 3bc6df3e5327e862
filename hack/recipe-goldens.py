#!/usr/bin/env python3
"""Write tests/unit/recipes/goldens.json with the reference sparkrun package.

Run it with an interpreter that can import sparkrun (Python >= 3.12), never the project venv:

    python3.12 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install sparkrun-0.4.1-py3-none-any.whl
    /tmp/refvenv/bin/python hack/recipe-goldens.py

For every ``tests/unit/recipes/*.yaml`` it loads the recipe the way a launch does
(``Recipe.load(path, resolve=False)`` then ``recipe.resolve(overrides)``, as in
``sparkrun.api._resolve.resolve_recipe``) and records sparkrun's ``generate_intent_id`` and
``derive_recipe_fingerprint`` for no overrides and for each override set in ``OVERRIDES``
below. ``tests/unit/test_recipe_identity.py`` asserts that
``sparkrun_operator.recipe.identity`` reproduces every entry; it also reruns this script
when ``SPARKRUN_REFERENCE_PYTHON`` names such an interpreter and compares the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "tests" / "unit" / "recipes"

# Launch override sets per recipe (file stem), each hashed in addition to "no overrides".
# Values are JSON types so they survive goldens.json unchanged.
OVERRIDES: dict[str, list[dict[str, Any]]] = {
    "minimal": [
        {"tensor_parallel": 2, "port": 9000},
        {"served_model_name": "tiny", "max_model_len": 4096},
    ],
    "served-model-name": [
        {"served_model_name": "other-name"},
        {"port": None},
        {"gpu_memory_utilization": 0.95, "max_model_len": 16384},
    ],
    "parallelism": [
        {"tensor_parallel": 8, "port": 9001},
        {"tensor_parallel": "2"},
        {"pipeline_parallel": 1, "data_parallel": 2, "context_parallel": None},
    ],
    "container-env": [
        {"port": 8100, "tensor_parallel": 1},
    ],
    "command-template": [
        {"speculative_config.num_speculative_tokens": 8},
        {"speculative_config": '{"method": "eagle"}', "speculative_config.model": "yuhuili/EAGLE3"},
        {"compilation_config.level": 0},
        {"distributed_executor_backend": "ray", "port": 8123},
    ],
    "model-revision": [
        {"model_revision": "main"},
        {"max_num_seqs": 32},
    ],
    "model-revision-declared": [
        {"port": 8001},
    ],
    "nodes": [
        {"distributed_executor_backend": "mp"},
        {"tensor_parallel": 4, "port": 8005},
    ],
    "hooks": [
        {"port": 8001},
    ],
    "metadata": [
        {"port": 8001},
    ],
    "runtime-config": [
        {"max_num_seqs": 64, "enforce_eager": True},
    ],
    "per-host": [
        {"tensor_parallel": 1},
    ],
}


def compute(recipes: Path) -> dict[str, Any]:
    from sparkrun.core.recipe import Recipe
    from sparkrun.core.recipe_items import registered_recipe_items
    from sparkrun.orchestration.job_metadata import derive_recipe_fingerprint, generate_intent_id

    if list(registered_recipe_items()):
        raise SystemExit("recipe-item plugins are registered; goldens assume none")
    paths = sorted(recipes.glob("*.yaml"))
    stems = {path.stem for path in paths}
    missing = sorted(set(OVERRIDES) - stems)
    if missing:
        raise SystemExit(f"OVERRIDES names recipes that do not exist: {missing}")
    cases = []
    for path in paths:
        for overrides in [None, *OVERRIDES.get(path.stem, [])]:
            recipe = Recipe.load(path, resolve=False)
            recipe.resolve(overrides)
            cases.append(
                {
                    "recipe": path.name,
                    "overrides": overrides,
                    "runtime": recipe.runtime,
                    "intent_id": generate_intent_id(recipe, overrides),
                    "recipe_revision": derive_recipe_fingerprint(recipe, overrides),
                }
            )
    return {"generator": "hack/recipe-goldens.py", "sparkrun": version("sparkrun"), "cases": cases}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", type=Path, default=RECIPES, help="directory of *.yaml recipes")
    parser.add_argument("--out", type=Path, default=RECIPES / "goldens.json", help="output file")
    args = parser.parse_args()
    goldens = compute(args.recipes)
    args.out.write_text(json.dumps(goldens, indent=2) + "\n")
    print(f"wrote {len(goldens['cases'])} cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
