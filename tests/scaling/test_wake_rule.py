"""The one wake rule (``plan/wake.py``) on the states a person can combine with the idle policy's
zero, and what the daemon API reports for them (issue 27, second pass).

A workload the idle policy took to zero replicas can also be given ``state: Stopped`` or
``state: Sleeping`` (a platform team parks it for the weekend; Git sets a state). A wake, from
the gateway or from ``workloads.wake``, must bring its replicas back, not only its state: else the
daemon API's wake waits for a Ready that never comes, and the gateway's held requests wait one
re-patch back-off (5 s) longer before the second patch. The user's own zero (no idle policy)
stays off whatever the state.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.gateway.kube import workload_entry
from sparkrun_operator.ops.executors.workloads.inventory import state
from sparkrun_operator.plan import wake

IDLE = {"idle": {"zeroAfterSeconds": 600}}
FLOOR_ZERO = {"autoscaling": {"minReplicas": 0, "maxReplicas": 4, "target": {"kvCacheUsage": 0.8}}}


def _iw(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A workload named unlike its model and served name, in a namespace of its own."""
    model = {"name": "Qwen/Qwen3-0.6B", "servedName": "assistant"}
    served = {"name": "Qwen/Qwen3-0.6B", "servedName": "assistant", "capabilities": ["text-generation"]}
    return {
        "metadata": {"namespace": "team-b", "name": "chat-east"},
        "spec": {"model": model, **spec},
        "status": {"model": served, **(status or {})},
    }


@pytest.mark.parametrize("policy", [IDLE, FLOOR_ZERO])
@pytest.mark.parametrize("parked", ["Stopped", "Sleeping"])
def test_a_parked_workload_at_the_idle_zero_wakes_from_zero(policy: dict[str, Any], parked: str) -> None:
    obj = _iw({"replicas": 0, "state": parked, **policy}, {"scaling": {"resumeReplicas": 2}})
    assert wake.resting_of(obj) == "Zero"  # the wake writes replicas (and state) in one patch
    entry = workload_entry(obj, [])
    assert entry is not None
    assert (entry.resting, entry.resume_replicas, entry.wakeable) == ("Zero", 2, True)
    assert entry.state == parked  # routed by its state: nothing reaches it until it runs


@pytest.mark.parametrize("parked", ["Stopped", "Sleeping"])
def test_the_users_own_zero_stays_a_plain_state_wake(parked: str) -> None:
    obj = _iw({"replicas": 0, "state": parked})
    assert wake.resting_of(obj) == parked  # only the state: the replicas stay the user's 0


def test_the_daemon_api_reports_each_zero_as_what_it_is() -> None:
    assert state(_iw({"replicas": 0, **IDLE}, {"phase": "ScaledToZero"})) == "scaled_to_zero"
    assert state(_iw({"replicas": 0, **FLOOR_ZERO}, {"phase": "ScaledToZero"})) == "scaled_to_zero"
    # the user's own zero: nothing starts it (it was reported "starting")
    assert state(_iw({"replicas": 0}, {"phase": "ScaledToZero"})) == "stopped"
    assert state(_iw({"replicas": 0, "state": "Stopped", **IDLE})) == "stopped"
