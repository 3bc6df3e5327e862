"""Issue 15: two workloads in two namespaces claim one model name. The operator (serving both
namespaces) reports the loser's ``Routable=False`` with reason ``NameConflict`` naming the
winner, by the gateway's rule (plan/names.py: the older claim keeps it); an unrelated workload
is unaffected; when the winner goes, the loser's condition clears."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, wait_condition, workload

Factory = Callable[..., OperatorProcess]


def test_the_loser_of_a_name_says_who_keeps_it(
    kube: KubeApi, namespace: str, operator_factory: Factory
) -> None:
    other = f"{namespace}-b"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        kube.wait(lambda: kube.get("v1", "ServiceAccount", "default", namespace=other), timeout=30, what="SA")
        operator_factory(namespace, "-n", other)
        dup = f"dup-{namespace}"
        model = {"name": "Qwen/Qwen3-0.6B", "servedName": dup}
        kube.apply(workload("first", namespace, model=model))
        wait_condition(kube, namespace, "first", "Routable", reason="NamesAccepted", timeout=60)
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        kube.apply(workload("second", other, model={**model, "servedName": "mine", "aliases": [dup]}))
        loser = wait_condition(kube, other, "second", "Routable", "False", reason="NameConflict", timeout=60)
        message = next(c["message"] for c in loser["status"]["conditions"] if c["type"] == "Routable")
        assert f"alias '{dup}' is served by {namespace}/first" in message
        assert "routes this workload as 'mine' only" in message
        # The winner is untouched, and an unrelated workload becomes routable meanwhile.
        wait_condition(kube, namespace, "first", "Routable", reason="NamesAccepted", timeout=10)
        kube.apply(
            workload("third", namespace, model={"name": "Qwen/Qwen3-0.6B", "servedName": f"solo-{namespace}"})
        )
        wait_condition(kube, namespace, "third", "Routable", reason="NamesAccepted", timeout=60)
        wait_condition(kube, namespace, "third", "Ready", timeout=90)
        # The winner goes: the loser gets the name, and says so without any change of its own.
        kube.delete(API, "InferenceWorkload", "first", namespace=namespace)
        wait_condition(kube, other, "second", "Routable", reason="NamesAccepted", timeout=60)
    finally:
        kube.delete("v1", "Namespace", other)
