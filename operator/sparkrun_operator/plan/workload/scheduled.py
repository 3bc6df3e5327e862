"""Stage 5b, the Scheduled condition: are the pods placed, and if not, why (in GPU terms)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.plan.workload.model import (
    PODLESS_AFTER,
    Conditions,
    Observation,
    ObservedJobSet,
    ObservedPod,
    plural,
)
from sparkrun_operator.render.workload import ServingInputs

_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]*[A-Za-z0-9_])")


@dataclass(frozen=True, kw_only=True)
class _Ask:
    """What each replica asks for, and where, in words."""

    gpus: int
    nodes: int
    resource: str
    where: str

    @property
    def text(self) -> str:
        return f"each replica asks {self.nodes} x {self.gpus} {self.resource} (one pod per node)"


def scheduled(
    *,
    cond: Conditions,
    obs: Observation,
    counted: Sequence[ObservedJobSet],
    inputs: ServingInputs | None,
    cluster_problem: str | None,
    memory_problem: str | None = None,
    queued: str | None = None,
) -> None:
    """Set ``Scheduled`` (``queued``: why JobSets wait on Kueue, ``plan/workload/queue.py``)."""
    spec = obs.spec
    if cluster_problem is not None:
        cond.set(c.SCHEDULED, False, c.REASON_CLUSTER_NOT_FOUND, cluster_problem)
        return
    if spec.state == "Stopped":
        cond.set(c.SCHEDULED, False, c.REASON_STOPPED, "state is Stopped: no pods to schedule")
        return
    if memory_problem is not None:
        cond.set(c.SCHEDULED, False, c.REASON_INSUFFICIENT_GPU_MEMORY, memory_problem)
        return
    ask = _Ask(
        gpus=inputs.spec.topology.gpus_per_node if inputs is not None else spec.topology.gpus_per_node,
        nodes=inputs.spec.topology.nodes if inputs is not None else spec.topology.nodes,
        resource=inputs.gpu_resource if inputs is not None else DEFAULT_GPU_RESOURCE,
        where=f"cluster {obs.cluster.name!r}" if obs.cluster is not None else "the cluster",
    )
    pods = [p for p in obs.pods if any(p.jobset == js.name for js in counted)]
    pending = [p for p in pods if p.node is None]
    if pods and not pending:
        cond.set(c.SCHEDULED, True, c.REASON_ALL_PODS_SCHEDULED, f"{plural(len(pods), 'pod')} scheduled")
        return
    if queued is not None and not pending:
        # Kueue holds the JobSets suspended: no pod exists to schedule yet
        cond.set(c.SCHEDULED, False, c.REASON_QUEUED_BY_KUEUE, queued)
        return
    if _no_fitting_nodes(cond, obs, ask) or _unschedulable(cond, obs, ask, pending):
        return
    if _podless(cond, obs, counted, pods):
        return
    if pending or (not pods and counted):
        cond.set(
            c.SCHEDULED,
            False,
            c.REASON_PODS_PENDING,
            f"waiting for {plural(len(pending), 'pod')} to be scheduled" if pending else "waiting for pods",
        )
        return
    cond.set(c.SCHEDULED, False, c.REASON_PODS_PENDING, "no pods yet")


def _no_fitting_nodes(cond: Conditions, obs: Observation, ask: _Ask) -> bool:
    if obs.capacity is None:
        return False
    usable = [n for n in obs.capacity if n.ready and n.schedulable]
    fitting = [n for n in usable if n.allocatable >= ask.gpus]
    if len(fitting) >= ask.nodes:
        return False
    largest = max((n.allocatable for n in usable), default=0)
    cond.set(
        c.SCHEDULED,
        False,
        c.REASON_NO_FITTING_NODES,
        f"{ask.text}; {ask.where} has {plural(len(fitting), 'schedulable node')} with at least {ask.gpus} "
        f"allocatable (largest: {largest}, {plural(len(usable), 'usable node')}): "
        "add nodes, or lower gpusPerNode/nodes",
    )
    return True


def _unschedulable(cond: Conditions, obs: Observation, ask: _Ask, pending: Sequence[ObservedPod]) -> bool:
    unschedulable = [p for p in pending if p.unschedulable]
    if not unschedulable:
        return False
    message = unschedulable[0].unschedulable or ""
    short = [m.group(1) for m in _INSUFFICIENT.finditer(message)]
    if ask.resource not in short:
        cond.set(
            c.SCHEDULED,
            False,
            c.REASON_PODS_PENDING,
            f"{plural(len(unschedulable), 'pod')} unschedulable: {message}",
        )
        return True
    free = ""
    usable = [n for n in obs.capacity or () if n.ready and n.schedulable]
    counts = [n.free for n in usable if n.free is not None]
    if obs.capacity is not None and len(counts) == len(usable):  # counted: see observe.needs_free
        fitting = sum(1 for count in counts if count >= ask.gpus)
        free = (
            f"; {ask.where} has {sum(counts)} {ask.resource} free, on "
            f"{plural(fitting, 'node')} with at least {ask.gpus} free"
        )
    cond.set(
        c.SCHEDULED,
        False,
        c.REASON_INSUFFICIENT_GPU,
        f"{plural(len(unschedulable), 'pod')} cannot be placed: {ask.text}{free}. Scheduler: {message}",
    )
    return True


def _podless(
    cond: Conditions, obs: Observation, counted: Sequence[ObservedJobSet], pods: Sequence[ObservedPod]
) -> bool:
    """A JobSet without pods well after its creation: the JobSet or Job controller refused them."""
    stuck = [
        js
        for js in counted
        if not js.suspended
        and js.created is not None
        and js.jobs == 0
        and not any(p.jobset == js.name for p in pods)
        and obs.now - js.created >= PODLESS_AFTER
    ]
    if not stuck:
        return False
    js = stuck[0]
    # NB: no exact age in the message: it would change (and be written) on every pass.
    cond.set(
        c.SCHEDULED,
        False,
        c.REASON_PODS_PENDING,
        f"JobSet {js.name} has no pods more than {int(PODLESS_AFTER.total_seconds())} s after it was "
        f"created: the JobSet or Job controller could not create them; `kubectl describe jobset "
        f"{js.name}` shows why",
    )
    return True
