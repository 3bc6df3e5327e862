"""The Argo CD health checks (integrations/argocd/health/, issue 31) run with Debian's
``lua5.1`` against every object of the captured corpus (objects/, written by
hack/capture-health-objects.py from the testbed) and against hostile objects, which must never
make a script raise; and the argocd-cm snippet holds exactly the generated scripts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from tests.health.argocd import REPO, SCRIPTS, health

HERE = Path(__file__).resolve().parent
OBJECTS = HERE / "objects"
EXPECTED: dict[str, dict[str, str]] = yaml.safe_load((HERE / "expected-argocd.yaml").read_text())
KINDS = {
    "inferenceworkload": "InferenceWorkload",
    "inferencecluster": "InferenceCluster",
    "recipe": "Recipe",
    "modelcache": "ModelCache",
    "inferencebenchmark": "InferenceBenchmark",
    "daemonjob": "DaemonJob",
    "reciperegistry": "RecipeRegistry",
}
CASES = sorted(f"{p.parent.name}/{p.stem}" for p in OBJECTS.glob("*/*.yaml"))


@pytest.fixture
def lua(require: Any) -> str:
    found = shutil.which("lua5.1")
    require(found is not None, "lua5.1 not installed (apt-get install lua5.1)")
    assert found is not None
    return found


def test_every_captured_object_has_an_expectation_and_every_kind_a_corpus() -> None:
    assert sorted(EXPECTED) == CASES
    assert {case.split("/")[0] for case in CASES} == set(KINDS)


@pytest.mark.parametrize("case", CASES)
def test_captured_object(case: str, lua: str, tmp_path: Path) -> None:
    kind, _ = case.split("/")
    obj = yaml.safe_load((OBJECTS / f"{case}.yaml").read_text())
    assert obj["kind"] == KINDS[kind]
    status, message = health(lua, KINDS[kind], obj, tmp_path)
    want = EXPECTED[case]
    assert status == want["status"], (case, status, message)
    assert want["message_contains"] in message, (case, message)


def _ahead(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(obj))
    out["metadata"]["generation"] = int(out["status"]["observedGeneration"]) + 1
    return out


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if "observedGeneration" in (yaml.safe_load((OBJECTS / f"{c}.yaml").read_text()).get("status") or {})
    ],
)
def test_a_spec_the_operator_has_not_observed_is_progressing(case: str, lua: str, tmp_path: Path) -> None:
    kind, _ = case.split("/")
    obj = _ahead(yaml.safe_load((OBJECTS / f"{case}.yaml").read_text()))
    status, message = health(lua, KINDS[kind], obj, tmp_path)
    assert status == "Progressing", (case, message)
    assert "not yet observed" in message, message
    assert f"generation {obj['metadata']['generation']}" in message


HUGE = "x" * (1 << 20)
HOSTILE: list[Any] = [
    None,
    {},
    {"kind": "X"},
    {"status": None},
    {"status": "Running"},
    {"status": []},
    {"status": {"phase": 7, "state": {}, "conditions": "Ready"}},
    {
        "status": {
            "phase": "Running",
            "conditions": [None, 3, "x", {"type": "Ready", "status": 1, "reason": [], "message": {}}],
        }
    },
    {
        "status": {
            "phase": HUGE,
            "state": HUGE,
            "message": HUGE,
            "conditions": [{"type": "Ready", "status": "True", "reason": HUGE, "message": HUGE}],
        }
    },
    {"status": {"phase": "Failed", "state": "failed", "error": "boom", "prompt": 5}},
    {"status": {"state": "waiting_input", "prompt": {"message": HUGE}}},
    {"metadata": {"generation": "3"}, "status": {"observedGeneration": "1", "phase": "Ready"}},
    {"metadata": {"generation": 1e308}, "status": {"observedGeneration": -1e308}},
    {"metadata": [], "status": {"conditions": [{"type": "Valid"}] * 100}},
    {"status": {"conditions": {"1": {"type": "Ready"}}}},
    {"status": {"phase": 'Running\u0000\u00e9\n"\\'}},
]


@pytest.mark.parametrize("kind", sorted(KINDS.values()))
def test_hostile_objects_never_raise(kind: str, lua: str, tmp_path: Path) -> None:
    for obj in HOSTILE:
        status, message = health(lua, kind, obj, tmp_path)
        assert status in {"Healthy", "Progressing", "Degraded", "Suspended", "Unknown"}, (obj, status)
        assert len(message) < 4096, (kind, len(message))


def test_the_argocd_cm_snippet_holds_the_scripts() -> None:
    snippet = yaml.safe_load((REPO / "integrations" / "argocd" / "resource-customizations.yaml").read_text())
    assert (snippet["kind"], snippet["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    data = snippet["data"]
    assert sorted(data) == sorted(f"resource.customizations.health.sparkrun.dev_{k}" for k in KINDS.values())
    for kind in KINDS.values():
        assert (
            data[f"resource.customizations.health.sparkrun.dev_{kind}"]
            == (SCRIPTS / f"{kind}.lua").read_text()
        )


def test_the_argocd_chart_values_hold_the_same_scripts() -> None:
    values = yaml.safe_load((REPO / "integrations" / "argocd" / "helm-values.yaml").read_text())
    snippet = yaml.safe_load((REPO / "integrations" / "argocd" / "resource-customizations.yaml").read_text())
    assert values == {"configs": {"cm": snippet["data"]}}


def test_the_documented_patch_merges_into_an_existing_argocd_cm(kube: KubeApi, kubectl: Any) -> None:
    """docs/install.md: ``kubectl -n argocd patch configmap argocd-cm --type merge --patch-file``
    keeps the keys already there and adds one per kind."""
    made = kube.get("v1", "Namespace", "argocd") is None
    if made:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "argocd"}})
    try:
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "argocd-cm", "namespace": "argocd"},
                "data": {"url": "https://argocd.example.com"},
            }
        )
        path = REPO / "integrations" / "argocd" / "resource-customizations.yaml"
        kubectl(
            "-n", "argocd", "patch", "configmap", "argocd-cm", "--type", "merge", "--patch-file", str(path)
        )
        data = kubectl.json("-n", "argocd", "get", "configmap", "argocd-cm")["data"]
        assert data.pop("url") == "https://argocd.example.com"
        assert data == yaml.safe_load(path.read_text())["data"]
    finally:
        if made:
            kube.delete("v1", "Namespace", "argocd")
        else:
            kube.delete("v1", "ConfigMap", "argocd-cm", namespace="argocd")
