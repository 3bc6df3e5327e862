"""Recipe registries through the daemon API over real HTTP: ``catalog.registries*``, ``catalog.refresh``
and the catalog's view of a registry's Recipes; and the four proxy operations that stay disabled.

A shim and an operator (every controller, the RecipeRegistry controller among them) serve a
namespace of the testbed (``tests/shim/conftest.py``); registries are fetched from a real git
server on loopback (``tests/gitserver.py``).

Tested:

- ``proxy.install_service``, ``proxy.uninstall_service``, ``proxy.discovery.ensure`` and
  ``proxy.discovery.stop`` answer 403 ``FeatureDisabled`` (``not_applicable``) with their reason
  and alternative, by name and by alias (ADR 0053), and are absent from ``/v1/ops``.
- The configuration operations: a principal with the daemon's admin scope but no Kubernetes
  permission on ``reciperegistries`` is refused (``PermissionError``) and nothing is created; a
  name that is no DNS label and URLs the CRD refuses (``file://``, user information) are 422 at
  submission; an operate-scope caller is 403. With the permission: ``add`` creates an untrusted,
  enabled RecipeRegistry writing into the API's namespace and answers every registry; a second
  ``add`` of the name fails with the reference's ``SparkrunError`` "already exists"; ``trust``
  sets ``trusted`` and ``acknowledgeTrust``, ``untrust`` clears them, ``disable``/``enable`` flip
  ``enabled``; ``catalog.registries`` (read) lists by name; ``remove`` deletes it, and ``remove``
  or ``enable`` of an unknown name fails "not found".
- End to end with the controller: ``catalog.refresh`` of a registry whose repository holds two
  recipes reports it updated; ``catalog.recipes`` and ``catalog.search`` list them under their
  catalog names with the registry's name (the reference is the Recipe object's name) and
  ``catalog.recipe`` answers ``source_kind: registry``, untrusted until the registry is trusted;
  a registry whose repository does not exist is in ``unavailable_registries`` and in
  ``catalog.refresh``'s ``failed``; a disabled registry's recipes are not listed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_operator.ops import catalog
from tests.gitserver import GitServer
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

RBAC = "rbac.authorization.k8s.io/v1"
PROXY_OPERATIONS = {
    "proxy.install_service": {},
    "proxy.uninstall_service": {},
    "proxy.discovery.ensure": {"generation": "1"},
    "proxy.discovery.stop": {},
}
RECIPE = """\
recipe_version: "2"
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
metadata:
  description: {description}
defaults:
  port: 8000
  tensor_parallel: 1
"""


def _name(daemon: Daemon, suffix: str) -> str:
    """A registry name of this module's namespace (RecipeRegistries are cluster-scoped)."""
    return f"{daemon.namespace}-{suffix}"


def _job(daemon: Daemon, who: str, name: str, arguments: dict[str, Any], timeout: float = 120) -> Any:
    return daemon.wait_job(daemon.submit(who, name, arguments), who, timeout=timeout)


def _succeeded(daemon: Daemon, who: str, name: str, arguments: dict[str, Any]) -> Any:
    job = _job(daemon, who, name, arguments)
    assert job["state"] == "succeeded", job
    return job["result"]


def _failed(daemon: Daemon, name: str, arguments: dict[str, Any], who: str = "admin") -> dict[str, Any]:
    job = _job(daemon, who, name, arguments)
    assert job["state"] == "failed", job
    error: dict[str, Any] = job["error"]
    return error


def _query(daemon: Daemon, who: str, name: str, arguments: dict[str, Any]) -> Any:
    answer = daemon.post_op(who, name, arguments)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _registry(daemon: Daemon, name: str) -> dict[str, Any] | None:
    return daemon.kube.get(API, "RecipeRegistry", name)


@pytest.fixture(scope="module")
def registries(daemon: Daemon) -> Iterator[list[str]]:
    """The names of the RecipeRegistries this module made (deleted at the end)."""
    made: list[str] = []
    yield made
    for name in made:
        daemon.kube.delete(API, "RecipeRegistry", name)


@pytest.fixture(scope="module")
def registry_admin(daemon: Daemon, registries: list[str]) -> Iterator[None]:
    """The ``admin`` principal may manage RecipeRegistries itself (a ClusterRole, as a cluster
    administrator has)."""
    name = f"{daemon.namespace}-registries"
    daemon.kube.create(
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["sparkrun.dev"],
                    "resources": ["reciperegistries"],
                    "verbs": ["get", "list", "create", "patch", "delete"],
                }
            ],
        }
    )
    daemon.kube.create(
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "admin", "namespace": daemon.namespace}],
        }
    )
    yield
    daemon.kube.delete(RBAC, "ClusterRoleBinding", name)
    daemon.kube.delete(RBAC, "ClusterRole", name)


