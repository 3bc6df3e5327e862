"""The vendored recipe corpus (``tests/data/recipe-registry``, see its SOURCE.md) as the operator
serves it: each recipe file imported as ``catalog.import`` imports it, resolved for a workload
that names it and changes nothing, and rendered to the leader's engine container.

Used by ``tests/unit/recipe/test_registry_corpus.py`` (differential, against the reference
sparkrun package) and ``tests/vllm_args/test_recipe_corpus.py`` (the real vLLM parser).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.recipes import parse_recipe
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render.workload import ServingInputs, render_jobset

CORPUS = Path(__file__).resolve().parent / "data" / "recipe-registry"
NAMESPACE = "corpus"


def recipe_files() -> list[str]:
    """Every recipe of the corpus, by its path relative to the corpus root."""
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.yaml"))


@dataclass(frozen=True)
class Served:
    """What the operator makes of one recipe file."""

    path: str
    #: ``catalog.import``'s refusal, else None.
    parse_error: str | None = None
    #: The resolution's error messages (the recipe is refused), else empty.
    refused: tuple[str, ...] = ()
    #: The leader's engine ``command`` + ``args`` (``["vllm", "serve", model, ...]``).
    argv: tuple[str, ...] = ()
    #: A multi-node recipe's worker command for node rank 1 (its shell line's words), else empty.
    worker_argv: tuple[str, ...] = ()
    #: The leader's literal environment (name -> value).
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    #: The recipe's model and ``defaults.served_model_name`` (as written).
    model: str | None = None
    served_default: str | None = None
    min_nodes: int = 1

    @property
    def rendered(self) -> bool:
        return self.parse_error is None and not self.refused


def serve(path: str) -> Served:
    """Import, resolve and render one corpus recipe for a workload that only names it."""
    return serve_text(path, (CORPUS / path).read_text())


def serve_text(path: str, content: str) -> Served:
    """Import, resolve and render recipe YAML ``content`` for a workload that only names it."""
    try:
        name, spec = parse_recipe(content)
    except Invalid as error:
        return Served(path, parse_error=error.detail)
    workload = InferenceWorkloadSpec.model_validate({"recipe": {"name": name}})
    resolution = resolve(workload=workload, recipe=spec)
    served_default = (spec.defaults or {}).get("served_model_name")
    common = {
        "model": spec.model,
        "served_default": None if served_default is None else str(served_default),
        "min_nodes": spec.min_nodes,
    }
    if resolution.spec is None:
        return Served(path, refused=tuple(i.message for i in resolution.errors), **common)
    inputs = ServingInputs(spec=resolution.spec, scheduling=workload.scheduling, placement=None, cache=None)
    jobset = render_jobset(namespace=NAMESPACE, workload="wl", inputs=inputs, replica=0, suspend=False)
    jobs = [
        job["template"]["spec"]["template"]["spec"]["containers"] for job in jobset["spec"]["replicatedJobs"]
    ]
    engines = [c for containers in jobs for c in containers if c["name"] == "vllm"]
    engine, workers = engines[0], engines[1:]
    return Served(
        path,
        argv=(*engine["command"], *engine["args"]),
        worker_argv=tuple(_worker_words(workers[0])) if workers else (),
        env={e["name"]: e["value"] for e in engine.get("env", []) if "value" in e},
        image=engine["image"],
        **common,
    )


def _worker_words(container: dict[str, Any]) -> list[str]:
    """The words of a worker's ``/bin/sh -c "exec vllm serve ..."`` line for node rank 1."""
    assert container["command"] == ["/bin/sh", "-c"], container["command"]
    line = re.sub(r"\$\(\(JOB_COMPLETION_INDEX\+(\d+)\)\)", lambda m: str(int(m[1])), container["args"][0])
    assert "$" not in line, f"a shell expansion left in {line!r}"
    words = shlex.split(line)
    assert words[:3] == ["exec", "vllm", "serve"], words
    return words[1:]
