"""Serving revisions on the testbed (ADR 0046; ``plan/workload/history.py``): the real operator
process, kube-apiserver and JobSet controller.

- two revisions and a rollback: an engine image change makes a second ControllerRevision; a
  rollback pin (``spec.rollout.revision: 1``) makes a third (``rollbackOf: 1``) and the JobSets
  run the first image again;
- a workload from a Recipe whose Recipe is deleted: ``SourcesAvailable=False``, still serving,
  and a JobSet deleted meanwhile is made again from the kept revision;
- ``apply: OnRequest``: an image change is ``status.drift`` (``UpToDate=False`` ``DriftPending``)
  and the pods stay; approving its hash rolls it out.

Names differ from the model, the recipe and the served name; everything runs in a fresh,
non-default namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import (
    API,
    OperatorProcess,
    condition,
    get_workload,
    jobsets,
    wait_condition,
    workload,
)

Factory = Callable[..., OperatorProcess]
IMAGE_A = "vllm/vllm-openai:v0.11.0"
IMAGE_B = "vllm/vllm-openai:v0.11.2"
LABEL_WORKLOAD = "sparkrun.dev/workload"
LABEL_REVISION = "sparkrun.dev/revision"


def _patch(kube: KubeApi, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _revisions(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    """The workload's ControllerRevisions (as ``kubectl get controllerrevisions -l`` lists them)."""
    items = kube.list_items(
        "apps/v1", "ControllerRevision", namespace=namespace, label_selector=f"{LABEL_WORKLOAD}={name}"
    )
    return sorted(items, key=lambda r: int(r["revision"]))


def _images(kube: KubeApi, namespace: str, name: str) -> set[str]:
    return {
        c["image"]
        for js in jobsets(kube, namespace, name)
        for rj in js["spec"]["replicatedJobs"]
        for c in rj["template"]["spec"]["template"]["spec"]["containers"]
    }


def _serving(kube: KubeApi, namespace: str, name: str, revision: str, image: str) -> bool:
    """Every JobSet of the workload runs ``revision`` with ``image``, and it is Ready."""
    found = jobsets(kube, namespace, name)
    obj = get_workload(kube, namespace, name)
    ready = condition(obj, "Ready")
    return (
        bool(found)
        and all(js["metadata"]["labels"].get(LABEL_REVISION) == revision for js in found)
        and _images(kube, namespace, name) == {image}
        and ready is not None
        and ready.get("status") == "True"
    )