@pytest.mark.parametrize("name", sorted(PROXY_OPERATIONS))
def test_proxy_service_operations_are_not_applicable(daemon: Daemon, name: str) -> None:
    op = catalog.load().get(name)
    assert op.http_path is not None
    with daemon.http("admin") as client:
        listed = {entry["name"] for entry in client.get("/v1/ops").json()}
        answers = [
            client.post(f"/v1/ops/{name}", json=PROXY_OPERATIONS[name]),
            client.post(op.http_path, json=PROXY_OPERATIONS[name]),
        ]
    assert name not in listed
    for answer in answers:
        assert answer.status_code == 403, answer.text
        body = answer.json()
        assert body["detail"] == op.availability.describe(name)
        assert body["error"]["type"] == "FeatureDisabled"
        assert body["error"]["attrs"]["reason"] == "not_applicable"
        assert body["error"]["attrs"]["alternative"] == op.availability.alternative
        assert "Deployment" in body["error"]["attrs"]["alternative"]


def test_a_registry_needs_the_principals_own_permission(daemon: Daemon, registries: list[str]) -> None:
    name = _name(daemon, "refused")
    registries.append(name)
    error = _failed(daemon, "catalog.registries.add", {"name": name, "url": "https://example.com/r.git"})
    assert error["error"]["type"] == "PermissionError"
    assert error["error"]["attrs"]["reason"] == "registry_not_authorized"
    assert "reciperegistries.sparkrun.dev (cluster-scoped)" in error["detail"]
    assert _registry(daemon, name) is None
    refused = daemon.post_op(
        "operator", "catalog.registries.add", {"name": name, "url": "https://example.com/r"}
    )
    assert (refused.status_code, refused.json()) == (403, {"detail": "Insufficient permission"})


def test_another_namespaces_registry_is_not_shown_refreshed_or_probed(
    daemon: Daemon, registries: list[str]
) -> None:
    """A RecipeRegistry an administrator made for another namespace (cluster-scoped, no tenant
    role on it): the daemon API of this namespace does not list it (its URL and description are
    that namespace's business), ``catalog.refresh`` here does not make it fetch, and an admin of
    this namespace without the Kubernetes permission learns nothing of which names exist."""
    name = _name(daemon, "elsewhere")
    registries.append(name)
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "RecipeRegistry",
            "metadata": {"name": name},
            "spec": {
                "url": "https://git.example.com/other-team/private-models.git",
                "description": "other team's models",
                "targetNamespace": "default",
                "enabled": True,
            },
        }
    )
    listed = _query(daemon, "reader", "catalog.registries", {})
    assert name not in [r["name"] for r in listed]
    assert all(r["target_namespace"] == daemon.namespace for r in listed), listed
    refreshed = _succeeded(daemon, "operator", "catalog.refresh", {})
    assert name not in refreshed["updated"]
    annotations = ((_registry(daemon, name) or {})["metadata"]).get("annotations") or {}
    assert "sparkrun.dev/sync-requested" not in annotations
    for target in (name, _name(daemon, "no-such-registry")):
        error = _failed(daemon, "catalog.registries.enable", {"name": target})
        assert error["error"]["type"] == "PermissionError", error
        assert "not found" not in error["detail"]


