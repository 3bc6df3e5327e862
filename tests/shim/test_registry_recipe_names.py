"""A registry's recipe is runnable by every name the catalog shows for it, through the daemon API
over real HTTP (a shim and an operator on the testbed; the registry on a real git server).

Tested: ``catalog.search`` lists path-qualified catalog names (``recipes/team-a/qwen``); ``workloads.plan``,
``catalog.recipe`` and ``recipes.validate`` take the catalog name, ``@<registry>/<catalog name>``
and the Recipe object's name alike and answer for the same Recipe; a name no registry has is
"Unknown recipe"; ``workloads.run`` by catalog name creates an InferenceWorkload whose
``spec.recipe.name`` is the Recipe object's name. (Two registries with one catalog name: the
choice, a 409 listing both, in ``tests/unit/test_recipe_lookup.py``.)
"""

from __future__ import annotations

import pytest

from tests.gitserver import GitServer
from tests.shim.conftest import API, Daemon
from tests.shim.test_registry_ops import (  # noqa: F401 (module fixtures)
    RECIPE,
    _failed,
    _name,
    _query,
    _succeeded,
    registries,
    registry_admin,
)

pytestmark = pytest.mark.testbed


def test_a_registry_recipe_by_every_name(
    daemon: Daemon,
    registries: list[str],  # noqa: F811 (the module fixture imported above)
    registry_admin: None,  # noqa: F811
    git_server: GitServer,
) -> None:
    repo = git_server.create_repo(f"{daemon.namespace}-names")
    repo.write("recipes/team-a/qwen.yaml", RECIPE.format(description="team a qwen"))
    repo.write("recipes/team-b/qwen.yaml", RECIPE.format(description="team b qwen"))
    repo.commit("two recipes of one stem")
    registry = _name(daemon, "names")
    registries.append(registry)
    _succeeded(daemon, "admin", "catalog.registries.add", {"name": registry, "url": repo.url_http})
    assert _succeeded(daemon, "operator", "catalog.refresh", {})["updated"][registry] is True

    found = _query(daemon, "reader", "catalog.search", {"registry": registry})
    names = {r["name"]: r["reference"] for r in found}
    team_a, team_b = "recipes/team-a/qwen", "recipes/team-b/qwen"  # sparkrun 0.4.2's path-qualified names
    assert sorted(names) == [team_a, team_b], found
    obj = names[team_a]
    assert obj != team_a
    assert obj != names[team_b]

    spellings = [team_a, f"@{registry}/{team_a}", obj]
    plans = [_succeeded(daemon, "reader", "workloads.plan", {"recipe": r}) for r in spellings]
    assert len({p["recipe_fingerprint"] for p in plans}) == 1, plans
    other = _succeeded(daemon, "reader", "workloads.plan", {"recipe": team_b})
    details = [_succeeded(daemon, "reader", "catalog.recipe", {"reference": r}) for r in spellings]
    assert {(d["name"], d["registry"], d["description"]) for d in details} == {
        (team_a, registry, "team a qwen")
    }
    assert _succeeded(daemon, "reader", "recipes.validate", {"recipe": f"@{registry}/{team_b}"}) == []
    assert other["workload_id"] != plans[0]["workload_id"]

    for unknown in ("team-a/qwen", f"@{registry}/qwen", f"@no-such-registry/{team_a}"):
        error = _failed(daemon, "workloads.plan", {"recipe": unknown}, who="reader")
        assert error["detail"].startswith(f"Unknown recipe: {unknown}"), error

    ran = _succeeded(
        daemon, "operator", "workloads.run", {"recipe": f"@{registry}/{team_a}", "wait_ready": False}
    )
    made = daemon.kube.get(API, "InferenceWorkload", ran["metadata"]["name"], namespace=daemon.namespace)
    assert made is not None
    assert made["spec"]["recipe"]["name"] == obj
    daemon.kube.delete(API, "InferenceWorkload", made["metadata"]["name"], namespace=daemon.namespace)