def test_two_revisions_and_a_rollback(kube: KubeApi, namespace: str, operator_factory: Factory) -> None:
    operator_factory(namespace)
    name = "svc-rollback"
    kube.apply(
        workload(
            name,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "chat-rb"},
            engine={"image": IMAGE_A},
        )
    )
    wait_condition(kube, namespace, name, "Ready", timeout=120)
    first = kube.wait(lambda: _revisions(kube, namespace, name) or None, timeout=60, what="revision 1")
    assert [r["metadata"]["name"] for r in first] == [f"{name}-1"]
    one = first[0]
    rev_a = one["data"]["hash"]
    assert one["metadata"]["labels"][LABEL_REVISION] == rev_a
    owner = one["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("InferenceWorkload", name, True)
    assert one["data"]["cause"] == "Created"

    _patch(kube, namespace, name, {"engine": {"image": IMAGE_B}})
    two = kube.wait(
        lambda: r if len(r := _revisions(kube, namespace, name)) == 2 else None, timeout=60, what="revision 2"
    )
    rev_b = two[1]["data"]["hash"]
    assert rev_b != rev_a
    assert any(ch["field"] == "engine.image" for ch in two[1]["data"]["changes"])
    kube.wait(
        lambda: _serving(kube, namespace, name, rev_b, IMAGE_B) or None,
        timeout=120,
        what="revision 2 serving",
    )

    _patch(kube, namespace, name, {"rollout": {"revision": 1}})
    three = kube.wait(
        lambda: r if len(r := _revisions(kube, namespace, name)) == 3 else None, timeout=60, what="revision 3"
    )
    data = three[2]["data"]
    assert (three[2]["metadata"]["name"], data["cause"], data["rollbackOf"], data["hash"]) == (
        f"{name}-3",
        "Rollback",
        1,
        rev_a,
    )
    # the new revision serves the old settings: the first image again
    kube.wait(
        lambda: _serving(kube, namespace, name, rev_a, IMAGE_A) or None,
        timeout=120,
        what="the rollback serving",
    )
    obj = wait_condition(kube, namespace, name, "UpToDate", "False", reason="RevisionPinned", timeout=60)
    status = obj["status"]
    assert status["history"]["current"] == {"number": 3, "hash": rev_a, "name": f"{name}-3"}
    assert status["history"]["rollbackOf"] == 1
    assert (status["drift"]["reason"], status["drift"]["revision"]) == ("RevisionPinned", rev_b)
    assert status["revision"] == rev_a


def test_a_deleted_recipe_keeps_the_workload_serving(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    kube.apply(
        {
            "apiVersion": API,
            "kind": "Recipe",
            "metadata": {"name": "rcp-source", "namespace": namespace},
            "spec": {
                "model": "Qwen/Qwen3-0.6B",
                "runtime": "vllm",
                "container": IMAGE_A,
                "defaults": {"served_model_name": "served-from-recipe"},
            },
        }
    )
    name = "svc-recipe"
    kube.apply(workload(name, namespace, model=None, recipe={"name": "rcp-source"}))
    obj = wait_condition(kube, namespace, name, "Ready", timeout=120)
    assert obj["status"]["effective"]["recipe"].startswith("rcp-source@")
    assert condition(obj, "SourcesAvailable")["status"] == "True"  # type: ignore[index]
    before = {js["metadata"]["uid"] for js in jobsets(kube, namespace, name)}
    revision = obj["status"]["revision"]

    kube.delete(API, "Recipe", "rcp-source", namespace=namespace)
    obj = wait_condition(
        kube, namespace, name, "SourcesAvailable", "False", reason="RecipeNotFound", timeout=60
    )
    assert f"revision 1 ({revision}) keeps serving" in condition(obj, "SourcesAvailable")["message"]  # type: ignore[index]
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]
    assert {js["metadata"]["uid"] for js in jobsets(kube, namespace, name)} == before
    assert obj["status"]["model"]["servedName"] == "served-from-recipe"

    # a JobSet gone meanwhile is made again from the kept revision (the Recipe is still missing)
    for js in jobsets(kube, namespace, name):
        kube.delete("jobset.x-k8s.io/v1alpha2", "JobSet", js["metadata"]["name"], namespace=namespace)

    def remade() -> bool | None:
        found = jobsets(kube, namespace, name)
        fresh = [js for js in found if js["metadata"]["uid"] not in before]
        return (
            bool(fresh) and all(js["metadata"]["labels"][LABEL_REVISION] == revision for js in fresh)
        ) or None

    kube.wait(remade, timeout=60, what="the JobSet made again from revision 1")
    wait_condition(kube, namespace, name, "Ready", timeout=120)
    assert len(_revisions(kube, namespace, name)) == 1


def test_an_image_change_is_drift_until_approved(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    operator_factory(namespace)
    name = "svc-onrequest"
    kube.apply(
        workload(
            name,
            namespace,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "chat-or"},
            engine={"image": IMAGE_A},
            rollout={"apply": "OnRequest"},
        )
    )
    obj = wait_condition(kube, namespace, name, "Ready", timeout=120)
    rev_a = obj["status"]["revision"]
    before = {js["metadata"]["uid"] for js in jobsets(kube, namespace, name)}

    _patch(kube, namespace, name, {"engine": {"image": IMAGE_B}})
    obj = wait_condition(kube, namespace, name, "UpToDate", "False", reason="DriftPending", timeout=60)
    drift = obj["status"]["drift"]
    assert drift["reason"] == "OnRequest"
    assert drift["revision"] != rev_a
    assert [ch["field"] for ch in drift["changes"]] == ["engine.image"]
    assert IMAGE_B in drift["changes"][0]["after"]
    assert obj["status"]["revision"] == rev_a
    assert {js["metadata"]["uid"] for js in jobsets(kube, namespace, name)} == before
    assert _images(kube, namespace, name) == {IMAGE_A}
    assert len(_revisions(kube, namespace, name)) == 1

    _patch(kube, namespace, name, {"rollout": {"approve": drift["revision"]}})
    kube.wait(
        lambda: _serving(kube, namespace, name, drift["revision"], IMAGE_B) or None,
        timeout=120,
        what="the approved drift serving",
    )
    obj = wait_condition(kube, namespace, name, "UpToDate", "True", reason="RevisionCurrent", timeout=60)
    assert obj["status"].get("drift") is None
    revisions = _revisions(kube, namespace, name)
    assert [(r["revision"], r["data"]["cause"]) for r in revisions] == [(1, "Created"), (2, "DriftApplied")]