def test_configuration_operations(daemon: Daemon, registries: list[str], registry_admin: None) -> None:
    add = "catalog.registries.add"
    bad_name = daemon.refused_at_submission(
        "admin", add, {"name": "Not_A_Label", "url": "https://example.com/r"}
    )
    assert "DNS-1123 label" in bad_name
    for url in ("file:///etc/passwd", "https://user:secret@example.com/r.git", "ssh://example.com/r"):
        detail = daemon.refused_at_submission("admin", add, {"name": _name(daemon, "x"), "url": url})
        assert "url must be https://, http:// or git://" in detail, detail
        assert "secret" not in detail  # the credentials in a refused URL are not echoed
    first, second = _name(daemon, "b"), _name(daemon, "a")
    registries.extend([first, second])
    result = _succeeded(
        daemon, "admin", add, {"name": first, "url": "https://example.com/b.git", "subpath": "reg"}
    )
    row = next(r for r in result["registries"] if r["name"] == first)
    assert row == {
        "name": first,
        "enabled": True,
        "visible": True,
        "trusted": False,
        "cached": False,
        "url": "https://example.com/b.git",
        "subpath": "reg",
        "description": "",
        "commit": None,
        "target_namespace": daemon.namespace,
        "synced": row["synced"],  # the controller may have tried (and failed) to fetch already
    }
    stored = _registry(daemon, first)
    assert stored is not None
    assert stored["spec"]["targetNamespace"] == daemon.namespace
    assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sparkrun-daemon-api"
    _succeeded(daemon, "admin", add, {"name": second, "url": "git://example.com/a"})
    duplicate = _failed(daemon, add, {"name": first, "url": "https://example.com/other.git"})
    assert duplicate["detail"] == f"Registry configuration failed: Registry {first!r} already exists"
    assert duplicate["error"]["type"] == "SparkrunError"

    for unacknowledged in ({"name": first}, {"name": first, "acknowledge_trust": False}):
        assert "acknowledge_trust" in daemon.refused_at_submission(
            "admin", "catalog.registries.trust", unacknowledged
        )
    trusted = _succeeded(
        daemon, "admin", "catalog.registries.trust", {"name": first, "acknowledge_trust": True}
    )
    assert next(r for r in trusted["registries"] if r["name"] == first)["trusted"] is True
    spec = (_registry(daemon, first) or {})["spec"]
    assert (spec["trusted"], spec["acknowledgeTrust"]) == (True, True)
    _succeeded(daemon, "admin", "catalog.registries.untrust", {"name": first})
    spec = (_registry(daemon, first) or {})["spec"]
    assert (spec["trusted"], spec["acknowledgeTrust"]) == (False, False)
    disabled = _succeeded(daemon, "admin", "catalog.registries.disable", {"name": first})
    assert next(r for r in disabled["registries"] if r["name"] == first)["enabled"] is False
    _succeeded(daemon, "admin", "catalog.registries.enable", {"name": first})
    assert (_registry(daemon, first) or {})["spec"]["enabled"] is True

    listed = _query(daemon, "reader", "catalog.registries", {})
    ours = [r["name"] for r in listed if r["name"] in (first, second)]
    assert ours == sorted([first, second])
    assert [r["name"] for r in listed] == sorted(r["name"] for r in listed)

    removed = _succeeded(daemon, "admin", "catalog.registries.remove", {"name": second})
    assert second not in [r["name"] for r in removed["registries"]]
    assert _registry(daemon, second) is None
    for operation in ("catalog.registries.remove", "catalog.registries.enable"):
        gone = _failed(daemon, operation, {"name": second})
        assert gone["detail"] == f"Registry configuration failed: Registry {second!r} not found"
        assert gone["error"]["type"] == "SparkrunError"


def _until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.3)


def test_refresh_and_the_catalog_of_a_registry(
    daemon: Daemon, registries: list[str], registry_admin: None, git_server: GitServer
) -> None:
    repo = git_server.create_repo(f"{daemon.namespace}-recipes")
    repo.write("recipes/tiny-qwen.yaml", RECIPE.format(description="tiny qwen from git"))
    repo.write("recipes/extra/other-qwen.yaml", RECIPE.format(description="another one"))
    repo.commit("two recipes")
    name, missing = _name(daemon, "git"), _name(daemon, "missing")
    registries.extend([name, missing])
    _succeeded(daemon, "admin", "catalog.registries.add", {"name": name, "url": repo.url_http})
    _succeeded(daemon, "admin", "catalog.registries.add", {"name": missing, "url": repo.url_http + "-gone"})

    refreshed = _succeeded(daemon, "operator", "catalog.refresh", {})
    assert refreshed["updated"][name] is True, refreshed
    assert refreshed["updated"][missing] is False
    assert missing in refreshed["failed"]
    assert name not in refreshed["failed"]
    stored = _registry(daemon, name) or {}
    assert stored["status"]["syncRequest"] == stored["metadata"]["annotations"]["sparkrun.dev/sync-requested"]

    listing = _query(daemon, "reader", "catalog.recipes", {"registry": name})
    rows = listing["recipes"]
    assert sorted(r["name"] for r in rows) == ["other-qwen", "tiny-qwen"], rows
    assert {r["registry"] for r in rows} == {name}
    assert missing in listing["unavailable_registries"]
    assert name not in listing["unavailable_registries"]
    tiny = next(r for r in rows if r["name"] == "tiny-qwen")
    assert (daemon.kube.get(API, "Recipe", tiny["reference"], namespace=daemon.namespace) or {})["metadata"][
        "annotations"
    ]["sparkrun.dev/catalog-name"] == "tiny-qwen"
    found = _query(daemon, "reader", "catalog.search", {"query": "tiny qwen from git"})
    assert [(r["name"], r["registry"], r["reference"]) for r in found] == [
        ("tiny-qwen", name, tiny["reference"])
    ]
    detail = _succeeded(daemon, "reader", "catalog.recipe", {"reference": tiny["reference"]})
    assert (detail["name"], detail["registry"], detail["source_kind"], detail["trusted"]) == (
        "tiny-qwen",
        name,
        "registry",
        False,
    )

    _succeeded(daemon, "admin", "catalog.registries.trust", {"name": name, "acknowledge_trust": True})
    _until(
        "the trusted registry's recipe is trusted",
        lambda: _succeeded(daemon, "reader", "catalog.recipe", {"reference": tiny["reference"]})["trusted"],
    )

    _succeeded(daemon, "admin", "catalog.registries.disable", {"name": name})
    _until(
        "a disabled registry's recipes are not listed",
        lambda: not _query(daemon, "reader", "catalog.recipes", {"registry": name})["recipes"],
    )
    assert name not in _succeeded(daemon, "operator", "catalog.refresh", {})["updated"]
