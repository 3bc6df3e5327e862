"""A replica resumed after a pause plans nothing from indexes the pause left stale.

kopf fills every index from its first listing before it runs any handler, but only once per
process. A replica that a peer of higher priority pauses (kopf peering, ADR 0026: a rolling
update) stops its watches; when it resumes, its daemons start at once while the watches list
again, so for a moment its indexes lack whatever was created during the pause. Planned from
them, a Ready workload has no JobSet: its status said ``Ready=False, "0 of 1 replicas Ready;
no pods yet"`` until the listing caught up (issue 32).

:class:`Pauses` notes every pause kopf's peering logs (kopf exposes no other signal). Once the
process has been paused, each workload daemon that starts lists its own JobSets, pods and
serving revisions (three label-selected reads, only after a pause) and waits, through the
workload's expectations (``controllers/workload.py``), until the indexes show them, or
``expectation_seconds`` pass. A fresh process needs none of it: kopf waited for every index.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONTROLLER_REVISIONS, JOBSETS, PODS, Resource
from sparkrun_operator.render import keys

#: The logger of kopf's peering (``kopf/_core/engines/peering.py``) and how its pause lines
#: begin ("Pausing operations in favour of ...", "Pausing all operators, including self: ...").
PEERING_LOGGER: Final = "kopf._core.engines.peering"
PAUSE_PREFIX: Final = "Pausing "


class Pauses(logging.Filter):
    """Counts the pauses kopf's peering logs (a filter that drops nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(PAUSE_PREFIX):
            self.count += 1
        return True

    def install(self) -> None:
        """Count from now on (the pause lines are INFO: that logger logs them at least)."""
        peering = logging.getLogger(PEERING_LOGGER)
        if not peering.isEnabledFor(logging.INFO):
            peering.setLevel(logging.INFO)
        peering.addFilter(self)

    def remove(self) -> None:
        logging.getLogger(PEERING_LOGGER).removeFilter(self)


@dataclass(frozen=True)
class Children:
    """The names of a workload's children as the apiserver lists them now."""

    jobsets: frozenset[str]
    pods: frozenset[str]
    revisions: frozenset[str]


async def children(kube: Kube, namespace: str, name: str) -> Children:
    """List the workload's JobSets, pods and serving revisions (the indexes' label selector)."""
    selector = f"{keys.LABEL_WORKLOAD}={name}"

    async def names(resource: Resource) -> frozenset[str]:
        items = await kube.list(resource, namespace, label_selector=selector)
        metas = [item.get("metadata") or {} for item in items]
        return frozenset(str(m["name"]) for m in metas if m.get("name") and not m.get("deletionTimestamp"))

    return Children(
        jobsets=await names(JOBSETS), pods=await names(PODS), revisions=await names(CONTROLLER_REVISIONS)
    )
