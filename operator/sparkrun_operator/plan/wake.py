"""What a wake writes, one rule for every waker: the gateway's (a request) and the daemon API's
``workloads.wake`` (ADR 0045).

A workload rests in one of three ways a wake undoes: ``state: Sleeping``, ``state: Stopped``, or
zero replicas that the idle policy made (``spec.idle.zeroAfterSeconds``, or an autoscaler floor of
``minReplicas: 0``). A user's own ``replicas: 0`` is not a rest: nothing wakes it. At the idle
policy's zero the rest is ``Zero`` whatever the state (someone also set Stopped or Sleeping): a
wake that set only the state would leave it at zero replicas, waiting for a Ready that never comes.

From zero, the wake sets ``spec.replicas`` to the resume count (``status.scaling.resumeReplicas``,
else the autoscaler's floor, at least 1, else 1) with a JSON patch that first tests that replicas
are still 0: two wakers at once (gateway replicas, workers, the daemon API) write it once, and one
that lost the race sets only ``state: Running``. Pure: the callers send the patches.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from sparkrun_operator.api.scaling import MAX_REPLICAS

Resting = Literal["Sleeping", "Zero", "Stopped"]

#: The merge patch of every wake that is not from zero (and of one that lost the race).
STATE_RUNNING: Final[dict[str, Any]] = {"spec": {"state": "Running"}}


def bounded_count(value: Any, low: int) -> int | None:
    """An integer field within ``[low, MAX_REPLICAS]``; anything else is ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_REPLICAS:
        return value
    return None


def idle_zero(spec: dict[str, Any]) -> bool:
    """Whether zero replicas are the idle policy's (or an autoscaler floor of 0): a wake undoes them."""
    idle, autoscaling = spec.get("idle") or {}, spec.get("autoscaling") or {}
    return idle.get("zeroAfterSeconds") is not None or autoscaling.get("minReplicas") == 0


def resting_of(obj: dict[str, Any]) -> Resting | None:
    """How the workload rests, when a wake undoes it; ``None`` else (serving, starting, or the
    user's own zero replicas)."""
    spec = obj.get("spec") or {}
    if spec.get("replicas") == 0 and idle_zero(spec):
        return "Zero"  # NB: also when Stopped or Sleeping: the wake must bring the replicas back
    desired = spec.get("state") or "Running"
    if desired in ("Sleeping", "Stopped"):
        return "Sleeping" if desired == "Sleeping" else "Stopped"
    return None  # NB: Running with the engine still asleep is a wake under way (starting)


def resume_replicas(obj: dict[str, Any]) -> int:
    """Replicas a wake from zero asks for: ``status.scaling.resumeReplicas``, else the
    autoscaler's floor (at least 1), else 1."""
    scaling = (obj.get("status") or {}).get("scaling") or {}
    resume = bounded_count(scaling.get("resumeReplicas"), 1) if isinstance(scaling, dict) else None
    if resume is not None:
        return resume
    floor = bounded_count(((obj.get("spec") or {}).get("autoscaling") or {}).get("minReplicas"), 1)
    return floor or 1


def from_zero(resume: int) -> list[dict[str, Any]]:
    """The JSON patch (``application/json-patch+json``) of a wake from zero: replicas to
    ``resume`` and state Running, only while replicas are still 0 (else the apiserver answers
    422 and the caller sends :data:`STATE_RUNNING` instead)."""
    return [
        {"op": "test", "path": "/spec/replicas", "value": 0},
        {"op": "replace", "path": "/spec/replicas", "value": resume},
        {"op": "add", "path": "/spec/state", "value": "Running"},
    ]
