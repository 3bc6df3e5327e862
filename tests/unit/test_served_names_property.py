"""One name everywhere (issue 24): over generated workloads, recipes and defaults, the name the
engine is started with is the name every reader routes by and the name the gateway rewrites to.

Each example is a workload (``spec.model`` or not, ``servedName`` or not, aliases, engine
arguments, declared capabilities, a namespace) with or without a Recipe (``defaults
.served_model_name`` or not, a ``command`` template that uses ``{served_model_name}``, hard-codes
a ``--served-model-name`` of its own, or says nothing about it; ``--task embed`` or not; one or
two nodes). It goes through the operator's own pure path, the workload planner (``plan()``: the
recipe resolved, the JobSets rendered, the status to write), and then:

- the **engine's name**: the rendered leader (and worker) command parsed by the engine stand-in's
  ``vllm serve`` parser (``sparkrun_testbed.engine.parse_args``): exactly one served name;
- ``status.model`` the planner writes names it (and the model the engine loads);
- the **gateway** (``gateway/kube.py`` ``workload_entry`` on the object as stored: the spec as
  the apiserver keeps it, the planner's status) routes by exactly that name and the workload's
  aliases, and every one of those names resolves to a workload whose ``served_name`` (what
  ``openai_api.forward`` and ``translated.forward`` write into the upstream body) is the
  engine's name; the workload's own ``metadata.name`` routes only when it is one of them;
- the operator's name index (``plan/names.py`` ``claim_of``) claims the same names;
- the daemon API's endpoint row (``ops/executors/endpoints.py`` ``endpoint_entry``) names the same;
- capabilities: declared ones win; otherwise the gateway routes embeddings exactly when the engine
  runs as a pooling model (the stand-in's reading of the same arguments).
"""

from __future__ import annotations

import datetime as dt
import shlex
from dataclasses import dataclass
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.gateway.kube import build_entries, workload_entry
from sparkrun_operator.gateway.routing import EMBEDDING, RoutingTable
from sparkrun_operator.ops.executors.endpoints import endpoint_entry
from sparkrun_operator.plan.names import claim_of
from sparkrun_operator.plan.workload import Observation, ObservedRecipe, Plan, plan
from sparkrun_testbed.engine import ServeArgs, parse_args

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
RECIPE = "names-recipe"

#: Few names, so that served names, aliases, recipe names and workload names collide often.
NAMES = ("served-x", "wl-x", "qwen3-8b", "Qwen/Qwen3-8B", "org/model:v1.5", "alias_1", "a b")
MODELS = ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct")
WORKLOAD_NAMES = ("wl-x", "served-x", "qwen3-8b")
NAMESPACES = ("default", "ml", "team-b")
#: ``defaults.served_model_name``: absent (the key left out), empty, a number, or a name.
RECIPE_SERVED: tuple[Any, ...] = (None, "", 7, *NAMES)
TEMPLATES: tuple[str | None, ...] = (
    None,  # no command: the default flags
    "vllm serve {model} --port {port}",
    "vllm serve {model} --served-model-name {served_model_name} --port {port}",
    "vllm serve {model} --served_model_name={served_model_name} --task embed",
    "vllm serve {model} --served-model-name literal-name other-name --max-num-seqs 8",
    "vllm serve {model} --task embed --served-model-name {served_model_name}",
    "vllm serve {model} --runner pooling",
    "vllm serve {model} --task=embedding --tensor-parallel-size {tensor_parallel}",
)
ENGINE_ARGS: tuple[tuple[str, ...], ...] = (
    (),
    ("--enable-chunked-prefill",),
    ("--task", "embed"),
    ("--task=embedding",),
    ("--runner", "pooling"),
    ("--task", "generate"),
    ("--convert", "embed"),
    ("--runner=generate",),
)
DECLARED: tuple[tuple[str, ...], ...] = (
    (),
    ("text-generation",),
    ("embedding",),
    ("text-generation", "embedding"),
)


@dataclass(frozen=True)
class Case:
    """One workload, its namespace, and the Recipe it names (``None``: no recipe)."""

    name: str
    namespace: str
    spec: dict[str, Any]
    recipe: dict[str, Any] | None


