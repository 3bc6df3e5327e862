"""Termination messages on process nodes, as a kubelet writes them (``state.terminated.message``).

A container with ``terminationMessagePolicy: FallbackToLogsOnError`` that fails gets the end of
its log (its last 80 lines, at most 2048 bytes); one with the default policy gets none; a
container that writes its ``terminationMessagePath`` (under ``/run``: where a process node can
mount it, in a pod with its own namespaces) gets what it wrote, whatever the policy.
"""

from __future__ import annotations

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from tests.process.helpers import container, phase, pod, pod_spec, shell, wait_pod

pytestmark = pytest.mark.testbed

FALLBACK = "FallbackToLogsOnError"
HUNDRED_LINES = 'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done'


def test_a_failed_container_has_the_end_of_its_log_or_its_own_words(
    kube: KubeApi, namespace: str, process_nodes: list[str], netns_network: None
) -> None:
    spec = pod_spec(
        [
            shell("fallback", f"{HUNDRED_LINES}; exit 4", terminationMessagePolicy=FALLBACK),
            shell("plain", f"{HUNDRED_LINES}; exit 5"),
            shell("fine", f"{HUNDRED_LINES}; exit 0", terminationMessagePolicy=FALLBACK),
            shell(
                "own",
                f"{HUNDRED_LINES}; echo 'my own words' > /run/termination; exit 6",
                terminationMessagePolicy=FALLBACK,
                terminationMessagePath="/run/termination",
            ),
        ]
    )
    kube.create(pod("last-words", spec), namespace=namespace)
    done = wait_pod(kube, namespace, "last-words", lambda p: phase(p) == "Failed", what="pod Failed")

    def terminated(name: str) -> dict[str, object]:
        state: dict[str, object] = container(done, name)["state"]["terminated"]
        return state

    fallback = terminated("fallback")
    assert fallback["exitCode"] == 4
    assert str(fallback["message"]).splitlines() == [f"line {i}" for i in range(20, 100)]
    assert "message" not in terminated("plain")
    assert "message" not in terminated("fine")
    own = terminated("own")
    assert own["exitCode"] == 6
    assert own["message"] == "my own words\n"
