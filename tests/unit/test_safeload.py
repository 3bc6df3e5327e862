"""The bounded loader of tenant documents (``safeload``, ADR 0038) and every entry point that uses it.

Each entry point gets an alias bomb (YAML) or a bracket bomb (JSON has no aliases: its bomb is
depth), a deep nest and an oversized document, and must refuse each with a message naming the
document and the problem. The loader itself: anchors and aliases are refused before any node
exists (line and column named), depth is counted while composing, size before parsing, and the
JSON depth pre-scan is linear and exact (property-tested against a recursive count).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkrun_operator import safeload
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS
from sparkrun_operator.ops.executors.recipes import parse_recipe
from sparkrun_operator.ops.schema import parse_json_object
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.recipe import identity
from sparkrun_operator.runtime import bench, cachetool

HEADER = "model: Qwen/Qwen3-0.6B\nruntime: vllm\ncontainer: vllm/vllm-openai:v0.11.0\n"
ANCHORS = "anchors and aliases are not allowed"
COMMIT = "a" * 40
SETTINGS = Settings(namespace="default")


def alias_chain(levels: int = 8) -> str:
    """The finding's recipe: ``levels`` levels of 10 references (10^8 nodes once expanded)."""
    lines = [HEADER + "defaults:", "  l1: &l1 [" + ",".join(["lol"] * 10) + "]"]
    for n in range(2, levels + 1):
        lines.append(f"  l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    top = node
    for _ in range(depth - 1):
        node["a"] = {}
        node = node["a"]
    return top


def nested_lists(depth: int) -> list[Any]:
    node: list[Any] = []
    for _ in range(depth - 1):
        node = [node]
    return node


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


# -- the loader --------------------------------------------------------------------------------


def test_anchors_and_aliases_are_refused_with_their_line_and_column() -> None:
    with pytest.raises(safeload.DocumentError) as caught:
        safeload.load_yaml(alias_chain(), safeload.RECIPE)
    assert str(caught.value) == f"recipe YAML uses an anchor (&l1) at line 5, column 7: {ANCHORS}"
    with pytest.raises(safeload.DocumentError) as caught:
        safeload.load_yaml("a: 1\nb:\n  c: *x\n", safeload.RECIPE)
    assert str(caught.value) == f"recipe YAML uses an alias (*x) at line 3, column 6: {ANCHORS}"
    # An anchor on a scalar, and YAML's merge key (which needs an alias) are refused too.
    with pytest.raises(safeload.DocumentError, match=r"anchor \(&s\) at line 1, column 4"):
        safeload.load_yaml("a: &s text\n", safeload.RECIPE)
    with pytest.raises(safeload.DocumentError, match=r"anchor \(&m\)"):
        safeload.load_yaml("a: &m {x: 1}\nb:\n  <<: *m\n", safeload.RECIPE)


def test_the_alias_chain_is_refused_before_anything_is_built() -> None:
    started = time.perf_counter()
    for _ in range(100):
        with pytest.raises(safeload.DocumentError):
            safeload.load_yaml(alias_chain(), safeload.RECIPE)
    assert time.perf_counter() - started < 2.0  # 100 refusals; an expansion would be 10^8 nodes


def test_depth_is_bounded_while_composing() -> None:
    bounds = safeload.Bounds("doc", 1024, 3)
    assert safeload.load_yaml("a:\n  b:\n    c: 1\n", bounds) == {"a": {"b": {"c": 1}}}
    with pytest.raises(safeload.LimitExceeded) as caught:
        safeload.load_yaml("a:\n  b:\n    c: [1]\n", bounds)
    assert str(caught.value) == "doc nests deeper than 3 levels at line 3, column 8"
    # Flow style, far deeper than any bound: refused (by the composer or libyaml's own limit).
    with pytest.raises(safeload.DocumentError, match="nest"):
        safeload.load_yaml("x: " + "[" * 200_000, safeload.RECIPE)
    # The deepest bound allowed stays far inside the interpreter's recursion limit.
    deepest = safeload.Bounds("doc", 1 << 20, safeload.MAX_DEPTH)
    assert safeload.load_yaml("x: " + "[" * 127 + "]" * 127, deepest) == {"x": nested_lists(127)}
    with pytest.raises(ValueError, match=r"max_depth must be within 1\.\.128"):
        safeload.Bounds("doc", 1, safeload.MAX_DEPTH + 1)


def test_size_is_bounded_in_utf8_bytes_before_parsing() -> None:
    bounds = safeload.Bounds("doc", 10, 4)
    assert safeload.load_yaml("a: 123456", bounds) == {"a": 123456}
    with pytest.raises(safeload.LimitExceeded, match=r"^doc is 11 bytes; at most 10 are allowed$"):
        safeload.load_yaml("a: 12345678", bounds)
    with pytest.raises(safeload.LimitExceeded, match="doc is 11 bytes"):
        safeload.load_yaml("a: \u00e9\u00e9\u00e9\u00e9", bounds)  # 7 characters, 11 bytes
    with pytest.raises(safeload.LimitExceeded, match="doc is 11 bytes"):
        safeload.load_json(b'{"a": 1234}', bounds)


def test_other_problems_are_document_errors() -> None:
    cases = {
        "a: [1\n": "recipe YAML does not parse",
        "a: 1\n---\nb: 2\n": "recipe YAML holds more than one document",
        "a: !!python/object/apply:os.system [x]\n": "could not determine a constructor",
        "? [a]\n: 1\n": "found unhashable key",
        "a: " + "1" * 5000 + "\n": "integer of 5000 characters",  # before Python's digit limit
    }
    for text, words in cases.items():
        with pytest.raises(safeload.DocumentError, match=words.replace("(", r"\(")):
            safeload.load_yaml(text, safeload.RECIPE)
    assert safeload.load_yaml("", safeload.RECIPE) is None
    assert safeload.load_yaml_all("a: 1\n---\nb: 2\n", safeload.USER_MANIFESTS) == [{"a": 1}, {"b": 2}]
    bad: list[tuple[str | bytes, str]] = [
        (b"\xff", "request body is not UTF-8"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": Infinity}', "Infinity is not JSON"),
        ("{", "request body is not valid JSON"),
    ]
    for raw, words in bad:
        with pytest.raises(safeload.DocumentError, match=words):
            safeload.load_json(raw, safeload.REQUEST_BODY)


def test_integers_are_decimal_hex_octal_or_binary_and_short() -> None:
    # YAML 1.1's sexagesimal integers (1:0:0 is 3600) build in time quadratic in their length
    # and past Python's digit limit: refused with where they are; so are integers over 64 chars.
    assert safeload.load_yaml("a: 12\nb: 0x1F\nc: 017\nd: 1_000\ne: 1:30.5", safeload.RECIPE) == {
        "a": 12,
        "b": 31,
        "c": 15,
        "d": 1000,
        "e": 90.5,
    }
    with pytest.raises(safeload.DocumentError, match=r"sexagesimal integer at line 2, column 4"):
        safeload.load_yaml("a: 1\nb: 1" + ":0" * 100_000, safeload.RECIPE)
    with pytest.raises(safeload.LimitExceeded, match=r"integer of 65 characters at line 1"):
        safeload.load_yaml("a: " + "9" * 65, safeload.RECIPE)
    assert safeload.load_yaml("a: " + "9" * 64, safeload.RECIPE) == {"a": int("9" * 64)}
    with pytest.raises(Invalid, match="sexagesimal"):
        parse_recipe(HEADER + "name: 1" + ":0" * 2500)


def test_json_depth_is_bounded_before_json_decodes() -> None:
    bomb = "[" * (1 << 20)
    started = time.perf_counter()
    with pytest.raises(safeload.LimitExceeded) as caught:
        safeload.load_json(bomb, safeload.Bounds("body", 2 << 20, 64))
    assert time.perf_counter() - started < 2.0
    assert str(caught.value) == f"body nests deeper than 64 levels ({1 << 20})"
    assert safeload.load_json('{"a": "[[[[[[[[", "b": ["]]]]"]}', safeload.Bounds("x", 100, 2)) == {
        "a": "[[[[[[[[",
        "b": ["]]]]"],
    }


@pytest.mark.parametrize(
    "text",
    [
        '"\\"' * 300_000,  # escaped quotes, unterminated: a backtracking scan would be quadratic
        '"\\' * 300_000,
        '"' + "\\" * 600_001,
        "[" + '"a",' * 200_000 + "]",
        '{"' * 300_000,
    ],
)
def test_the_json_pre_scan_is_linear_on_adversarial_text(text: str) -> None:
    started = time.perf_counter()
    safeload.json_depth(text)
    assert time.perf_counter() - started < 1.0


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ ab\n', max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
        max_leaves=40,
    )
)
def test_the_json_pre_scan_finds_the_true_depth(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=1), json.dumps(value, ensure_ascii=False)):
        assert safeload.json_depth(text) == _depth(value)
        assert safeload.load_json(text, safeload.Bounds("v", 1 << 20, max(_depth(value), 1))) == value


