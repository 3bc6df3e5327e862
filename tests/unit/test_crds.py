"""The generated CRDs: the six kinds, descriptions everywhere, subresources, columns, freshness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.crdgen import SchemaError, all_crds, structural
from sparkrun_operator.api.generate import dump, generate
from sparkrun_operator.api.resources import KINDS

ROOT = Path(__file__).resolve().parents[2]
CRD_FILES = sorted((ROOT / "crds").glob("*.yaml"))


def _load() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in CRD_FILES]


def test_exactly_the_seven_crds() -> None:
    assert sorted(p.name for p in CRD_FILES) == sorted(f"{k.plural}.sparkrun.dev.yaml" for k in KINDS)
    assert {d["spec"]["names"]["kind"] for d in _load()} == {
        "InferenceWorkload",
        "InferenceCluster",
        "ModelCache",
        "InferenceBenchmark",
        "Recipe",
        "DaemonJob",
        "RecipeRegistry",
    }


def test_committed_files_equal_generated(tmp_path: Path) -> None:
    generate(tmp_path)
    for path in CRD_FILES:
        assert (tmp_path / "crds" / path.name).read_text() == path.read_text(), (
            f"{path.name} is stale: make generate"
        )


def test_generation_is_deterministic() -> None:
    assert [dump(d) for d in all_crds()] == [dump(d) for d in all_crds()]


def _walk(node: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}"
        if name not in {"apiVersion", "kind", "metadata"} and not child.get("description"):
            missing.append(here)
        missing += _walk(child, here)
    if isinstance(node.get("items"), dict):
        missing += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        missing += _walk(node["additionalProperties"], f"{path}{{}}")
    return missing


@pytest.mark.parametrize("doc", _load(), ids=lambda d: d["metadata"]["name"])
def test_every_field_has_a_description(doc: dict[str, Any]) -> None:
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema, "") == []


def _structural_violations(node: dict[str, Any], path: str) -> list[str]:
    bad = []
    if (
        "type" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
        and not node.get("x-kubernetes-int-or-string")
    ):
        bad.append(f"{path}: no type")
    for forbidden in ("anyOf", "oneOf", "allOf", "$ref", "const", "title"):
        if forbidden in node:
            bad.append(f"{path}: {forbidden}")
    if "properties" in node and "additionalProperties" in node:
        bad.append(f"{path}: properties and additionalProperties")
    for name, child in node.get("properties", {}).items():
        bad += _structural_violations(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            bad += _structural_violations(node[key], f"{path}.{key}")
    return bad


@pytest.mark.parametrize("doc", _load(), ids=lambda d: d["metadata"]["name"])
def test_schemas_are_structural(doc: dict[str, Any]) -> None:
    assert _structural_violations(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "") == []


@pytest.mark.parametrize("doc", _load(), ids=lambda d: d["metadata"]["name"])
def test_names_status_and_columns(doc: dict[str, Any]) -> None:
    names = doc["spec"]["names"]
    assert names["categories"] == ["sparkrun"]
    assert names["shortNames"]
    version = doc["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Age"] == ".metadata.creationTimestamp"
    if names["kind"] in {"InferenceWorkload", "InferenceCluster", "ModelCache"}:
        assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'


def test_workload_scale_subresource_and_columns() -> None:
    (doc,) = [d for d in _load() if d["spec"]["names"]["kind"] == "InferenceWorkload"]
    version = doc["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Phase", "Replicas", "Model", "Age"} <= columns


def test_short_names_match_design() -> None:
    short = {d["spec"]["names"]["kind"]: d["spec"]["names"]["shortNames"] for d in _load()}
    assert short == {
        "InferenceWorkload": ["iw"],
        "InferenceCluster": ["ic"],
        "ModelCache": ["mc"],
        "InferenceBenchmark": ["ib"],
        "Recipe": ["rcp"],
        "DaemonJob": ["dj"],
        "RecipeRegistry": ["rreg"],
    }


def test_nested_object_defaults_are_complete_so_cel_rules_hold_for_them() -> None:
    (doc,) = [d for d in _load() if d["spec"]["names"]["kind"] == "InferenceWorkload"]
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["topology"]["default"] == {
        "nodes": 1,
        "gpusPerNode": 1,
        "tensorParallel": 1,
        "pipelineParallel": 1,
    }
    assert spec["properties"]["scheduling"]["default"] == {}
    assert spec["properties"]["topology"]["properties"]["nodes"]["default"] == 1
    assert spec["properties"]["state"]["enum"] == ["Running", "Sleeping", "Stopped"]
    assert "default" not in spec["properties"]["engine"]["properties"]["args"]


def test_exclusive_minimum_uses_openapi_boolean_form() -> None:
    (doc,) = [d for d in _load() if d["spec"]["names"]["kind"] == "InferenceWorkload"]
    engine = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "engine"
    ]
    util = engine["properties"]["gpuMemoryUtilization"]
    assert (util["minimum"], util["exclusiveMinimum"], util["maximum"]) == (0, True, 1)


def test_unions_are_refused() -> None:
    with pytest.raises(SchemaError):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
