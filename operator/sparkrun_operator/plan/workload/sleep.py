"""Stage 4, sleep/wake: ask Ready leaders' engines to sleep (``state: Sleeping``) or wake.

The engines' sleep state is observed (``/is_sleeping``, in ``obs.asleep``); the calls are
actions the executor performs, and the planner looks again :data:`SLEEP_RECHECK_SECONDS` later.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_operator.plan.workload.model import (
    SLEEP_RECHECK_SECONDS,
    EngineCall,
    Observation,
    ObservedJobSet,
    Plan,
    leader_pod,
)
from sparkrun_operator.recipe.resolve import EffectiveSpec


@dataclass(frozen=True, kw_only=True)
class Sleep:
    """What the Sleeping condition reports: the state asked for, Ready leaders, how many sleep."""

    expected: bool
    ready_leaders: tuple[ObservedJobSet, ...]
    asleep: int


def plan_engines(obs: Observation, out: Plan, effective: EffectiveSpec | None) -> Sleep:
    """Engine calls into ``out``; the sleep state seen."""
    spec = obs.spec
    expected = spec.state == "Sleeping"
    live = [js for js in obs.jobsets if not js.deleting]
    ready_leaders = [js for js in live if js.leader_ready and js.terminal is None and not js.suspended]
    asleep = sum(1 for js in ready_leaders if obs.asleep.get(js.name) is True)
    capable = effective.enable_sleep_mode if effective is not None else spec.engine.enable_sleep_mode
    for js in ready_leaders:
        leader = leader_pod(obs.pods, js.name)
        if leader is None or leader.ip is None:
            continue
        url = f"http://{leader.ip}:{ENGINE_PORT}"
        state = obs.asleep.get(js.name)
        if expected and state is False:
            out.engine.append(EngineCall(jobset=js.name, url=url, action="sleep"))
        elif not expected and state is True and capable:
            out.engine.append(EngineCall(jobset=js.name, url=url, action="wake_up"))
    if out.engine:
        out.later(SLEEP_RECHECK_SECONDS)
    return Sleep(expected=expected, ready_leaders=tuple(ready_leaders), asleep=asleep)