def test_check_tree_bounds_parsed_values_without_recursion() -> None:
    bounds = safeload.Bounds("manifest", 100, 3)
    safeload.check_tree({"a": [{"b": 1}]}, bounds)
    with pytest.raises(safeload.LimitExceeded, match="manifest nests deeper than 3 levels"):
        safeload.check_tree({"a": [{"b": [1]}]}, bounds)
    with pytest.raises(safeload.LimitExceeded, match="manifest is 108 bytes of JSON; at most 100"):
        safeload.check_tree({"a": "x" * 100}, bounds)
    very_deep: list[Any] = []
    for _ in range(100_000):
        very_deep = [very_deep]
    with pytest.raises(safeload.LimitExceeded):
        safeload.check_tree(very_deep, bounds)


# -- catalog.import: the recipe YAML -------------------------------------------------------------


def test_catalog_import_refuses_bombs_at_submission_and_in_the_executor() -> None:
    check = ARGUMENT_CHECKS["catalog.import"]
    deep = HEADER + "defaults:\n  x: " + "[" * 40 + "]" * 40 + "\n"
    big = HEADER + "# " + "\u00e9" * 140_000 + "\n"
    for content, words in [
        (alias_chain(), f"recipe YAML uses an anchor (&l1) at line 5, column 7: {ANCHORS}"),
        (deep, "recipe YAML nests deeper than 32 levels at line 5, column 36"),
        (big, "recipe YAML is 280076 bytes; at most 262144 are allowed"),
        ("- a\n", "recipe content must be a YAML mapping"),
    ]:
        with pytest.raises(Invalid) as caught:
            check({"content": content}, SETTINGS)
        assert caught.value.detail == words
        with pytest.raises(Invalid) as again:
            parse_recipe(content)  # what the executor runs
        assert again.value.detail == words
    name, spec = parse_recipe(HEADER + "defaults:\n  tensor_parallel: 1\n")
    assert name.startswith("qwen3-0-6b-")
    assert spec.defaults == {"tensor_parallel": 1}


