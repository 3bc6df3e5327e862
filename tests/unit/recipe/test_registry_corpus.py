"""Real recipes render exactly as sparkrun renders them (issue 24, item 4).

The corpus is the public Spark Arena recipe registry (``tests/data/recipe-registry``, 37
recipes; its SOURCE.md names the commit). Each recipe is imported as ``catalog.import`` imports
it, resolved for a workload that names it and changes nothing, and rendered to the leader's
engine container (``tests/recipe_corpus.py``). The reference sparkrun package (one interpreter
process for the whole corpus) loads the same files and renders ``Recipe.render_command`` over
``build_config_chain({})``: the engine argv must equal that command, apart from the differences
docs/recipes.md lists ("Differences from sparkrun's rendering"), which :data:`OPERATOR_FLAGS`
and :data:`OPERATOR_ENV` name one by one. A handful of synthetic recipes (:data:`SYNTHETIC`)
pin the template rules the corpus does not exercise (brace escapes, nested references, value
types) against the reference the same way.

Before the fixes of issue 24: 36 of the 37 parsed (a numeric env value was refused), 33
rendered, and the one with a JSON ``hf_overrides`` default lost a closing brace.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.workload import ENGINE_PORT
from tests.recipe_corpus import CORPUS, Served, recipe_files, serve, serve_text
from tests.reference import reference_python

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "recipes.md"
FILES = recipe_files()
SERVED = {path: serve(path) for path in FILES}
SGLANG = [p for p in FILES if yaml.safe_load((CORPUS / p).read_text()).get("runtime") == "sglang"]

#: Flags the operator renders itself (docs/recipes.md, "Differences from sparkrun's rendering"),
#: canonical spelling. Everything else of a recipe's command reaches the engine verbatim, in order.
OPERATOR_FLAGS = (
    "--host",
    "--port",
    "--served-model-name",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--max-model-len",
    "--gpu-memory-utilization",
    "--revision",
    "--enable-sleep-mode",
    "--distributed-executor-backend",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
)
_SPELLINGS = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}
_RENDEZVOUS = ("--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--master-port")
#: Environment the operator adds to every engine (a literal value; VLLM_HOST_IP is a fieldRef).
OPERATOR_ENV = ("VLLM_HOST_IP", "VLLM_ENGINE_READY_TIMEOUT_S")

# Runs in the reference interpreter: every recipe (a corpus path or a synthetic document) loaded
# as a launch loads it and rendered by Recipe.render_command over the config chain of no overrides.
_REFERENCE = r"""
import json, sys, tempfile
from importlib.metadata import version
from pathlib import Path
from sparkrun.core.recipe import Recipe
root, work = Path(sys.argv[1]), Path(tempfile.mkdtemp())
out = {"version": version("sparkrun"), "recipes": {}}
for key, doc in json.loads(sys.stdin.read()).items():
    path = root / key
    if doc is not None:
        path = work / (str(len(out["recipes"])) + ".yaml")
        path.write_text(json.dumps(doc))
    try:
        recipe = Recipe.load(path, resolve=False).resolve({})
        out["recipes"][key] = {
            "runtime": recipe.runtime,
            "command": recipe.render_command(recipe.build_config_chain({})),
            "env": dict(recipe.env),
            "container": recipe.container,
        }
    except Exception as exc:
        out["recipes"][key] = {"error": repr(exc)}
