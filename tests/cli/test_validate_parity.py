"""``sparkrun-k8s validate`` says what the real kube-apiserver says.

A corpus of bad objects goes twice: through the real command (``validate -o json``, offline) and
to the testbed's kube-apiserver with the CRDs installed (a server-side dry-run create with
strict field validation, what ``kubectl apply --dry-run=server`` sends for a new object). Every
cause the apiserver gives (``field: message``) must be one of validate's lines for that object,
and validate may say nothing the apiserver does not: the same errors, all at once, in the same
words. The corpus covers a bad name together with a topology that breaks a CEL rule, several
schema errors with CEL rules still running, an unsupported value, a missing field, a string
too long, too many items, a wrong type (CEL skipped), CEL rules with reasons and field paths,
a scalar's CEL rule (its value quoted as Go quotes it) and an undeclared field.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.cli.conftest import SPARKRUN_K8S
from tests.corpus import load_examples

pytestmark = pytest.mark.testbed


def _workload(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(load_examples()["inferenceworkload"])
    doc["metadata"]["name"] = name
    doc["spec"]["model"] = {"name": "parity-org/parity-model", "servedName": "parity-served"}
    change(doc)
    return doc


def _benchmark(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(load_examples()["inferencebenchmark"])
    doc["metadata"]["name"] = name
    change(doc)
    return doc


def _name_and_topology(d: dict[str, Any]) -> None:
    d["metadata"]["name"] = "Bad_Name"
    d["spec"]["topology"] = {"nodes": 3, "gpusPerNode": 1, "tensorParallel": 1}


def _several(d: dict[str, Any]) -> None:
    d["spec"]["replicas"] = -1
    d["spec"]["engine"] = {"gpuMemoryUtilization": 5}
    d["spec"]["model"]["servedName"] = " tab\there"
    d["spec"]["topology"] = {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 1}


CORPUS: dict[str, dict[str, Any]] = {
    "name-and-cel": _workload("p-name", _name_and_topology),
    "several-schema-and-cel": _workload("p-several", _several),
    "enum": _workload("p-enum", lambda d: d["spec"].__setitem__("engine", {"kind": "sglang-x"})),
    "required": _workload("p-required", lambda d: d["spec"]["model"].pop("name")),
    "max-length": _workload("p-long", lambda d: d["spec"]["model"].__setitem__("revision", "r" * 300)),
    "max-items": _workload(
        "p-items", lambda d: d["spec"]["model"].__setitem__("aliases", [f"a{i}" for i in range(17)])
    ),
    "wrong-type": _workload("p-type", lambda d: d["spec"]["topology"].__setitem__("nodes", "two")),
    "cel-forbidden": _workload(
        "p-forbidden", lambda d: d["spec"].__setitem__("pod", {"automountServiceAccountToken": True})
    ),
    "cel-required-reason": _benchmark(
        "p-bench",
        lambda d: d["spec"].__setitem__("target", {"url": "http://parity.invalid:8000/v1"}),
    ),
    "unknown-field": _workload("p-unknown", lambda d: d["spec"].__setitem__("gpuCount", 4)),
}


def _apiserver(kube: KubeApi, doc: dict[str, Any]) -> list[str]:
    """The apiserver's causes (``field: message``) for a dry-run create of ``doc``."""
    plural = {"InferenceWorkload": "inferenceworkloads", "InferenceBenchmark": "inferencebenchmarks"}
    path = f"/apis/sparkrun.dev/v1alpha1/namespaces/default/{plural[doc['kind']]}"
    try:
        kube.request("POST", path, params={"dryRun": "All", "fieldValidation": "Strict"}, json=doc)
    except ApiError as error:
        causes = (error.body.get("details") or {}).get("causes") or []
        if error.status == 400:  # strict decoding: one message, no causes
            return [error.message]
        if error.status != 422:
            raise
        return [f"{c.get('field', '')}: {c['message']}" for c in causes]
    raise AssertionError(f"the apiserver accepted {doc['metadata']['name']}")


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """validate's lines per case: the real console script, as a user runs it (no cluster)."""
    path = tmp_path_factory.mktemp("parity") / "bad.yaml"
    path.write_text(yaml.safe_dump_all(CORPUS.values()))
    result = subprocess.run(
        [SPARKRUN_K8S, "validate", "-o", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200"},
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [r["result"] for r in report] == ["rejected"] * len(CORPUS), report
    return {
        case: [f"{e['field']}: {e['message']}" for e in item["errors"]]
        for case, item in zip(CORPUS, report, strict=True)
    }


@pytest.mark.parametrize("case", [c for c in CORPUS if c != "unknown-field"])
def test_validate_gives_every_cause_the_apiserver_gives(
    case: str, kube: KubeApi, crds: list[str], offline: dict[str, list[str]]
) -> None:
    server = _apiserver(kube, CORPUS[case])
    assert sorted(offline[case]) == sorted(server), {"validate": offline[case], "apiserver": server}


def test_an_undeclared_field_is_named_as_the_apiserver_names_it(
    kube: KubeApi, crds: list[str], offline: dict[str, list[str]]
) -> None:
    [server] = _apiserver(kube, CORPUS["unknown-field"])
    assert offline["unknown-field"] == ['spec: unknown field "spec.gpuCount"']
    assert 'strict decoding error: unknown field "spec.gpuCount"' in server


def test_a_bad_name_and_a_broken_topology_are_reported_together(offline: dict[str, list[str]]) -> None:
    """The issue's report: one regex for the name, the CEL rule never mentioned."""
    lines = offline["name-and-cel"]
    assert any(
        line.startswith('metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123') for line in lines
    )
    assert (
        "spec.topology.nodes: Invalid value: tensorParallel x pipelineParallel must be a multiple of nodes"
        in lines
    )
