"""Every string, list, map and free-form value of every CRD spec is bounded (issue 23), and the
offline ``validate`` refuses what exceeds a bound with the field path, as the apiserver does
(``tests/testbed/test_spec_bounds.py``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api import bounds
from sparkrun_operator.api.admission import FieldError, validate
from tests.corpus import load_examples

ROOT = Path(__file__).resolve().parents[2]


def _docs() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]


def _spec(doc: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _unbounded(node: dict[str, Any], path: str) -> list[str]:
    """Every node under ``path`` that lets a value grow without a bound of the schema."""
    bad: list[str] = []
    kind_of = node.get("type")
    free = node.get("x-kubernetes-preserve-unknown-fields", False)
    if kind_of == "string" and "maxLength" not in node and "enum" not in node:
        bad.append(f"{path}: string without maxLength")
    if kind_of == "array" and "maxItems" not in node:
        bad.append(f"{path}: array without maxItems")
    if kind_of == "object" and "additionalProperties" in node and "maxProperties" not in node:
        bad.append(f"{path}: map without maxProperties")
    if free and "properties" not in node:
        if "maxProperties" not in node:
            bad.append(f"{path}: free-form object without maxProperties")
        if kind_of is None and not {"maxLength", "maxItems"} <= node.keys():
            bad.append(f"{path}: free-form value without maxLength and maxItems")
        leaf = node.get("maxItems") == 0 and node.get("maxProperties") == 0
        nested = "additionalProperties" in node and (kind_of == "object" or "items" in node)
        if not leaf and not nested:
            bad.append(f"{path}: free-form value whose nesting is unbounded")
    for name, child in node.get("properties", {}).items():
        bad += _unbounded(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        bad += _unbounded(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        bad += _unbounded(node["additionalProperties"], f"{path}{{}}")
    return bad


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: d["metadata"]["name"])
def test_every_spec_string_list_map_and_free_form_value_is_bounded(doc: dict[str, Any]) -> None:
    assert _unbounded(_spec(doc), "spec") == []


def _maps(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and "type" in extra:
        found.append((path, node))
    for name, child in node.get("properties", {}).items():
        found += _maps(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _maps(node["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: d["metadata"]["name"])
def test_keys_of_typed_maps_are_bounded_by_a_cel_rule(doc: dict[str, Any]) -> None:
    for path, node in _maps(_spec(doc), "spec"):
        rules = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
        assert any(r.startswith("self.all(k, k.size() <= ") for r in rules), path


def _at(doc: dict[str, Any], path: str) -> dict[str, Any]:
    node = _spec(doc)
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_the_figures_are_the_ones_of_bounds_py() -> None:
    docs = {d["spec"]["names"]["kind"]: d for d in _docs()}
    wl, rcp = docs["InferenceWorkload"], docs["Recipe"]
    assert _at(wl, "engine.args.[]")["maxLength"] == bounds.ARG_MAX_LENGTH == 32768
    assert _at(wl, "engine.env.[].value")["maxLength"] == bounds.ENV_VALUE_MAX_LENGTH == 32768
    assert _at(wl, "engine.env.[].valueFrom")["maxProperties"] == 1
    assert _at(wl, "scheduling.nodeSelector")["additionalProperties"]["maxLength"] == 63
    assert _at(wl, "scheduling.tolerations.[].key")["maxLength"] == 317
    assert _at(rcp, "env")["additionalProperties"]["maxLength"] == bounds.ENV_VALUE_MAX_LENGTH
    assert _at(rcp, "defaults")["maxProperties"] == bounds.FREE_FORM_MAX_ENTRIES
    assert _at(docs["InferenceCluster"], "nodes.names.[]")["maxLength"] == 253
    assert _at(docs["ModelCache"], "source.huggingFace.allowPatterns.[]")["maxLength"] == 1024
    assert _at(docs["DaemonJob"], "principal.groups")["maxItems"] == bounds.GROUPS_MAX_ITEMS
    arguments = _at(docs["DaemonJob"], "arguments")
    assert arguments["maxProperties"] == bounds.ARGUMENTS_MAX_PROPERTIES
    nested = arguments["additionalProperties"]
    assert (nested["maxLength"], nested["maxItems"], nested["nullable"]) == (262144, 2048, True)
    assert "x-kubernetes-validations" not in arguments  # no CEL type: the digest pins it
    digest = _at(docs["DaemonJob"], "requestDigest")
    assert [r["rule"] for r in digest["x-kubernetes-validations"]] == ["self == oldSelf"]
    assert "requestDigest" in _spec(docs["DaemonJob"])["required"]


# -- the offline validate ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_docs() -> dict[str, dict[str, Any]]:
    return {d["spec"]["names"]["kind"]: d for d in _docs()}


def _example(name: str) -> dict[str, Any]:
    return copy.deepcopy(load_examples()[name])


def _errors(manifest: dict[str, Any], crd_docs: dict[str, dict[str, Any]]) -> list[FieldError]:
    return validate(manifest, crds=crd_docs)


def _nest(depth: int) -> dict[str, Any]:
    """An object nested ``depth`` levels deep (``{"a": {"a": ... 1}}``)."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    result: dict[str, Any] = value
    return result


