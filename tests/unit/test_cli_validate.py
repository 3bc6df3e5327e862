"""``sparkrun-k8s validate``: the real console script on real files."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from sparkrun_operator.api import fielderrors
from sparkrun_operator.api.admission import crd_for, validate
from sparkrun_operator.cli.validate import report, text

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.cli.main", "validate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_examples_are_valid() -> None:
    result = _run(*sorted(str(p) for p in (ROOT / "examples").glob("*.yaml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("valid") >= 8


def test_bad_manifest_fails_with_field_path() -> None:
    bad = """
apiVersion: sparkrun.dev/v1alpha1
kind: InferenceWorkload
metadata: {name: bad}
spec:
  model: {name: org/m}
  topology: {nodes: 2, gpusPerNode: 8, tensorParallel: 8}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
"""
    result = _run("-", stdin=bad)
    assert result.returncode == 1
    assert "spec.topology.gpusPerNode" in result.stdout
    assert "skipped" in result.stdout


# -- every error at once, in the apiserver's words (the words themselves are compared with the
# -- real apiserver in tests/cli/test_validate_parity.py) ---------------------------------------


def _workload(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": "unit-wl"},
        "spec": {"model": {"name": "unit-org/unit-model"}, **spec},
    }


def test_a_schema_error_does_not_hide_the_cel_rules() -> None:
    doc = _workload(replicas=-1, topology={"nodes": 3, "gpusPerNode": 1, "tensorParallel": 1})
    doc["metadata"] = {"name": "Bad_Name"}
    lines = [str(e) for e in validate(doc, unchecked=True)]
    assert 'metadata.name: Invalid value: "Bad_Name": metadata.name in body should match' in "\n".join(lines)
    assert (
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        in lines
    )
    assert ".spec.replicas: Invalid value: -1: should be a non-negative integer" in lines
    assert (
        "spec.topology.nodes: Invalid value: tensorParallel x pipelineParallel must be a multiple of nodes"
        in lines
    )
    assert not any(line.startswith("<nil>") for line in lines)


def test_a_blocking_error_skips_the_rules_and_says_so() -> None:
    doc = _workload(engine={"kind": "other"}, topology={"nodes": 3, "gpusPerNode": 1, "tensorParallel": 1})
    assert [str(e) for e in validate(doc, unchecked=True)] == [
        'spec.engine.kind: Unsupported value: "other": supported values: "vllm"',
        f"<nil>: Invalid value: null: {fielderrors.UNCHECKED}",
    ]
    # without ``unchecked`` (upgrade --check, the recipe importer) the notice is left out
    assert [e.path for e in validate(doc)] == ["spec.engine.kind"]


def test_values_are_printed_as_go_prints_them() -> None:
    assert (
        fielderrors.go_quote('a\tb "c"\\\x1b\u200b\U000e0001é')
        == '"a\\tb \\"c\\"\\\\\\x1b\\u200b\\U000e0001é"'
    )
    assert [fielderrors.go_value(v) for v in (5.0, 0.5, 1e-05, -1, True, None)] == [
        "5", "0.5", "1e-05", "-1", "true", "null",
    ]  # fmt: skip
    long = fielderrors.go_value("x" * 10_000)
    assert len(long) <= fielderrors.VALUE_MAX + 2


def test_a_message_expression_is_evaluated_and_falls_back_to_the_message() -> None:
    crd = copy.deepcopy(crd_for(_workload()))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [
        {"rule": "self.replicas < 2", "messageExpression": "'replicas is ' + string(self.replicas)"},
        {"rule": "self.replicas < 3", "messageExpression": "self.nothing", "message": "static words"},
        {"rule": "self.replicas < 4", "reason": "FieldValueForbidden", "fieldPath": ".replicas"},
    ]
    errors = validate(_workload(replicas=5), crds={"InferenceWorkload": crd})
    assert [str(e) for e in errors] == [
        "spec: Invalid value: replicas is 5",
        "spec: Invalid value: static words",
        "spec.replicas: Forbidden: failed rule: self.replicas < 4",
    ]
    assert [e.message for e in errors] == ["replicas is 5", "static words", "failed rule: self.replicas < 4"]


def test_the_text_report_escapes_what_a_tenant_wrote() -> None:
    data = report([("f.yaml", "InferenceWorkload/[red]x\x1b[2J", [validate(_workload(bogus=1))[0]])])
    assert text(data) == (
        'f.yaml: InferenceWorkload/[red]x?[2J: rejected (1 error)\n  spec: unknown field "spec.bogus"\n'
    )


def test_every_error_is_printed_with_json_output() -> None:
    bad = "\n".join(
        [
            "apiVersion: sparkrun.dev/v1alpha1",
            "kind: InferenceWorkload",
            "metadata: {name: Bad_Name}",
            "spec: {model: {revision: ''}, topology: {nodes: 3, gpusPerNode: 1, tensorParallel: 1}}",
        ]
    )
    result = _run("-o", "json", "-", stdin=bad)
    assert result.returncode == 1, result.stderr
    [item] = json.loads(result.stdout)
    assert item["result"] == "rejected"
    assert {e["field"] for e in item["errors"]} == {
        "metadata.name",
        "spec.model.name",
        "spec.model.revision",
        "<nil>",
    }
    assert {e["reason"] for e in item["errors"]} == {"FieldValueInvalid", "FieldValueRequired"}
