"""The operator's view of ownership Leases (ADR 0049): one label-selected watch, the verdicts.

:class:`LeaseWatch` (``Memo.ownership``) follows the Leases labelled
``sparkrun.dev/ownership`` (only those: the apiserver filters, so node heartbeats and other
Leases never reach the operator) in each served namespace, or cluster-wide, with the project's
watch primitive (:class:`~..k8s.informer.Informer`); each event pokes the lease lane of the
workload that owns the Lease (``controllers/ownership.py``), never its reconcile. It keeps the
observer's clock of Lease records and the lane's last verdict per workload, which the planner
folds into ``status.lease`` (``Observation.ownership``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.api.ownership import LeaseStatus
from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.informer import Informer, drop_managed_fields
from sparkrun_operator.k8s.resources import LEASES
from sparkrun_operator.ops.leases import RecordClock
from sparkrun_operator.render import keys

__all__ = ["LANE", "LeaseWatch", "lane_key"]

#: The first part of every lease lane's trigger key.
LANE = "iwl"


def lane_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The trigger key of one workload's lease lane."""
    return (LANE, namespace, name)


def _owner(obj: dict[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == "InferenceWorkload" and ref.get("name"):
            return str(ref["name"])
    return None


@dataclass
class LeaseWatch:
    """Ownership Leases as watched, the observer's clock and the lanes' verdicts."""

    clock: RecordClock = field(default_factory=RecordClock)
    #: Workload key -> the lease lane's last verdict (``Observation.ownership``).
    verdicts: dict[tuple[str, str], LeaseStatus] = field(default_factory=dict)
    informers: list[Informer] = field(default_factory=list)

    def start(self, kube: Kube, namespaces: tuple[str, ...], triggers: Triggers) -> None:
        """Begin watching (not waiting for the first list: a lane waits for :meth:`synced`)."""
        if self.informers:
            return

        def on_event(_: str, obj: dict[str, Any]) -> None:
            owner = _owner(obj)
            namespace = (obj.get("metadata") or {}).get("namespace")
            if owner and namespace:
                triggers.poke(lane_key(str(namespace), owner))

        def on_relist() -> None:
            triggers.poke_group(LANE)

        for namespace in namespaces or (None,):
            informer = Informer(
                kube,
                LEASES,
                namespace=namespace,
                label_selector=keys.LABEL_OWNERSHIP,
                transform=drop_managed_fields,
                on_event=on_event,
                on_relist=on_relist,
            )
            self.informers.append(informer)

    async def run(self) -> None:
        for informer in self.informers:
            await informer.start(wait=False)

    async def stop(self) -> None:
        for informer in self.informers:
            await informer.close()

    def synced(self, namespace: str) -> bool:
        return any(i.synced and i.namespace in (None, namespace) for i in self.informers)

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease ``name`` of ``namespace`` as last watched (``None``: none)."""
        for informer in self.informers:
            if informer.namespace in (None, namespace):
                found = informer.objects.get((namespace, name))
                if found is not None:
                    return found
        return None