@st.composite
def _recipes(draw: st.DrawFn) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    served = draw(st.sampled_from(RECIPE_SERVED))
    if served is not None:
        defaults["served_model_name"] = served
    if draw(st.booleans()):
        defaults["max_model_len"] = 4096
    recipe: dict[str, Any] = {"model": draw(st.sampled_from(MODELS)), "runtime": "vllm", "defaults": defaults}
    template = draw(st.sampled_from(TEMPLATES))
    if template is not None:
        recipe["command"] = template
    if draw(st.integers(0, 3)) == 0:  # a two-node recipe: the worker's command line counts too
        recipe.update(min_nodes=2, max_nodes=2)
        defaults.update(tensor_parallel=1, pipeline_parallel=2)
    return recipe


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    recipe = draw(st.none() | _recipes())
    spec: dict[str, Any] = {}
    if recipe is None or draw(st.booleans()):
        model: dict[str, Any] = {"name": draw(st.sampled_from(MODELS))}
        if draw(st.booleans()):
            model["servedName"] = draw(st.sampled_from(NAMES))
        aliases = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
        if aliases:
            model["aliases"] = aliases
        spec["model"] = model
    if recipe is not None:
        spec["recipe"] = {"name": RECIPE}
    args = draw(st.sampled_from(ENGINE_ARGS))
    if args:
        spec["engine"] = {"args": list(args)}
    declared = draw(st.sampled_from(DECLARED))
    if declared:
        spec["routing"] = {"capabilities": list(declared)}
    return Case(
        name=draw(st.sampled_from(WORKLOAD_NAMES)),
        namespace=draw(st.sampled_from(NAMESPACES)),
        spec=spec,
        recipe=recipe,
    )


def _observation(case: Case, spec: InferenceWorkloadSpec, status: InferenceWorkloadStatus) -> Observation:
    recipe = None
    if case.recipe is not None:
        recipe = ObservedRecipe(name=RECIPE, spec=RecipeSpec.model_validate(case.recipe))
    return Observation(
        name=case.name,
        namespace=case.namespace,
        uid=f"uid-{case.name}",
        generation=1,
        spec=spec,
        status=status,
        now=NOW,
        created=NOW,
        recipe=recipe,
    )


def _engines(planned: Plan) -> list[ServeArgs]:
    """Every engine command line the planned JobSets start, as the engine parses it."""
    out = []
    jobsets = [a for a in planned.apply if a["kind"] == "JobSet"]
    assert jobsets, f"no JobSet planned: {planned.status.conditions}"
    for jobset in jobsets:
        for job in jobset["spec"]["replicatedJobs"]:
            container = job["template"]["spec"]["template"]["spec"]["containers"][0]
            if container["command"] == ["vllm", "serve"]:
                out.append(parse_args(["serve", *container["args"]]))
                continue
            # the worker: `exec vllm serve ARGS --node-rank $((JOB_COMPLETION_INDEX+1)) --headless`
            tokens = shlex.split(container["args"][0])
            assert tokens[:3] == ["exec", "vllm", "serve"], tokens
            rank = tokens.index("--node-rank") + 1
            tokens[rank] = "1"
            out.append(parse_args(["serve", *tokens[3:]]))
    return out


def _stored(case: Case, spec: InferenceWorkloadSpec, status: InferenceWorkloadStatus) -> dict[str, Any]:
    """The InferenceWorkload as the apiserver holds it once the operator wrote its status."""
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceWorkload",
        "metadata": {
            "name": case.name,
            "namespace": case.namespace,
            "uid": f"uid-{case.name}",
            "creationTimestamp": NOW.isoformat().replace("+00:00", "Z"),
        },
        "spec": spec.to_wire(),
        "status": status.to_wire(),
    }


def _aliases(case: Case, served: str) -> tuple[str, ...]:
    """What the workload asks for: its aliases, minus its served name, in order."""
    aliases = (case.spec.get("model") or {}).get("aliases") or []
    return tuple(a for a in dict.fromkeys(aliases) if a != served)


_ISSUE_SCENARIO = Case(
    name="wl-x",
    namespace="default",
    spec={"recipe": {"name": RECIPE}},
    recipe={"model": "Qwen/Qwen3-8B", "runtime": "vllm", "defaults": {"served_model_name": "served-x"}},
)
_EMBEDDING_RECIPE = Case(
    name="embed-x",
    namespace="ml",
    spec={"recipe": {"name": RECIPE}, "model": {"name": "Qwen/Qwen3-0.6B", "aliases": ["e5"]}},
    recipe={
        "model": "Qwen/Qwen3-8B",
        "runtime": "vllm",
        "defaults": {"served_model_name": "served-embed"},
        "command": "vllm serve {model} --task embed --served-model-name {served_model_name}",
    },
)


