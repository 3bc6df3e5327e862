"""The failures of workloads' pods, caught at the pod event (ADR 0046): the operator's memory
of them between a pod's failure and the status write that reports it.

The JobSet controller deletes a failed group's pods within moments of the failure, so a pass
may never see the terminated container; the pod event does. :meth:`FailureLog.record` parses
the pod (``plan/failures.py``), redacts the failed container's last log lines (its
termination message) with the linear redaction of ADR 0037 (``ops/redact.py``, by name and by
shape: the workload controller reads no Secret values) and keeps the record; the planner reads
them through ``Observation.failures`` and folds them into ``status.firstFailure`` and
``status.lastFailure``, which keep them from then on.

Bounded: :data:`PER_WORKLOAD` records per workload (the newest), :data:`WORKLOADS` workloads
(the one that recorded least recently goes first), each record's log bounded by the contract
(``api/history.py``); a workload's records go with its deletion. Whoever may create pods in a
namespace may label them with any workload name there, so the records of workloads the operator
does not know (the caller's ``known``: none of that name, or one not planned yet after a
restart) are kept apart, :data:`STRANGERS` of them: made-up names cannot push the records of
real workloads out. A failure already kept is
recognised by its pod, container state and time before anything is parsed or redacted again,
so the kubelet's and the JobSet controller's further writes to the failed pod cost little.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

from sparkrun_operator.api.failures import FailureRecord
from sparkrun_operator.ops.redact import Redactor
from sparkrun_operator.plan import failures, observe

#: Records kept per workload (the newest): a group's failure and the ones after it until a pass
#: has reported them.
PER_WORKLOAD: Final = 4
#: Workloads with records kept at once.
WORKLOADS: Final = 1024
#: Workloads the caller does not know with records kept at once (see the module docstring).
STRANGERS: Final = 64

Key = tuple[str, str]


class FailureLog:
    """Per-workload memory of pod failures (see the module docstring)."""

    def __init__(self, *, per_workload: int = PER_WORKLOAD, workloads: int = WORKLOADS) -> None:
        self.per_workload = per_workload
        self.workloads = workloads
        self._records: OrderedDict[Key, list[FailureRecord]] = OrderedDict()
        self._strangers: OrderedDict[Key, list[FailureRecord]] = OrderedDict()
        # NB: name and shape rules only; compiled once per process, shared by every record
        self._redactor = Redactor()

    def __len__(self) -> int:
        return len(self._records) + len(self._strangers)

    def of(self, key: Key) -> tuple[FailureRecord, ...]:
        """The records of workload ``key``, oldest first."""
        records = self._records.get(key, [])
        strange = self._strangers.get(key)
        if strange:  # NB: recorded before the workload was known
            records = sorted([*strange, *records], key=lambda r: r.time)[-self.per_workload :]
        return tuple(records)

    def drop(self, key: Key) -> None:
        """Forget workload ``key`` (it was deleted)."""
        self._records.pop(key, None)
        self._strangers.pop(key, None)

    def record(
        self, body: Mapping[str, Any], known: Callable[[Key], bool] = lambda _: True
    ) -> FailureRecord | None:
        """Keep the failure of a workload's pod (``body``, from its event), if it shows one not
        kept yet; the record kept, else ``None``. ``known``: whether the operator knows the
        workload the pod is labelled with (else its records are kept apart)."""
        key = observe.workload_key(body)
        if key is None:
            return None
        try:
            bare = failures.failure_of(body)
        except ValueError:  # a record the status could not hold: nothing to keep
            return None
        if bare is None or bare.exit_code is None:
            return None  # only a container's failure has log lines; the rest the pod itself shows
        if any(_same(r, bare) for r in self.of(key)):
            return None
        try:
            full = failures.failure_of(body, redact=self._redactor.text)
        except ValueError:
            return None
        if full is None:
            return None
        pool, bound = (self._records, self.workloads) if known(key) else (self._strangers, STRANGERS)
        pool[key] = sorted([*pool.get(key, []), full], key=lambda r: r.time)[-self.per_workload :]
        pool.move_to_end(key)
        while len(pool) > bound:
            pool.popitem(last=False)
        return full


def _same(a: FailureRecord, b: FailureRecord) -> bool:
    return a.object == b.object and a.time == b.time and a.reason == b.reason and a.exit_code == b.exit_code
