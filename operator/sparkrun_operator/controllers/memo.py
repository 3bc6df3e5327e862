"""What every handler of one operator process shares: kopf's ``memo``.

One :class:`Memo` per operator process, built at startup (no module globals): settings, the API
client, the wake-up triggers, metrics, the concurrency gates and the fan-out indexes.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import httpx

from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.failurelog import FailureLog
from sparkrun_operator.controllers.gate import PriorityGate
from sparkrun_operator.controllers.hooks import ModCache
from sparkrun_operator.controllers.kueue import QueueWatch
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.ownership_watch import LeaseWatch
from sparkrun_operator.controllers.resume import Pauses
from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.plan.names import Claim
from sparkrun_operator.plan.workload.model import PoolRefusal, ScalingView

#: :attr:`Memo.scrapes`: the autoscaler's reads of engines at once, operator-wide.
SCRAPES_IN_FLIGHT = 128


@dataclass(kw_only=True)
class Memo:
    """Everything handlers need, passed as kopf's ``memo``."""

    config: OperatorConfig
    kube: Kube
    http: httpx.AsyncClient
    metrics: Metrics
    triggers: Triggers = field(default_factory=Triggers)
    #: Bounds the passes running at once (``OperatorConfig.max_concurrent_passes``).
    gate: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))
    #: The write budget both lanes share (``max_concurrent_writes``), by priority.
    write_gate: PriorityGate = field(default_factory=lambda: PriorityGate(32, reserved=8))
    #: Workload key -> the generation and the ``reconcile-requested`` annotation its last pass
    #: planned for (own status writes skip a pass; a new generation or request does not).
    reconciled: dict[tuple[str, str], tuple[int, str | None]] = field(default_factory=dict)
    #: Workload key -> names it depends on (``recipe``, ``cache``, ``cluster``), for fan-out.
    dependencies: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = field(
        default_factory=dict
    )

    #: Workloads whose last full pass found no candidate node with the GPU memory they need
    #: (``Scheduled=False``, ``InsufficientGPUMemory``): a Node event re-plans them.
    memory_waiting: set[tuple[str, str]] = field(default_factory=set)

    #: Workload key -> the model names it claimed at its last event, so that a change (or a
    #: deletion) re-plans every workload that shares a name with it (``Routable``).
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    #: Workload key -> the autoscaler's news for the planner (``controllers/autoscale.py``): its
    #: last decision and the idle clock, folded into ``status.scaling`` by the next full pass.
    scaling: dict[tuple[str, str], ScalingView] = field(default_factory=dict)
    #: Workload key -> the failures its pods' events showed, log lines redacted (bounded; the
    #: planner folds them into ``status.firstFailure`` / ``lastFailure``).
    failures: FailureLog = field(default_factory=FailureLog)
    #: Engine ``/metrics`` reads in flight across every workload (sockets; a tenant's slow
    #: engines hold theirs for up to the read's deadline).
    scrapes: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SCRAPES_IN_FLIGHT))
    #: Ownership Leases as watched and each leased workload's verdict (``controllers/ownership.py``;
    #: the planner folds the verdict into ``status.lease``).
    ownership: LeaseWatch = field(default_factory=LeaseWatch)
    #: Workload key -> the apiserver's last refusal of its InferencePool (issue 30; e.g. no
    #: ``endpointPickerRef`` on a v1.5 CRD): the planner reports it and applies that rendering
    #: no more (``controllers/workload_act.py`` records and clears it).
    pool_refusals: dict[tuple[str, str], PoolRefusal] = field(default_factory=dict)
    #: Workload key -> kind -> the last refusal of that Managed picker object, or ``NameTaken``
    #: (an unlabelled object of its name): the planner reports it and applies no picker while
    #: it is recent (``workload_act.picker_refusals``).
    picker_refusals: dict[tuple[str, str], dict[str, PoolRefusal]] = field(default_factory=dict)
    #: The last read of each Kueue LocalQueue a workload waits in or a cluster names (issue 32;
    #: ``controllers/kueue.py``): the planner folds it into ``status.queue``.
    queues: QueueWatch = field(default_factory=QueueWatch)
    #: The mod ConfigMaps of each RecipeRegistry's commit, per namespace (issue 32; ``controllers/hooks.py``).
    mods: ModCache = field(default_factory=ModCache)
    #: The pauses kopf's peering logged (issue 32, ``controllers/resume.py``): once paused, a
    #: workload daemon that starts waits until the indexes show its children.
    pauses: Pauses = field(default_factory=Pauses)

    def jitter(self, seconds: float) -> float:
        """``seconds`` +-10%, so that many objects' timers do not fire in lockstep."""
        return seconds * random.uniform(0.9, 1.1)
