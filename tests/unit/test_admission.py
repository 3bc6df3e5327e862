"""The admission corpus against the generated CRD files in ``crds/`` (offline).

The same corpus runs against the real kube-apiserver in ``tests/testbed/test_admission.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.admission import validate
from tests.corpus import INVALID, VALID, InvalidCase

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crd_docs() -> dict[str, dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 30
    assert len({c.name for c in INVALID}) == len(INVALID), "case names must be unique"
    kinds = {c.manifest["kind"] for c in INVALID}
    assert kinds == {
        "InferenceWorkload",
        "InferenceCluster",
        "ModelCache",
        "InferenceBenchmark",
        "Recipe",
        "DaemonJob",
        "RecipeRegistry",
    }


@pytest.mark.parametrize("manifest", VALID, ids=lambda m: f"{m['kind']}/{m['metadata']['name']}")
def test_valid_examples_are_accepted(manifest: dict[str, Any], crd_docs: dict[str, dict[str, Any]]) -> None:
    assert validate(manifest, crds=crd_docs) == []


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.name)
def test_invalid_resources_are_rejected_with_field_path(
    case: InvalidCase, crd_docs: dict[str, dict[str, Any]]
) -> None:
    errors = validate(case.manifest, old=case.old, crds=crd_docs)
    assert errors, f"{case.name} was accepted"
    paths = [e.path for e in errors]
    assert case.field_path in paths, f"expected an error at {case.field_path}, got {errors}"
    if case.message is not None:
        assert any(case.message in e.message for e in errors if e.path == case.field_path), errors


@pytest.mark.parametrize("case", [c for c in INVALID if c.old is not None], ids=lambda c: c.name)
def test_transition_rules_allow_the_unchanged_object(
    case: InvalidCase, crd_docs: dict[str, dict[str, Any]]
) -> None:
    assert case.old is not None
    assert validate(case.old, old=case.old, crds=crd_docs) == []


def test_defaults_are_applied_before_cel() -> None:
    # gpusPerNode defaults to 1 and tensorParallel to 1: a bare workload is consistent.
    manifest = {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": "tiny"},
        "spec": {"model": {"name": "org/model"}},
    }
    assert validate(manifest) == []


def test_unknown_kind_is_reported() -> None:
    errors = validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    assert [e.path for e in errors] == ["apiVersion"]