# -- the daemon API's request bodies -------------------------------------------------------------


def test_request_bodies_are_bounded() -> None:
    for body, detail in [
        (b"[" * 100_000, "Invalid JSON request: request body nests deeper than 64 levels (100000)"),
        (
            json.dumps(nested(65)).encode(),
            "Invalid JSON request: request body nests deeper than 64 levels (65)",
        ),
        (
            b" " * (1 << 20) + b"{}",
            "Invalid JSON request: request body is 1048578 bytes; at most 1048576 are allowed",
        ),
    ]:
        with pytest.raises(Invalid) as caught:
            parse_json_object(body)
        assert caught.value.detail == detail
    assert parse_json_object(json.dumps(nested(64)).encode()) == nested(64)


# -- model_cache.import: the manifest ------------------------------------------------------------


def _manifest(**extra: Any) -> dict[str, Any]:
    return {"repo": "org/model", "revision": COMMIT, "files": [{"path": "config.json", "size": 2}], **extra}


def test_model_cache_import_bounds_the_manifest_at_submission() -> None:
    check = ARGUMENT_CHECKS["model_cache.import"]
    args = {"cache_dir": "claim", "model": "org/model"}
    check({**args, "manifest": _manifest()}, SETTINGS)
    files = [
        {
            "path": f"model-{i:05d}.safetensors",
            "size": i,
            "checksum_algorithm": "sha256",
            "checksum": "b" * 64,
        }
        for i in range(2000)
    ]
    for manifest, words in [
        (_manifest(extra=nested(7)), "manifest nests deeper than 7 levels"),
        (_manifest(files=files), "manifest is 308974 bytes of JSON; at most 122880 are allowed"),
    ]:
        with pytest.raises(Invalid) as caught:
            check({**args, "manifest": manifest}, SETTINGS)
        assert words in caught.value.detail