print("REFERENCE " + json.dumps(out))
"""

_BASE: dict[str, Any] = {"recipe_version": "2", "model": "org/m", "runtime": "vllm", "container": "img:1"}
#: Template rules the corpus does not reach, each a recipe rendered by both sides.
SYNTHETIC: dict[str, dict[str, Any]] = {
    "json-literal-in-template": {
        "command": 'vllm serve {model} --hf-overrides \'{"a": {"b": 1}}\' --c \'{"k": 1}\''
    },
    "escaped-template": {
        "command": 'vllm serve {model} --hf-overrides \'{{"a": {{"b": {max_num_seqs}}}}}\'',
        "defaults": {"max_num_seqs": 4},
    },
    "escaped-defaults-value": {
        "command": "vllm serve {model} --speculative-config '{spec}' --x '{raw}'",
        "defaults": {"spec": '{{"method": "ngram"}}', "raw": '{"a": {"b": 1}}'},
    },
    "nested-reference": {
        "command": "vllm serve {model} --x {base} --y '{js}'",
        "defaults": {"base": "http://h:{port}/{model}", "port": 8000, "js": '{"m": "{model}"}'},
    },
    "value-types": {
        "command": "vllm serve {model} --a {t} --b {f} --c {i} --d {x} --e {big} --g {tiny}",
        "defaults": {"t": True, "f": False, "i": 3, "x": 0.5, "big": 2**40, "tiny": 1e-05},
    },
    "env-value-types": {
        "command": "vllm serve {model}",
        "env": {"A": 1, "B": True, "C": 1.5, "D": "x", "E": '{"a": {"b": 1}}', "F": "{{x}}"},
    },
    "non-identifier-spans": {
        "command": "vllm serve {model} --a '{ model }' --b '{\"k\": \"v\"}' --c {dot.key}",
        "defaults": {"dot.key": "d"},
    },
    "broken-continuation": {"command": "vllm serve {model} \\  \n  --enforce-eager \\\n  --x 1"},
}


def _shell_words(command: str) -> list[str]:
    """The words bash makes of a rendered command (continuations joined; no expansion used)."""
    text = re.sub(r"\\[ \t]*\n", "", command.strip())
    assert not re.search(r"[$`]", text), f"a shell expansion the comparison does not model: {text!r}"
    return shlex.split(text)


def _flags(words: list[str]) -> tuple[str, list[tuple[str, tuple[str, ...]]]]:
    """The model and each ``(canonical flag, words)`` of a ``vllm serve`` command line."""
    assert words[:2] == ["vllm", "serve"], words
    model, rest, out = words[2], words[3:], []
    i = 0
    while i < len(rest):
        word = rest[i]
        assert word.startswith("-"), f"a positional word {word!r} after the model"
        name = word.split("=", 1)[0]
        name = _SPELLINGS.get(name, "--" + name[2:].replace("_", "-") if name.startswith("--") else name)
        takes = "=" not in word and i + 1 < len(rest) and not rest[i + 1].startswith("-")
        out.append((name, tuple(rest[i : i + 1 + takes])))
        i += 1 + takes
    return model, out


def _value(words: tuple[str, ...]) -> str | None:
    if "=" in words[0]:
        return words[0].split("=", 1)[1]
    return words[1] if len(words) > 1 else None


def _number(text: str | None) -> float | None:
    return None if text is None else float(text)


def assert_renders_as_reference(ours: Served, reference: dict[str, Any]) -> None:
    """Our leader's engine command and env equal sparkrun's, apart from the documented differences."""
    assert "error" not in reference, reference
    assert ours.rendered, (ours.parse_error, ours.refused)
    their_model, theirs = _flags(_shell_words(reference["command"]))
    our_model, mine = _flags(list(ours.argv))
    assert our_model == their_model
    # 1. The recipe's own flags: verbatim, in the recipe's order.
    assert [w for n, w in mine if n not in OPERATOR_FLAGS] == [
        w for n, w in theirs if n not in OPERATOR_FLAGS
    ]
    # 2. The flags the operator renders: the recipe's values where it gives them.
    their_owned = {n: _value(w) for n, w in theirs if n in OPERATOR_FLAGS}
    our_owned = {n: _value(w) for n, w in mine if n in OPERATOR_FLAGS}
    assert len(our_owned) == len([n for n, _ in mine if n in OPERATOR_FLAGS]), "an operator flag twice"
    assert our_owned.pop("--host") == "0.0.0.0"
    assert our_owned.pop("--port") == str(ENGINE_PORT)
    assert our_owned.pop("--served-model-name") == (ours.served_default or ours.model)
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size"):
        assert our_owned.pop(flag) == their_owned.get(flag, "1"), flag
    for flag in ("--max-model-len", "--gpu-memory-utilization"):
        assert _number(our_owned.pop(flag, None)) == _number(their_owned.get(flag)), flag
    assert not set(_RENDEZVOUS) & set(their_owned), "render_command gives no multi-node rendezvous"
    if ours.min_nodes > 1:
        assert our_owned.pop("--distributed-executor-backend") == "mp"
        assert our_owned.pop("--nnodes") == str(ours.min_nodes)
        assert our_owned.pop("--node-rank") == "0"
        assert {our_owned.pop("--master-addr"), our_owned.pop("--master-port")} != {None}
    if "--revision" in their_owned:
        assert our_owned.pop("--revision") == their_owned["--revision"]
    assert our_owned == {}, f"operator flags the docs do not explain: {our_owned}"
    assert set(their_owned) <= {
        "--host", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
        "--max-model-len", "--gpu-memory-utilization", "--revision",
    }, their_owned  # fmt: skip
    # 3. The environment: the recipe's, as sparkrun renders each value, plus the operator's own.
    assert {k: v for k, v in ours.env.items() if k in reference["env"]} == reference["env"]
    assert set(ours.env) - set(reference["env"]) <= set(OPERATOR_ENV)
    if reference["container"]:
        assert ours.image == reference["container"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference's rendering of the corpus and of :data:`SYNTHETIC`, in one process."""
    python = reference_python()
    home = tmp_path_factory.mktemp("refhome")  # NB: keeps sparkrun's config away from the user's
    jobs: dict[str, Any] = dict.fromkeys(FILES)
    jobs.update({f"synthetic:{k}": {**_BASE, **doc} for k, doc in SYNTHETIC.items()})
    run = subprocess.run(
        [python, "-c", _REFERENCE, str(CORPUS)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=240,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("REFERENCE ")]
    assert run.returncode == 0, run.stderr[-3000:]
    assert lines, run.stderr[-3000:]
    out: dict[str, Any] = json.loads(lines[-1].removeprefix("REFERENCE "))
    return out


def test_corpus_figures() -> None:
    assert len(FILES) == 37
    assert [p for p, s in SERVED.items() if s.parse_error] == []
    rendered = [p for p, s in SERVED.items() if s.rendered]
    refused = [p for p, s in SERVED.items() if s.refused]
    assert (len(rendered), len(refused)) == (34, 3)
    assert sorted(refused) == sorted(SGLANG)


@pytest.mark.parametrize("path", SGLANG)
def test_sglang_recipes_are_refused_with_the_reason(path: str) -> None:
    (message,) = SERVED[path].refused
    assert message.startswith("runtime 'sglang' is not served by this operator (supported: vllm")


@pytest.mark.parametrize("path", FILES)
def test_renders_as_sparkrun(path: str, reference: dict[str, Any]) -> None:
    theirs = reference["recipes"][path]
    if path in SGLANG:
        assert theirs["runtime"] == "sglang"
        assert SERVED[path].refused
        return
    assert theirs["runtime"].startswith("vllm"), theirs
    assert_renders_as_reference(SERVED[path], theirs)


def _synthetic(name: str) -> Served:
    return serve_text(name, yaml.safe_dump({**_BASE, **SYNTHETIC[name]}))


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_template_rules_match_sparkrun(name: str, reference: dict[str, Any]) -> None:
    assert_renders_as_reference(_synthetic(name), reference["recipes"][f"synthetic:{name}"])


def test_reference_is_the_pinned_release(reference: dict[str, Any]) -> None:
    # 0.4.1 and 0.4.2 render this corpus byte for byte alike (Recipe.render_command, the config
    # chain and the brace rules are unchanged between them); see docs/recipes.md.
    assert reference["version"] in ("0.4.1", "0.4.2")


def test_the_differences_are_documented() -> None:
    text = DOCS.read_text()
    start = text.index("## Differences from sparkrun's rendering")
    section = text[start:].split("\n## ")[0]
    for name in (*OPERATOR_FLAGS, *_SPELLINGS, *OPERATOR_ENV):
        assert f"`{name}`" in section, name
