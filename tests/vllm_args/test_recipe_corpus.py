"""The real vLLM parser of the default engine release accepts the engine command the operator
renders for every recipe of the public registry corpus (``tests/data/recipe-registry``) that
targets upstream vLLM: the leader's command, and a multi-node recipe's worker command.

A recipe written for a vLLM fork's own flags is the recipe's business, not the operator's: it
is listed in :data:`FORKS` with the reason, and the test checks that upstream vLLM does refuse it
(so the list cannot outlive its reason). Run by ``make test-vllm-args`` (see ``conftest.py``).
"""

from __future__ import annotations

import itertools
import os
import shlex
from typing import Any

import pytest

from tests.recipe_corpus import recipe_files, serve
from tests.vllm_args.parser import parse_commands

PYTHON = os.environ.get("SPARKRUN_VLLM_PYTHON", "")

#: Recipes that pass flags upstream vLLM does not have, and why (docs/recipes.md).
FORKS = {
    "experimental-recipes/eugr-vllm/openai-gpt-oss-120b-vllm.yaml": (
        "--mxfp4-backend and --mxfp4-layers are flags of the vLLM fork in its container "
        "(sparkarena/spark-vllm-docker:mxfp4)"
    ),
}

SERVED = {path: serve(path) for path in recipe_files()}
#: path -> the argument lists after `vllm` (leader, then a worker on multi-node recipes).
CASES = {
    path: [["serve", *s.argv[2:]]] + ([["serve", *s.worker_argv[2:]]] if s.worker_argv else [])
    for path, s in SERVED.items()
    if s.rendered
}


def _container_files(commands: list[list[str]]) -> set[str]:
    """Relative ``--chat-template`` files: the recipe's container provides them (sparkrun mods put
    them there, e.g. ``unsloth.jinja``), and vLLM's parser checks that a path-like value exists."""
    found = set()
    for command in commands:
        for flag, value in itertools.pairwise(command):
            if flag == "--chat-template" and not set("{}\n") & set(value) and not value.startswith("/"):
                found.add(value)
    return found


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every command of every rendered recipe, parsed by vLLM in one process, in a directory that
    holds a stand-in for each file the recipes' containers provide."""
    flat = [command for commands in CASES.values() for command in commands]
    cwd = tmp_path_factory.mktemp("container-files")
    for name in _container_files(flat):
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text("{{ messages }}\n")
    results, stderr = parse_commands(PYTHON, flat, cwd=cwd)
    out: dict[str, Any] = {"_stderr": stderr}
    at = 0
    for path, commands in CASES.items():
        out[path] = results[at : at + len(commands)]
        at += len(commands)
    return out


def test_the_corpus_renders() -> None:
    assert len(CASES) == 34
    assert set(FORKS) <= set(CASES)
    flat = [command for commands in CASES.values() for command in commands]
    assert _container_files(flat) == {"unsloth.jinja", "fixed_chat_template.jinja"}


@pytest.mark.parametrize("path", sorted(set(CASES) - set(FORKS)))
def test_upstream_vllm_accepts_the_recipe(path: str, verdicts: dict[str, Any]) -> None:
    for command, verdict in zip(CASES[path], verdicts[path], strict=True):
        assert verdict["ok"], f"vLLM refused {shlex.join(command)}: {verdict}\n{verdicts['_stderr'][-3000:]}"
        assert verdict["model"] == command[1]


@pytest.mark.parametrize("path", sorted(FORKS))
def test_a_fork_recipe_is_refused_by_upstream_vllm(path: str, verdicts: dict[str, Any]) -> None:
    assert not verdicts[path][0]["ok"], f"upstream vLLM now accepts it: drop it from FORKS ({FORKS[path]})"