def test_an_engine_argument_over_32_kib_is_refused_with_its_path(crd_docs: dict[str, dict[str, Any]]) -> None:
    wl = _example("inferenceworkload")
    wl["spec"]["engine"]["args"] = ["--chat-template=" + "x" * 30 * 1024, "y" * 32768]
    assert _errors(wl, crd_docs) == []
    wl["spec"]["engine"]["args"] = ["y" * 32769]
    assert [e.path for e in _errors(wl, crd_docs)] == ["spec.engine.args[0]"]


@pytest.mark.parametrize(
    ("example", "path", "value", "where"),
    [
        (
            "inferenceworkload",
            "engine.env",
            [{"name": "A", "value": "v" * 32769}],
            "spec.engine.env[0].value",
        ),
        (
            "inferenceworkload",
            "engine.env",
            [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}, "secretKeyRef": {"name": "s"}}}],
            "spec.engine.env[0].valueFrom",
        ),
        ("inferenceworkload", "scheduling.nodeSelector", {"k": "v" * 64}, "spec.scheduling.nodeSelector.k"),
        (
            "inferenceworkload",
            "scheduling.tolerations",
            [{"key": "k" * 318}],
            "spec.scheduling.tolerations[0].key",
        ),
        ("inferencecluster", "nodes", {"names": ["n" * 254]}, "spec.nodes.names[0]"),
        ("modelcache", "download.tolerations", [{"value": "v" * 64}], "spec.download.tolerations[0].value"),
        ("recipe", "env", {"A": "v" * 32769}, "spec.env.A"),
        ("recipe", "defaults", {"chat_template": "t" * 32769}, "spec.defaults.chat_template"),
        ("recipe", "preExec", ["x" * 32769], "spec.preExec[0]"),
        ("daemonjob", "principal.groups", ["g" * 1025], "spec.principal.groups[0]"),
        ("daemonjob", "arguments", {f"a{i}": 1 for i in range(65)}, "spec.arguments"),
    ],
)
def test_a_value_over_its_bound_is_refused_with_its_path(
    crd_docs: dict[str, dict[str, Any]], example: str, path: str, value: Any, where: str
) -> None:
    doc = _example(example)
    *parents, last = path.split(".")
    node = doc["spec"]
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    assert where in [e.path for e in _errors(doc, crd_docs)]


def test_map_keys_over_their_bound_are_refused_by_the_cel_rule(crd_docs: dict[str, dict[str, Any]]) -> None:
    wl = _example("inferenceworkload")
    wl["spec"]["scheduling"] = {"nodeSelector": {"k" * 317: "v"}}
    assert _errors(wl, crd_docs) == []
    wl["spec"]["scheduling"] = {"nodeSelector": {"k" * 318: "v"}}
    assert _errors(wl, crd_docs) == [
        FieldError("spec.scheduling.nodeSelector", "keys may not be longer than 317 characters")
    ]


def test_free_form_values_nested_past_their_depth_are_refused(crd_docs: dict[str, dict[str, Any]]) -> None:
    depth = bounds.RECIPE_DEFAULTS_DEPTH
    recipe = _example("recipe")
    # defaults is level 1: depth - 1 more levels of containers, then scalars.
    recipe["spec"]["defaults"] = {"hf_overrides": _nest(depth - 1), "sizes": [[1, 2]], "port": 8000}
    assert _errors(recipe, crd_docs) == []
    recipe["spec"]["defaults"] = {"hf_overrides": _nest(depth)}
    assert [e.path for e in _errors(recipe, crd_docs)] == ["spec.defaults.hf_overrides" + ".a" * (depth - 1)]
    recipe["spec"]["defaults"] = {"deep": _nest(100)}
    assert [e.path for e in _errors(recipe, crd_docs)] == ["spec.defaults.deep" + ".a" * (depth - 1)]
    recipe["spec"]["defaults"] = {}
    recipe["spec"]["preExec"] = ["echo", {"command": "nvidia-smi", "args": ["-L"]}]
    assert _errors(recipe, crd_docs) == []
    recipe["spec"]["preExec"] = [{"command": {"nested": {"too": "deep"}}}]
    assert [e.path for e in _errors(recipe, crd_docs)] == ["spec.preExec[0].command.nested"]


def test_daemonjob_arguments_nested_past_their_depth_are_refused(crd_docs: dict[str, dict[str, Any]]) -> None:
    depth = bounds.ARGUMENTS_DEPTH
    job = _example("daemonjob")
    # arguments is level 1: depth - 1 more levels of containers, then scalars; lists count too.
    job["spec"]["arguments"] = {"overrides": _nest(depth - 1), "list": [[[1]]], "content": "c" * 262144}
    assert _errors(job, crd_docs) == []
    job["spec"]["arguments"] = {"overrides": _nest(depth)}
    assert [e.path for e in _errors(job, crd_docs)] == ["spec.arguments.overrides" + ".a" * (depth - 1)]
    job["spec"]["arguments"] = {"deep": _nest(100)}
    assert [e.path for e in _errors(job, crd_docs)] == ["spec.arguments.deep" + ".a" * (depth - 1)]
    job["spec"]["arguments"] = {"content": "c" * 262145}
    assert [e.path for e in _errors(job, crd_docs)] == ["spec.arguments.content"]
