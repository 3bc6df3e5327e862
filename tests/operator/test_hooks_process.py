"""A recipe's mods and hooks on the testbed (issue 32): a RecipeRegistry on a real git server on
loopback (``tests/gitserver.py``) writes the Recipe and its mod's ConfigMap, the workload runs on
a process node (its pods are real processes), and the hooks really run: the mod's ``run.sh`` and
``pre_exec`` before the engine, ``post_exec`` once it answers. An untrusted registry's recipe
serves with none of them run, and the workload says which it did not run; a mod the registry
does not have is named, and the rest runs."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.gitserver import GitServer
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload
from tests.operator.test_workload_process import ON_PROCESS_NODES
from tests.process.helpers import wait_for

RECIPE = """\
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
defaults:
  served_model_name: {served}
mods:
  - mods/mark
  - mods/missing
pre_exec:
  - echo "pre {{served_model_name}} $SPARKRUN_HOOK" > {out}/pre
post_exec:
  - echo "post $SPARKRUN_HOOK" > {out}/post
post_commands:
  - echo "after $SPARKRUN_HOOK {{base_url}}" > {out}/after
"""
RUN_SH = """\
#!/bin/sh
echo "mod $(cat data/word.txt)" > {out}/mod
"""


@pytest.fixture
def registries(kube: KubeApi) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        kube.delete(API, "RecipeRegistry", name)


def _registry(
    kube: KubeApi, git_server: GitServer, namespace: str, out: Path, *, trusted: bool, made: list[str]
) -> str:
    name = f"reg-{secrets.token_hex(4)}"
    made.append(name)
    repo = git_server.create_repo(name)
    served = f"hooked-{name[-4:]}"
    repo.write(f"recipes/{served}.yaml", RECIPE.format(served=served, out=out))
    repo.write(
        ".sparkrun/registry.yaml", "registries:\n  - name: test\n    recipes: recipes\n    mods: mods\n"
    )
    repo.write("mods/mark/run.sh", RUN_SH.format(out=out), executable=True)
    repo.write("mods/mark/data/word.txt", "applied\n")
    commit = repo.commit("hooked")
    spec: dict[str, Any] = {"url": repo.url_http, "subpath": "recipes", "targetNamespace": namespace}
    if trusted:
        spec |= {"trusted": True, "acknowledgeTrust": True}
    kube.create({"apiVersion": API, "kind": "RecipeRegistry", "metadata": {"name": name}, "spec": spec})

    def synced() -> dict[str, Any] | None:
        obj = kube.get(API, "RecipeRegistry", name)
        cond = condition(obj, "Synced") if obj else None
        return (
            obj
            if cond and cond["status"] == "True" and obj and obj["status"].get("commit") == commit
            else None
        )

    registry = kube.wait(synced, timeout=60, what=f"RecipeRegistry {name} synced")
    assert registry["status"]["mods"] == ["mods/mark"]
    recipe: str = next(e["name"] for e in registry["status"]["recipes"] if e["catalogName"] == served)
    return recipe


def _stages(obj: dict[str, Any]) -> set[tuple[str, str | None]]:
    return {(e["stage"], e.get("outcome")) for e in obj["status"].get("startup") or []}


def test_trusted_hooks_and_mods_run_untrusted_ones_do_not(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    git_server: GitServer,
    netns_network: None,
    registries: list[str],
    tmp_path: Path,
) -> None:
    trusted_out, untrusted_out = tmp_path / "trusted", tmp_path / "untrusted"
    trusted_out.mkdir()
    untrusted_out.mkdir()
    operator_factory(namespace)
    trusted = _registry(kube, git_server, namespace, trusted_out, trusted=True, made=registries)
    untrusted = _registry(kube, git_server, namespace, untrusted_out, trusted=False, made=registries)
    kube.apply(workload("hooked", namespace, recipe={"name": trusted}, scheduling=ON_PROCESS_NODES))
    kube.apply(workload("plain", namespace, recipe={"name": untrusted}, scheduling=ON_PROCESS_NODES))

    obj = wait_condition(kube, namespace, "hooked", "Ready", timeout=120)
    # a mod the registry does not have is named; the rest runs
    applied = condition(obj, "HooksApplied")
    assert applied is not None
    assert (applied["status"], applied["reason"]) == ("False", "ModsUnresolved")
    assert "mod mods/missing (not found in RecipeRegistry" in applied["message"]
    assert (trusted_out / "mod").read_text() == "mod applied\n"
    assert (trusted_out / "pre").read_text().startswith("pre hooked-")
    assert (trusted_out / "pre").read_text().endswith(" pre_exec\n")
    wait_for(lambda: (trusted_out / "post").exists(), timeout=30, what="post_exec ran")
    assert (trusted_out / "post").read_text() == "post post_exec\n"
    assert {("mods", "ok"), ("preExec", "ok")} <= _stages(obj)

    # post_exec's outcome (from the leader's log) and post_commands (a Job of the serving
    # revision, once it is Ready) in the timeline
    def post_commands_ok() -> dict[str, Any] | None:
        found = kube.get(API, "InferenceWorkload", "hooked", namespace=namespace)
        return (
            found
            if found is not None and {("postCommands", "ok"), ("postExec", "ok")} <= _stages(found)
            else None
        )

    kube.wait(post_commands_ok, timeout=90, what="postExec and postCommands ok")
    after = (trusted_out / "after").read_text()
    assert after == f"after post_commands http://hooked.{namespace}.svc:8000/v1\n"

    # the untrusted registry's recipe serves; none of its hooks or mods ran
    obj = wait_condition(kube, namespace, "plain", "Ready", timeout=120)
    applied = condition(obj, "HooksApplied")
    assert applied is not None
    assert (applied["status"], applied["reason"]) == ("False", "Untrusted")
    assert "mods mods/mark, mods/missing; pre_exec; post_exec; post_commands" in applied["message"]
    assert ("preExec", "skipped") in _stages(obj)
    assert sorted(p.name for p in untrusted_out.iterdir()) == []
    (plain,) = jobsets(kube, namespace, "plain")
    engine = plain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["vllm", "serve"]
