"""A RecipeRegistry that does not sync still says why in its status (issue 32): a disabled one
(``Synced`` False, ``Disabled``) and one whose ``targetNamespace`` the operator does not serve
(``TargetNamespaceNotServed``). A pass that does not sync used to end before its status was
written (found capturing the health corpus, tests/health/). Against a real git server on loopback.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.gitserver import GitServer
from tests.operator.conftest import API, OperatorProcess, condition
from tests.operator.test_registry import RECIPE

WAIT_S = 90.0


@pytest.fixture
def names(kube: KubeApi) -> Iterator[tuple[str, str]]:
    token = secrets.token_hex(4)
    made = (f"idle-{token}", f"away-{token}")
    yield made
    for name in made:
        kube.delete(API, "RecipeRegistry", name)


def _patch_spec(kube: KubeApi, name: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        f"/apis/{API}/reciperegistries/{name}",
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _synced(kube: KubeApi, name: str, status: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = kube.get(API, "RecipeRegistry", name)
        if (
            obj is None
            or (obj.get("status") or {}).get("observedGeneration") != obj["metadata"]["generation"]
        ):
            return None
        found = condition(obj, "Synced") or {}
        return obj if (found.get("status"), found.get("reason")) == (status, reason) else None

    return kube.wait(probe, timeout=WAIT_S, what=f"RecipeRegistry {name} Synced {status} {reason}")


def test_disabled_and_not_served_registries_say_so(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    git_server: GitServer,
    names: tuple[str, str],
) -> None:
    idle, away = names
    repo = git_server.create_repo(idle)
    repo.write("recipes/idle-recipe.yaml", RECIPE.format(served="idle"))
    commit = repo.commit("one recipe")
    operator_factory(namespace)
    for name, spec in (
        (idle, {"enabled": False, "targetNamespace": namespace}),
        (away, {"targetNamespace": f"not-served-{secrets.token_hex(3)}"}),
    ):
        kube.create(
            {
                "apiVersion": API,
                "kind": "RecipeRegistry",
                "metadata": {"name": name},
                "spec": {"url": repo.url_http, "subpath": "recipes", **spec},
            }
        )

    disabled = _synced(kube, idle, "False", "Disabled")
    assert (condition(disabled, "Ready") or {}).get("status") == "False"
    assert "commit" not in disabled["status"]
    assert kube.get(API, "Recipe", "idle-recipe", namespace=namespace) is None
    elsewhere = _synced(kube, away, "False", "TargetNamespaceNotServed")
    assert "does not serve namespace not-served-" in (condition(elsewhere, "Synced") or {})["message"]

    # enabled: it syncs; disabled again after a sync: its Recipe and commit stay
    _patch_spec(kube, idle, {"enabled": True})
    assert _synced(kube, idle, "True", "Synced")["status"]["commit"] == commit
    _patch_spec(kube, idle, {"enabled": False})
    again = _synced(kube, idle, "False", "Disabled")
    assert again["status"]["commit"] == commit
    assert kube.get(API, "Recipe", "idle-recipe", namespace=namespace) is not None