#: The last of a repeated flag wins (argparse, as vLLM parses): the workload's own arguments come
#: after the recipe's, so this engine generates text although the recipe says ``--task embed``.
_LAST_FLAG_WINS = Case(
    name="wl-x",
    namespace="team-b",
    spec={"recipe": {"name": RECIPE}, "engine": {"args": ["--task", "generate"]}},
    recipe={
        "model": "Qwen/Qwen3-8B",
        "runtime": "vllm",
        "defaults": {"served_model_name": "served-x"},
        "command": "vllm serve {model} --task embed",
    },
)
_CONVERTED_TO_POOLING = Case(
    name="wl-x",
    namespace="default",
    spec={
        "model": {"name": "Qwen/Qwen3-8B", "servedName": "served-x"},
        "engine": {"args": ["--convert", "embed"]},
    },
    recipe=None,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_cases())
@example(_ISSUE_SCENARIO)
@example(_EMBEDDING_RECIPE)
@example(_LAST_FLAG_WINS)
@example(_CONVERTED_TO_POOLING)
def test_the_engine_name_is_the_routed_name_everywhere(case: Case) -> None:
    spec = InferenceWorkloadSpec.model_validate(case.spec)
    planned = plan(_observation(case, spec, InferenceWorkloadStatus()))
    assert planned.effective is not None, planned.status.conditions

    # the engine: one served name, the same on every rank
    engines = _engines(planned)
    assert {e.served_model_names for e in engines} == {(planned.effective.served_name,)}, engines
    served = engines[0].served_model_names[0]
    aliases = _aliases(case, served)
    pooling = engines[0].pooling

    # what the operator writes (and writes again on the next pass)
    recorded = planned.status.model
    assert recorded is not None, "the planner wrote no status.model"
    assert (recorded.name, recorded.served_name) == (engines[0].model, served)
    assert tuple(recorded.aliases) == aliases
    again = plan(_observation(case, spec, planned.status))
    assert again.status.model == recorded

    # the gateway: routes exactly these names, each one rewritten to the engine's name
    obj = _stored(case, spec, planned.status)
    entry = workload_entry(obj, [])
    assert (entry.served_name, entry.aliases) == (served, aliases)
    table = RoutingTable.build([entry], 1)
    assert set(table.by_name) == {served, *aliases}
    for name in (served, *aliases):
        routed = table.lookup(name)
        assert routed is not None, name
        assert routed.served_name == served
    if case.name not in (served, *aliases):
        assert table.lookup(case.name) is None, f"{case.name} routes but is no name of the workload"

    # capabilities: declared ones, else what the engine runs as
    declared = set((case.spec.get("routing") or {}).get("capabilities") or ())
    if declared:
        assert entry.capabilities == declared
    else:
        assert (EMBEDDING in entry.capabilities) == pooling, (entry.capabilities, engines[0])
    assert set(recorded.capabilities) == set(entry.capabilities)

    # the operator's name index and the daemon API name the same
    claim = claim_of(obj)
    assert claim is not None
    assert claim.names == (served, *aliases)
    recipes = {RECIPE: RecipeSpec.model_validate(case.recipe)} if case.recipe is not None else {}
    row = endpoint_entry(obj, recipes)
    assert row["served_model_name"] == served
    assert row["actual_models"] == [served, *aliases]
    assert row["model"] == engines[0].model
    assert (EMBEDDING in row["capabilities"]) == (EMBEDDING in entry.capabilities)


def test_a_recipe_workload_the_operator_has_not_resolved_is_routed_by_no_name() -> None:
    """Before the operator resolved its Recipe (no ``status.model`` yet), a recipe-based workload
    is routed by no name (not its own name, not the model's): a guess would be a name its engine
    may not serve."""
    case = _ISSUE_SCENARIO
    spec = InferenceWorkloadSpec.model_validate(case.spec)
    obj = _stored(case, spec, InferenceWorkloadStatus())
    table = RoutingTable.build(build_entries([obj], []), 1)
    assert dict(table.by_name) == {}
