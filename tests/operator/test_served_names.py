"""Issue 24: a recipe served under its own name. The operator resolves a workload's names once
(plan/served.py) and writes them to ``status.model``; ``kubectl get iw`` shows them, the engine
is started with that name, the names index claims it (an older recipe-based claim beats a newer
spec-based one in another namespace), and a recipe's ``--task embed`` makes it an embedding
model."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sparkrun_testbed.kubeapi import KubeApi
from tests.conftest import Kubectl
from tests.operator.conftest import API, OperatorProcess, get_workload, jobsets, wait_condition, workload

Factory = Callable[..., OperatorProcess]
MODEL = "Qwen/Qwen3-0.6B"


def _recipe(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Recipe",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": MODEL, "runtime": "vllm", **spec},
    }


def _served_model(kube: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = get_workload(kube, namespace, name)
        found = ((obj or {}).get("status") or {}).get("model")
        return dict(found) if found else None

    return kube.wait(probe, timeout=60, what=f"{namespace}/{name} status.model")


def _columns(kubectl: Kubectl, namespace: str, name: str) -> dict[str, str]:
    """``kubectl get iw NAME`` as header -> value (no value of ours contains a space)."""
    lines = kubectl("get", "iw", name, "-n", namespace).stdout.splitlines()
    assert len(lines) == 2, lines
    header, row = lines[0].split(), lines[1].split()
    assert len(header) == len(row), lines
    return dict(zip(header, row, strict=True))


def test_a_recipe_served_under_its_own_name(
    kube: KubeApi, kubectl: Kubectl, namespace: str, operator_factory: Factory
) -> None:
    other = f"{namespace}-b"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        kube.wait(lambda: kube.get("v1", "ServiceAccount", "default", namespace=other), timeout=30, what="SA")
        operator_factory(namespace, "-n", other)
        kube.apply(_recipe("rx", namespace, defaults={"served_model_name": "served-x"}))
        kube.apply(workload("wl-x", namespace, model=None, recipe={"name": "rx"}))
        wait_condition(kube, namespace, "wl-x", "Ready", timeout=90)
        assert _served_model(kube, namespace, "wl-x") == {
            "name": MODEL,
            "servedName": "served-x",
            "aliases": [],
            "capabilities": ["text-generation"],
        }
        shown = _columns(kubectl, namespace, "wl-x")
        assert (shown["MODEL"], shown["SERVED"]) == (MODEL, "served-x")
        # the engine is started with the name the status gives
        leader = jobsets(kube, namespace, "wl-x")[0]["spec"]["replicatedJobs"][0]["template"]["spec"]
        args = leader["template"]["spec"]["containers"][0]["args"]
        at = args.index("--served-model-name")
        assert args[at + 1] == "served-x"
        assert args.count("--served-model-name") == 1
        wait_condition(kube, namespace, "wl-x", "Routable", reason="NamesAccepted", timeout=30)

        # a newer workload in another namespace claiming the recipe's served name loses it
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        kube.apply(workload("rival", other, model={"name": MODEL, "servedName": "served-x"}))
        loser = wait_condition(kube, other, "rival", "Routable", "False", reason="NameConflict", timeout=60)
        message = next(c["message"] for c in loser["status"]["conditions"] if c["type"] == "Routable")
        assert f"served name 'served-x' is served by {namespace}/wl-x" in message
        wait_condition(kube, namespace, "wl-x", "Routable", reason="NamesAccepted", timeout=10)

        # a recipe whose arguments say --task embed serves embeddings
        kube.apply(_recipe("emb", namespace, command="vllm serve {model} --task embed"))
        kube.apply(workload("wl-e", namespace, model=None, recipe={"name": "emb"}))
        embedding = _served_model(kube, namespace, "wl-e")
        assert (embedding["servedName"], embedding["capabilities"]) == (MODEL, ["embedding"])
    finally:
        kube.delete("v1", "Namespace", other)
