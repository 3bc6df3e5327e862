"""Untrusting a registry stops its recipe's hooks even under ``rollout.apply: OnRequest`` (issue 32,
ADR 0056 "Losing trust is a security event, not drift"), on the testbed: a trusted RecipeRegistry
on a real git server on loopback, a workload on a process node whose ``pre_exec`` and mod really
run; once the registry is untrusted the operator rolls the workload, without any approval, to a
copy of its revision without hooks (cause ``TrustWithdrawn``), whose pod runs none of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.gitserver import GitServer
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload
from tests.operator.test_hooks_process import _registry
from tests.operator.test_workload_process import ON_PROCESS_NODES


@pytest.fixture
def registries(kube: KubeApi) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        kube.delete(API, "RecipeRegistry", name)


def test_untrusting_the_registry_stops_the_hooks_under_on_request(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    git_server: GitServer,
    netns_network: None,
    registries: list[str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    operator_factory(namespace)
    recipe = _registry(kube, git_server, namespace, out, trusted=True, made=registries)
    spec: dict[str, Any] = {"recipe": {"name": recipe}, "scheduling": ON_PROCESS_NODES}
    kube.apply(workload("hooked", namespace, rollout={"apply": "OnRequest"}, **spec))
    obj = wait_condition(kube, namespace, "hooked", "Ready", timeout=120)
    first = obj["status"]["revision"]
    assert (out / "pre").exists()
    assert (out / "mod").read_text() == "mod applied\n"

    def hooks_done() -> dict[str, Any] | None:  # post_exec and post_commands of revision 1 too
        found = kube.get(API, "InferenceWorkload", "hooked", namespace=namespace)
        stages = {
            (e["stage"], e.get("outcome")) for e in ((found or {}).get("status") or {}).get("startup") or []
        }
        return found if {("postExec", "ok"), ("postCommands", "ok")} <= stages else None

    kube.wait(hooks_done, timeout=90, what="postExec and postCommands of revision 1 ok")
    assert sorted(p.name for p in out.iterdir()) == ["after", "mod", "post", "pre"]
    for ran in out.iterdir():
        ran.unlink()

    kube.request(
        "PATCH",
        kube.resource_path(API, "RecipeRegistry", name=registries[0]),
        json={"spec": {"trusted": False}},
        headers={"Content-Type": "application/merge-patch+json"},
    )

    def withdrawn() -> dict[str, Any] | None:
        found = kube.get(API, "InferenceWorkload", "hooked", namespace=namespace)
        status = (found or {}).get("status") or {}
        ready = condition(found, "Ready")
        history = status.get("history") or {}
        live = [
            js["metadata"]["labels"]["sparkrun.dev/revision"] for js in jobsets(kube, namespace, "hooked")
        ]
        done = history.get("cause") == "TrustWithdrawn" and live == [status.get("revision")]
        return found if done and ready is not None and ready["status"] == "True" else None

    obj = kube.wait(withdrawn, timeout=180, what="a TrustWithdrawn revision serving alone")
    assert obj["status"]["revision"] != first
    assert obj["status"]["history"]["current"]["number"] == 2
    assert obj["status"].get("drift") is None  # nothing was left to approve
    applied = condition(obj, "HooksApplied")
    assert applied is not None
    assert (applied["status"], applied["reason"]) == ("False", "Untrusted")
    (js,) = jobsets(kube, namespace, "hooked")
    engine = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["vllm", "serve"]
    # the new pod started (Ready) and ran neither the mod nor pre_exec
    assert sorted(p.name for p in out.iterdir()) == []
    revision = kube.get("apps/v1", "ControllerRevision", "hooked-2", namespace=namespace)
    assert revision is not None
    assert revision["data"]["cause"] == "TrustWithdrawn"
    assert "hooks" not in revision["data"]["inputs"]