def _cachetool(tmp_path: Path, manifest_json: str) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cachetool.run(
            ["import", "--root", str(tmp_path), "--commit", COMMIT, "--manifest-json", manifest_json]
        )
    assert code != 0
    event: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    assert event["event"] == "error"
    return event


def test_the_cache_tool_bounds_its_manifest_argument(tmp_path: Path) -> None:
    deep = _cachetool(tmp_path, "[" * 100_000)
    assert deep["message"] == "invalid manifest: manifest nests deeper than 7 levels (100000)"
    big = _cachetool(tmp_path, json.dumps(_manifest(pad="x" * 300_000)))
    assert re.fullmatch(
        r"invalid manifest: manifest is 300\d\d\d bytes; at most 122880 are allowed", big["message"]
    )
    assert _cachetool(tmp_path, "[1]")["message"] == "invalid manifest: the manifest is not a JSON object"


# -- the benchmark runner's plan -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ("[" * 100_000, "benchmark plan nests deeper than 32 levels (100000)"),
        (json.dumps({"bench_args": nested(40)}), "benchmark plan nests deeper than 32 levels (41)"),
        (json.dumps({"pad": "x" * (1 << 20)}), "benchmark plan is 1048587 bytes; at most 1048576"),
    ],
)
def test_the_benchmark_runner_bounds_its_plan(
    plan: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--plan", plan]) == bench.EXIT_BAD_PLAN
    event = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert event["reason"] == "InvalidPlan"
    assert words in event["message"]


# -- recipe override values (JSON in a string) ---------------------------------------------------


def test_json_override_values_are_bounded() -> None:
    recipe = {"model": "org/m", "runtime": "vllm", "container": "img", "defaults": {"x": {}}}
    assert identity.recipe_revision(recipe, {"x.y": '{"a": [1]}'})
    for value, words in [
        ("[" * 50_000, "override value nests deeper than 32 levels (50000)"),
        ("[" + "1," * 40_000 + "1]", "override value is 80003 bytes; at most 65536 are allowed"),
    ]:
        # a dotted override's value, and a string value a dotted override sets a field inside
        for overrides in ({"x.y": value}, {"s": "{" + value[1:], "s.y": 1}):
            with pytest.raises(ValueError, match=f"^{re.escape(words)}$"):
                identity.recipe_revision(recipe, overrides)
    # Not JSON at all: the string is the value, as before.
    assert identity.recipe_revision(recipe, {"x.y": "[not json"})


# -- sparkrun-k8s validate (a user's own files) --------------------------------------------------


def test_validate_bounds_the_users_files(tmp_path: Path) -> None:
    files = {
        "bomb.yaml": alias_chain(),
        "deep.yaml": "a: " + "[" * 70 + "]" * 70 + "\n",
        "big.yaml": "# " + "x" * (8 << 20) + "\n",
    }
    expected = {
        "bomb.yaml": f"manifest YAML uses an anchor (&l1) at line 5, column 7: {ANCHORS}",
        "deep.yaml": "manifest YAML nests deeper than 64 levels at line 1, column 67",
        "big.yaml": "manifest YAML is 8388609 bytes; at most 8388608 are allowed",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        result = subprocess.run(
            [sys.executable, "-m", "sparkrun_operator.cli.main", "validate", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        assert expected[name] in " ".join(result.stdout.split()), result.stdout
