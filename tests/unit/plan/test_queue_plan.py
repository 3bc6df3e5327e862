"""Kueue in the planners (issue 32): a workload's ``status.queue``, ``Admitted``, ``Scheduled``,
``Ready`` and phase while Kueue holds its JobSets (``plan/workload/queue.py``), and an
InferenceCluster's ``status.queue`` with ``QueueReady`` (``plan/queue.py``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.cluster import InferenceClusterStatus
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.queue import POSITION_LIMIT
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.queue import QueueRead, cluster_queue
from sparkrun_operator.plan.workload import (
    Observation,
    ObservedCluster,
    ObservedJobSet,
    ObservedPod,
    Plan,
    plan,
)
from sparkrun_operator.render import keys

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
NAME = "qwen"
CLUSTER = ObservedCluster(name="h100", queue_name="team-a")
SERVICE = {
    "spec": {
        "selector": {keys.LABEL_WORKLOAD: NAME, keys.LABEL_ROLE: "leader"},
        "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
        "publishNotReadyAddresses": False,
    }
}


def _spec(**extra: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(
        {"model": {"name": "Qwen/Qwen3-0.6B"}, "cluster": "h100", **extra}
    )


def _obs(spec: InferenceWorkloadSpec, **kwargs: Any) -> Observation:
    values: dict[str, Any] = {
        "name": NAME,
        "namespace": "ns",
        "uid": "uid-w",
        "generation": 2,
        "spec": spec,
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "cluster": CLUSTER,
        "service": SERVICE,
    }
    values.update(kwargs)
    return Observation(**values)


def _jobset(spec: InferenceWorkloadSpec, **kwargs: Any) -> ObservedJobSet:
    revision = plan(_obs(spec)).revision
    assert revision is not None
    return ObservedJobSet(
        name=f"{NAME}-0-{revision[:5]}", uid="uid-js0", replica=0, revision=revision, created=NOW, **kwargs
    )


def _cond(p: Plan, type_: str) -> tuple[str, str, str]:
    found = find_condition(p.status.conditions, type_)
    assert found is not None, f"no {type_} condition"
    return found.status, found.reason, found.message


def test_no_queue_no_queue_status_nor_admitted() -> None:
    p = plan(_obs(_spec(), cluster=ObservedCluster(name="h100")))
    assert p.status.queue is None
    assert find_condition(p.status.conditions, c.ADMITTED) is None


def test_queued_with_position_is_pending_and_says_where() -> None:
    spec = _spec()
    js = _jobset(spec, suspended=True)
    read = QueueRead(
        namespace="ns", name="team-a", exists=True, cluster_queue="gpus", positions={"uid-js0": (2, 5)}
    )
    p = plan(_obs(spec, jobsets=(js,), queue=read))
    queue = p.status.queue
    assert queue is not None
    assert (queue.name, queue.cluster_queue, queue.admitted, queue.waiting) == ("team-a", "gpus", False, 1)
    assert (queue.position_in_local_queue, queue.position_in_cluster_queue) == (2, 5)
    status, reason, message = _cond(p, c.ADMITTED)
    assert (status, reason) == ("False", c.REASON_QUEUED_BY_KUEUE)
    assert "2 workloads ahead" in message
    assert "ClusterQueue gpus" in message
    assert _cond(p, c.SCHEDULED)[:2] == ("False", c.REASON_QUEUED_BY_KUEUE)
    assert _cond(p, c.READY)[:2] == ("False", c.REASON_QUEUED_BY_KUEUE)
    assert p.status.phase == "Pending"
    assert p.suspend == []  # Kueue owns suspend
    assert p.status.to_wire()["queue"]["positionInLocalQueue"] == 2


def test_next_in_line() -> None:
    spec = _spec()
    js = _jobset(spec, suspended=True)
    read = QueueRead(namespace="ns", name="team-a", exists=True, positions={"uid-js0": (0, 0)})
    assert "next in line" in _cond(plan(_obs(spec, jobsets=(js,), queue=read)), c.ADMITTED)[2]


@pytest.mark.parametrize(
    ("read", "reason", "words"),
    [
        (None, c.REASON_QUEUE_UNKNOWN, "not read yet"),
        (
            QueueRead(namespace="ns", name="team-a", installed=False),
            c.REASON_KUEUE_NOT_INSTALLED,
            "not installed",
        ),
        (QueueRead(namespace="ns", name="team-a", exists=False), c.REASON_QUEUE_NOT_FOUND, "does not exist"),
        (
            QueueRead(namespace="ns", name="team-a", exists=True, complete=False),
            c.REASON_QUEUED_BY_KUEUE,
            f"behind the first {POSITION_LIMIT}",
        ),
        (
            QueueRead(namespace="ns", name="team-a", exists=True, problem="visibility: 503 unavailable"),
            c.REASON_QUEUED_BY_KUEUE,
            "position unknown: visibility: 503",
        ),
        (QueueRead(namespace="ns", name="team-a", exists=True), c.REASON_QUEUED_BY_KUEUE, "pending list yet"),
        # a read of another queue (the queue name changed) is not this one's
        (QueueRead(namespace="ns", name="other", exists=False), c.REASON_QUEUE_UNKNOWN, "not read yet"),
    ],
)
def test_waiting_without_a_position_says_why(read: QueueRead | None, reason: str, words: str) -> None:
    spec = _spec()
    p = plan(_obs(spec, jobsets=(_jobset(spec, suspended=True),), queue=read))
    status, found, message = _cond(p, c.ADMITTED)
    assert (status, found) == ("False", reason)
    assert words in message
    assert p.status.phase == "Pending"
    assert p.status.queue is not None
    assert p.status.queue.position_in_local_queue is None


def test_admitted_when_kueue_unsuspended_the_jobset() -> None:
    spec = _spec()
    js = _jobset(spec, suspended=False)
    read = QueueRead(namespace="ns", name="team-a", exists=True, cluster_queue="gpus")
    p = plan(_obs(spec, jobsets=(js,), queue=read))
    status, reason, message = _cond(p, c.ADMITTED)
    assert (status, reason) == ("True", c.REASON_ADMITTED_BY_KUEUE)
    assert "ClusterQueue gpus" in message
    assert p.status.queue is not None
    assert p.status.queue.admitted
    assert p.status.phase == "Starting"  # admitted, pods not Ready yet


def test_the_workloads_own_queue_wins_over_the_clusters() -> None:
    spec = _spec(scheduling={"queueName": "own"})
    js = _jobset(spec, suspended=True)
    read = QueueRead(namespace="ns", name="own", exists=False)
    p = plan(_obs(spec, jobsets=(js,), queue=read))
    assert p.status.queue is not None
    assert p.status.queue.name == "own"
    assert _cond(p, c.ADMITTED)[1] == c.REASON_QUEUE_NOT_FOUND


def test_stopped_deletes_and_reports_nothing_queued() -> None:
    spec = _spec(state="Stopped")
    p = plan(_obs(spec, jobsets=(_jobset(_spec(), suspended=True),)))
    assert [d.kind for d in p.delete] == ["JobSet"]
    assert _cond(p, c.ADMITTED)[:2] == ("False", c.REASON_STOPPED)
    assert p.status.phase == "Stopped"


def test_a_ready_replica_with_another_queued_is_not_pending() -> None:
    spec = _spec(replicas=2)
    revision = plan(_obs(spec)).revision
    assert revision is not None
    running = ObservedJobSet(name="a", uid="ua", replica=0, revision=revision, leader_ready=True)
    queued = ObservedJobSet(name="b", uid="ub", replica=1, revision=revision, suspended=True)
    leader = ObservedPod(name="a-leader", jobset="a", role="leader", phase="Running", ready=True, node="n1")
    read = QueueRead(namespace="ns", name="team-a", exists=True, positions={"ub": (0, 1)})
    p = plan(_obs(spec, jobsets=(running, queued), pods=(leader,), queue=read))
    assert _cond(p, c.ADMITTED)[:2] == ("False", c.REASON_QUEUED_BY_KUEUE)
    assert "1 JobSet of 2 JobSets not admitted" in _cond(p, c.ADMITTED)[2]
    assert p.status.phase == "Degraded"  # one of two serves
    assert p.status.queue is not None
    assert p.status.queue.position_in_local_queue == 0


def test_the_status_is_stable_across_passes() -> None:
    spec = _spec()
    js = _jobset(spec, suspended=True)
    read = QueueRead(namespace="ns", name="team-a", exists=True, positions={"uid-js0": (1, 1)})
    first = plan(_obs(spec, jobsets=(js,), queue=read))
    again = plan(_obs(spec, jobsets=(js,), queue=read, status=first.status))
    assert again.status == first.status


# -- the InferenceCluster ------------------------------------------------------------------


def _cluster(queue: str | None, namespaces: list[str], reads: dict[tuple[str, str], QueueRead]) -> Any:
    return cluster_queue(
        InferenceClusterStatus(),
        queue=queue,
        namespaces=namespaces,
        reads=reads,
        previous=[],
        generation=1,
        now=NOW,
    )


def _ready(status: InferenceClusterStatus) -> tuple[str, str, str]:
    found = find_condition(status.conditions, c.QUEUE_READY)
    assert found is not None
    return found.status, found.reason, found.message


def test_cluster_without_queue_name_has_no_queue_status() -> None:
    status = _cluster(None, ["a"], {})
    assert status.queue is None
    assert find_condition(status.conditions, c.QUEUE_READY) is None


def test_cluster_queue_exists_everywhere() -> None:
    reads = {
        ("a", "q"): QueueRead(
            namespace="a", name="q", exists=True, cluster_queue="gpus", pending=2, admitted=1
        ),
        ("b", "q"): QueueRead(
            namespace="b", name="q", exists=True, cluster_queue="gpus", pending=0, admitted=3
        ),
    }
    status = _cluster("q", ["b", "a", "a"], reads)
    assert [s.namespace for s in status.queue.namespaces] == ["a", "b"]
    assert status.queue.kueue_installed is True
    ok, reason, message = _ready(status)
    assert (ok, reason) == ("True", c.REASON_QUEUE_EXISTS)
    assert "2 pending, 4 admitted" in message
    assert "ClusterQueue gpus" in message


def test_cluster_queue_missing_in_a_namespace() -> None:
    reads = {
        ("a", "q"): QueueRead(namespace="a", name="q", exists=True),
        ("b", "q"): QueueRead(namespace="b", name="q", exists=False),
    }
    ok, reason, message = _ready(_cluster("q", ["a", "b"], reads))
    assert (ok, reason) == ("False", c.REASON_QUEUE_NOT_FOUND)
    assert "(b)" in message


def test_cluster_queue_unused_unread_and_kueue_missing() -> None:
    assert _ready(_cluster("q", [], {}))[:2] == ("Unknown", c.REASON_QUEUE_UNUSED)
    assert _ready(_cluster("q", ["a"], {}))[:2] == ("Unknown", c.REASON_QUEUE_UNKNOWN)
    missing = {("a", "q"): QueueRead(namespace="a", name="q", installed=False)}
    status = _cluster("q", ["a"], missing)
    assert _ready(status)[:2] == ("False", c.REASON_KUEUE_NOT_INSTALLED)
    assert status.queue.kueue_installed is False


def test_cluster_queue_keeps_its_transition_time() -> None:
    reads = {("a", "q"): QueueRead(namespace="a", name="q", exists=True, pending=1)}
    first = _cluster("q", ["a"], reads)
    later = cluster_queue(
        InferenceClusterStatus(),
        queue="q",
        namespaces=["a"],
        reads={("a", "q"): QueueRead(namespace="a", name="q", exists=True, pending=5)},
        previous=first.conditions,
        generation=1,
        now=NOW + dt.timedelta(minutes=5),
    )
    before = find_condition(first.conditions, c.QUEUE_READY)
    after = find_condition(later.conditions, c.QUEUE_READY)
    assert before is not None
    assert after is not None
    assert after.last_transition_time == before.last_transition_time
    assert "5 pending" in after.message
