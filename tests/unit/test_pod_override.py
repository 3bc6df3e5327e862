"""``spec.pod`` of an InferenceWorkload: its CRD rules (offline admission over the generated
``crds/``, the same schema the apiserver gets; ``tests/tenancy/test_pod_security.py`` runs the
same cases on the real apiserver) and what it renders onto the engine pods (and only them)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.admission import validate
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render.workload import ServingInputs, render_jobset

ROOT = Path(__file__).resolve().parents[2]

#: (case, spec.pod, the field path the refusal names): each refused by the CRD's rules.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("sparkrun label", {"labels": {"sparkrun.dev/workload": "other"}}, "spec.pod.labels"),
    ("sparkrun subdomain label", {"labels": {"x.sparkrun.dev/role": "leader"}}, "spec.pod.labels"),
    ("app.kubernetes.io label", {"labels": {"app.kubernetes.io/managed-by": "me"}}, "spec.pod.labels"),
    ("jobset label", {"labels": {"jobset.sigs.k8s.io/jobset-name": "x"}}, "spec.pod.labels"),
    ("kueue annotation", {"annotations": {"kueue.x-k8s.io/queue-name": "q"}}, "spec.pod.annotations"),
    ("job-name label", {"labels": {"job-name": "x"}}, "spec.pod.labels"),
    ("malformed key", {"labels": {"bad key": "x"}}, "spec.pod.labels"),
    ("long key", {"labels": {"a" * 400: "x"}}, "spec.pod.labels"),
    ("bad label value", {"labels": {"team": "a b"}}, "spec.pod.labels.team"),
    ("too many labels", {"labels": {f"k{i}": "v" for i in range(65)}}, "spec.pod.labels"),
    ("long annotation", {"annotations": {"note": "x" * 4097}}, "spec.pod.annotations.note"),
    (
        "token with default account",
        {"automountServiceAccountToken": True},
        "spec.pod.automountServiceAccountToken",
    ),
    (
        "token naming default",
        {"automountServiceAccountToken": True, "serviceAccountName": "default"},
        "spec.pod.automountServiceAccountToken",
    ),
    ("privileged", {"containerSecurityContext": {"privileged": True}}, "spec.pod.containerSecurityContext"),
    ("host network", {"hostNetwork": True}, "spec.pod"),
    (
        "pod runAsUser 0 and non-root",
        {"securityContext": {"runAsUser": 0, "runAsNonRoot": True}},
        "spec.pod.securityContext.runAsUser",
    ),
    ("negative uid", {"securityContext": {"runAsUser": -1}}, "spec.pod.securityContext.runAsUser"),
    (
        "localhost without profile",
        {"securityContext": {"seccompProfile": {"type": "Localhost"}}},
        "spec.pod.securityContext.seccompProfile.localhostProfile",
    ),
    (
        "lowercase capability",
        {"containerSecurityContext": {"capabilities": {"add": ["ipc_lock"]}}},
        "spec.pod.containerSecurityContext.capabilities.add[0]",
    ),
    ("bad account name", {"serviceAccountName": "Not_A_Name"}, "spec.pod.serviceAccountName"),
]

ADMITTED: list[tuple[str, dict[str, Any]]] = [
    (
        "labels and annotations",
        {
            "labels": {"team": "ml", "example.com/cost-center": "42"},
            "annotations": {
                "prometheus.io/scrape": "true",
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
            },
        },
    ),
    (
        "non-root",
        {
            "securityContext": {
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "runAsNonRoot": True,
                "fsGroup": 65532,
            }
        },
    ),
    ("account with token", {"serviceAccountName": "engine", "automountServiceAccountToken": True}),
    ("rdma", {"containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}),
    (
        "localhost profile",
        {"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}},
    ),
]


def workload(pod: dict[str, Any], name: str = "pod-override") -> dict[str, Any]:
    """A minimal InferenceWorkload with ``spec.pod``."""
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "pod": copy.deepcopy(pod)},
    }


@pytest.fixture(scope="module")
def crd_docs() -> dict[str, dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


@pytest.mark.parametrize(("case", "pod", "path"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_crd_refuses(case: str, pod: dict[str, Any], path: str, crd_docs: dict[str, Any]) -> None:
    errors = validate(workload(pod), crds=crd_docs)
    assert errors, f"{case}: admitted"
    assert any(e.path.startswith(path) for e in errors), (case, [str(e) for e in errors])


@pytest.mark.parametrize(("case", "pod"), ADMITTED, ids=[c[0] for c in ADMITTED])
def test_the_crd_admits(case: str, pod: dict[str, Any], crd_docs: dict[str, Any]) -> None:
    assert validate(workload(pod), crds=crd_docs) == [], case


def _pods(doc: dict[str, Any], pod: dict[str, Any] | None) -> list[dict[str, Any]]:
    spec = InferenceWorkloadSpec.model_validate(doc)
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None
    override = PodOverride.model_validate(pod) if pod is not None else None
    inputs = ServingInputs(spec=resolution.spec, scheduling=spec.scheduling, pod=override)
    js = render_jobset(namespace="ns", workload="w", inputs=inputs, replica=0, suspend=False)
    return [rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]]


TWO_NODES = {
    "model": {"name": "Qwen/Qwen3-0.6B"},
    "topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
}


def test_defaults_mount_no_token_and_keep_the_image_user() -> None:
    for template in _pods(TWO_NODES, None):
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in spec
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }
        assert "annotations" not in template["metadata"]


def test_the_override_reaches_leader_and_workers() -> None:
    pod = {
        "serviceAccountName": "engine",
        "automountServiceAccountToken": True,
        "securityContext": {"runAsUser": 65532, "runAsNonRoot": True, "supplementalGroups": [44]},
        "containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]}, "readOnlyRootFilesystem": True},
        "labels": {"team": "ml"},
        "annotations": {"example.com/note": "x"},
    }
    templates = _pods(TWO_NODES, pod)
    assert len(templates) == 2
    for template in templates:
        spec = template["spec"]
        assert spec["serviceAccountName"] == "engine"
        assert spec["automountServiceAccountToken"] is True
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
            "supplementalGroups": [44],
        }
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
            }
        assert template["metadata"]["labels"]["team"] == "ml"
        assert template["metadata"]["labels"]["sparkrun.dev/workload"] == "w"
        assert template["metadata"]["annotations"] == {"example.com/note": "x"}


def test_the_operator_labels_win_over_the_override() -> None:
    """Admission refuses the operator's keys; a stored object from before cannot displace them."""
    override = PodOverride.model_construct(labels={"sparkrun.dev/workload": "victim"}, annotations={})
    spec = InferenceWorkloadSpec.model_validate({"model": {"name": "Qwen/Qwen3-0.6B"}})
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None
    inputs = ServingInputs(spec=resolution.spec, pod=override)
    js = render_jobset(namespace="ns", workload="w", inputs=inputs, replica=0, suspend=False)
    labels = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert labels["sparkrun.dev/workload"] == "w"


def test_the_override_is_part_of_the_revision_only_when_set() -> None:
    spec = InferenceWorkloadSpec.model_validate({"model": {"name": "Qwen/Qwen3-0.6B"}})
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None
    plain = ServingInputs(spec=resolution.spec).revision()
    assert ServingInputs(spec=resolution.spec, pod=None).revision() == plain
    uid = PodOverride.model_validate({"securityContext": {"runAsUser": 1000}})
    assert ServingInputs(spec=resolution.spec, pod=uid).revision() != plain


def test_tools_pods_are_restricted_and_non_root() -> None:
    """Download, tool and benchmark pods: the tools image's user (65532), set explicitly; a claim
    they write gets its group only when its root lacks it."""
    from tests.tenancy.test_pod_security import tools_pods

    for kind, template in tools_pods().items():
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False, kind
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True, kind
        assert (context["runAsUser"], context["runAsGroup"]) == (65532, 65532), kind
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, kind
        assert ("fsGroup" in context) == (kind in {"download", "tool-rw"}), kind
        for container in spec["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }, kind
