"""``api/upgradecheck.py``: stored objects against a new chart's CRDs, offline (issue 28, item 5).

The chart's own CRD templates are read as ``upgrade --check --chart`` reads them; each test
changes one CRD the way a careless upgrade would (a tightened bound, a new CEL rule, a version
dropped or no longer served, a field removed) and checks the finding names the object, the rule
or field path and the message.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api.upgradecheck import Finding, check, check_object, crds_of, strip_template
from sparkrun_operator.cli.common import EXIT_NO, EXIT_OK, EXIT_REFUSED
from sparkrun_operator.cli.upgrade import Report, chart_files, text
from tests.corpus import VALID

CHART = Path(__file__).resolve().parents[2] / "helm" / "sparkrun-operator"


@pytest.fixture(scope="module")
def chart_crds() -> dict[str, dict[str, Any]]:
    return crds_of(chart_files(CHART))


def stored(doc: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    """``doc`` as the apiserver returns it: server metadata, a status, namespaced when it is."""
    out = copy.deepcopy(doc)
    meta = out["metadata"]
    if doc["kind"] != "InferenceCluster":
        meta["namespace"] = namespace
    meta.update(uid="0f1e", resourceVersion="42", generation=3, creationTimestamp="2026-12-01T00:00:00Z")
    meta["managedFields"] = [
        {"manager": "kubectl", "operation": "Apply", "apiVersion": "sparkrun.dev/v1alpha1"}
    ]
    return out


def workload() -> dict[str, Any]:
    return stored(next(d for d in VALID if d["kind"] == "InferenceWorkload"))


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = crd["spec"]["versions"][0]
    return entry


def test_the_chart_defines_the_seven_kinds_and_every_example_passes(chart_crds: dict[str, Any]) -> None:
    assert sorted(chart_crds) == [
        "DaemonJob",
        "InferenceBenchmark",
        "InferenceCluster",
        "InferenceWorkload",
        "ModelCache",
        "Recipe",
        "RecipeRegistry",
    ]
    objects = [stored(d) for d in VALID]
    assert len({d["kind"] for d in objects}) == 7
    assert check(chart_crds, objects) == []


def test_a_tightened_max_length_rejects_the_stored_object(chart_crds: dict[str, Any]) -> None:
    crds = copy.deepcopy(chart_crds)
    name = _version(crds["InferenceWorkload"])["schema"]["openAPIV3Schema"]["properties"]["metadata"]
    name["properties"]["name"]["maxLength"] = 3
    obj = workload()
    [finding] = check_object(crds, obj)
    assert (finding.kind, finding.namespace, finding.name) == (
        "InferenceWorkload",
        "team-a",
        obj["metadata"]["name"],
    )
    assert finding.problem == "rejected"
    assert finding.blocking
    assert finding.path == "metadata.name"
    assert "Too long: may not be more than 3 bytes" in finding.message
    assert finding.object == f"InferenceWorkload team-a/{obj['metadata']['name']}"


def test_a_new_cel_rule_rejects_and_names_the_rule(chart_crds: dict[str, Any]) -> None:
    crds = copy.deepcopy(chart_crds)
    spec = _version(crds["InferenceWorkload"])["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rule = {"rule": "self.replicas >= 5", "message": "at least five replicas now"}
    spec.setdefault("x-kubernetes-validations", []).append(rule)
    obj = workload()
    obj["spec"]["replicas"] = 1
    findings = check_object(crds, obj)
    assert [(f.path, f.rule, f.message) for f in findings] == [
        ("spec", "self.replicas >= 5", "at least five replicas now")
    ]
    # the unchanged chart takes the same object
    assert check_object(chart_crds, obj) == []


def test_transition_rules_see_an_update_of_the_object_onto_itself(chart_crds: dict[str, Any]) -> None:
    """Immutability rules (``self == oldSelf``) hold; a rule only a changed object passes fails."""
    crds = copy.deepcopy(chart_crds)
    spec = _version(crds["InferenceWorkload"])["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec.setdefault("x-kubernetes-validations", []).append(
        {"rule": "self.model != oldSelf.model", "message": "model must change on every update"}
    )
    [finding] = check_object(crds, workload())
    assert finding.rule == "self.model != oldSelf.model"
    daemonjob = stored(next(d for d in VALID if d["kind"] == "DaemonJob"))
    assert "oldSelf" in str(_version(chart_crds["DaemonJob"])["schema"])
    assert check_object(chart_crds, daemonjob) == []


@pytest.mark.parametrize("change", ["removed", "unserved"])
def test_a_version_the_new_crd_no_longer_serves_is_reported(chart_crds: dict[str, Any], change: str) -> None:
    crds = copy.deepcopy(chart_crds)
    if change == "removed":
        _version(crds["Recipe"])["name"] = "v1beta1"
    else:
        _version(crds["Recipe"])["served"] = False
    recipe = stored(next(d for d in VALID if d["kind"] == "Recipe"))
    [finding] = check_object(crds, recipe)
    assert finding.problem == "version"
    assert finding.blocking
    assert finding.path == "apiVersion"
    assert "v1alpha1" in finding.message
    assert ("not in the new CRD" if change == "removed" else "no longer served") in finding.message


def test_a_kind_the_new_chart_drops_is_reported(chart_crds: dict[str, Any]) -> None:
    crds = {k: v for k, v in chart_crds.items() if k != "ModelCache"}
    [finding] = check_object(crds, stored(next(d for d in VALID if d["kind"] == "ModelCache")))
    assert finding.problem == "version"
    assert "no CustomResourceDefinition for ModelCache" in finding.message


def test_a_removed_field_is_a_warning_not_a_rejection(chart_crds: dict[str, Any]) -> None:
    crds = copy.deepcopy(chart_crds)
    spec = _version(crds["InferenceWorkload"])["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["replicas"]
    obj = workload()
    obj["spec"]["replicas"] = 2
    findings = check_object(crds, obj)
    assert [(f.problem, f.path, f.blocking) for f in findings] == [("pruned", "spec.replicas", False)]


def test_an_object_that_cannot_be_read_is_reported(chart_crds: dict[str, Any]) -> None:
    [nameless] = check_object(chart_crds, {"apiVersion": "sparkrun.dev/v1alpha1", "kind": "Recipe"})
    [foreign] = check_object(chart_crds, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    [junk] = check_object(chart_crds, "not an object")
    assert {nameless.problem, foreign.problem, junk.problem} == {"unreadable"}
    assert nameless.blocking


def test_templates_are_read_without_helm_and_a_template_inside_a_line_is_refused() -> None:
    text = (
        "{{- if .Values.crds.install }}\nkind: X\nmetadata:\n  labels:\n"
        '    {{- include "l" . | nindent 4 }}\n{{- end }}\n'
    )
    assert strip_template(text, "t.yaml") == "kind: X\nmetadata:\n  labels:\n"
    with pytest.raises(ValueError, match=r"t.yaml:2: a template expression"):
        strip_template("kind: X\nname: {{ .Release.Name }}\n", "t.yaml")
    with pytest.raises(ValueError, match="defined twice"):
        crds_of(chart_files(CHART / "templates" / "crds" / "recipes.sparkrun.dev.yaml") * 2)


def test_the_report_exit_codes_and_text() -> None:
    """1 when an object is rejected; a kind that cannot be listed is its apiserver code (3, 4,
    5) unless something was rejected; a pruned field alone passes."""
    rejected = Finding("Recipe", "team-a", "r", "rejected", "spec.x", "self.x > 1", "x must exceed one")
    pruned = Finding("Recipe", "team-a", "r", "pruned", "spec.gone", "schema", "dropped")
    unlisted = Finding("DaemonJob", "", "", "unreadable", "", "read", "cannot list daemonjobs: forbidden")
    report = Report(chart="c", checked={"Recipe": 1})
    report.add(pruned)
    assert report.exit_code() == EXIT_OK
    report.read_errors.append(EXIT_REFUSED)
    report.add(unlisted)
    assert report.exit_code() == EXIT_REFUSED
    report.add(rejected)
    assert report.exit_code() == EXIT_NO
    out = text(report.to_json())
    assert "warning: Recipe team-a/r: spec.gone: dropped\n" in out
    assert "Recipe team-a/r: spec.x: x must exceed one  [rule: self.x > 1]\n" in out
    assert out.endswith("1 object (1 Recipe): FAILED (2 findings that stop the upgrade)\n")


# -- hostile stored objects (review of issue 28) ---------------------------------------------------


def test_a_new_pattern_over_a_long_stored_string_is_matched_in_linear_time(
    chart_crds: dict[str, Any],
) -> None:
    """The apiserver matches OpenAPI patterns with RE2 (Go's regexp); a backtracking matcher
    is quadratic on this pattern (a quantity's) and a string that fails it: hours for 200,000
    characters stored before the bound (ratcheting keeps such an object)."""
    crds = copy.deepcopy(chart_crds)
    model = _version(crds["InferenceWorkload"])["schema"]["openAPIV3Schema"]["properties"]["spec"]
    name = model["properties"]["model"]["properties"]["name"]
    name["pattern"] = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
    obj = workload()
    obj["spec"]["model"]["name"] = "1" * 200_000 + "x"
    started = time.perf_counter()
    findings = check_object(crds, obj)
    assert time.perf_counter() - started < 30  # RE2: milliseconds; backtracking: hours
    assert {f.path for f in findings} == {"spec.model.name"}
    assert any("spec.model.name in body should match" in f.message for f in findings)
    assert all(len(f.message) <= 1024 for f in findings)


def test_an_object_the_evaluator_cannot_walk_is_named_not_a_crash(chart_crds: dict[str, Any]) -> None:
    """A free-form value nested deeper than Python's recursion (stored before the depth bound;
    the apiserver decodes 10,000 levels) is one object's finding, not the end of the check."""
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    job = stored(next(d for d in VALID if d["kind"] == "DaemonJob"))
    job["spec"]["arguments"] = {"deep": deep}
    other = workload()
    findings = check(chart_crds, [job, other])
    [finding] = findings
    assert (finding.kind, finding.name, finding.problem) == (
        "DaemonJob",
        job["metadata"]["name"],
        "unreadable",
    )
    assert finding.blocking
    assert "nested too deeply" in finding.message


def test_a_finding_quotes_a_stored_name_bounded(chart_crds: dict[str, Any]) -> None:
    obj = workload()
    obj["spec"]["x" * 100_000] = 1  # a field the new schema drops, named by its author
    [finding] = check_object(chart_crds, obj)
    assert finding.problem == "pruned"
    assert len(finding.path) <= 1024
    assert finding.path.startswith("spec.xxx")
