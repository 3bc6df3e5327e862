"""Reading Kueue (issue 32): the visibility API's answer parsed (bounded, hostile-shaped items
skipped), the API version chosen from a CRD, and :class:`QueueWatch`'s bookkeeping (who waits in
which LocalQueue; a new queue wakes the reader; a change pokes only whom it concerns).
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api.queue import POSITION_LIMIT
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers.kueue import QueueWatch, parse_positions
from sparkrun_operator.plan.queue import QueueRead, served_version
from sparkrun_operator.plan.workload import ObservedCluster, ObservedJobSet


def _item(
    uid: str, lq: int, cq: int, kind: str = "JobSet", api: str = "jobset.x-k8s.io/v1alpha2"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"jobset-{uid}",
            "ownerReferences": [{"kind": kind, "apiVersion": api, "uid": uid}],
        },
        "positionInLocalQueue": lq,
        "positionInClusterQueue": cq,
    }


def test_positions_by_jobset_uid() -> None:
    summary = {"items": [_item("a", 0, 3), _item("b", 1, 4), _item("c", 2, 5, kind="Job", api="batch/v1")]}
    positions, count = parse_positions(summary)
    assert positions == {"a": (0, 3), "b": (1, 4)}
    assert count == 3


@pytest.mark.parametrize(
    "summary",
    [
        None,
        [],
        {"items": None},
        {"items": "x"},
        {"items": [1, "x", {"metadata": "x"}, {"metadata": {"ownerReferences": 5}}]},
    ],
)
def test_malformed_answers_give_no_positions(summary: Any) -> None:
    assert parse_positions(summary)[0] == {}


def test_hostile_numbers_and_lengths_are_bounded() -> None:
    bad = _item("x" * 1000, -5, True)
    many = [_item(f"u{i}", i, i) for i in range(POSITION_LIMIT + 50)]
    positions, count = parse_positions({"items": [bad, *many]})
    assert positions["x" * 64] == (0, 0)
    assert count == POSITION_LIMIT
    assert len(positions) == POSITION_LIMIT  # the items past the limit are not read


def test_served_version_prefers_v1beta2() -> None:
    def crd(*served: str) -> dict[str, Any]:
        names = ("v1beta1", "v1beta2", "v1alpha1")
        return {"spec": {"versions": [{"name": n, "served": n in served} for n in names]}}

    assert served_version(crd("v1beta1", "v1beta2")) == "v1beta2"
    assert served_version(crd("v1beta1")) == "v1beta1"
    assert served_version(crd("v1alpha1")) is None
    assert served_version(None) is None
    assert served_version({"spec": {"versions": "x"}}) is None


def _js(uid: str, *, suspended: bool = True, deleting: bool = False) -> ObservedJobSet:
    return ObservedJobSet(name=uid, uid=uid, replica=0, revision="r", suspended=suspended, deleting=deleting)


def _spec(**extra: Any) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate({"model": {"name": "m"}, **extra})


async def test_interest_follows_what_waits() -> None:
    watch = QueueWatch()
    cluster = ObservedCluster(name="c", queue_name="team")
    key = ("ns", "w")
    assert watch.of_workload(key, spec=_spec(), cluster=cluster, jobsets=[_js("a")]) is None
    assert watch.workloads[key].queue == ("ns", "team")
    assert watch._wake.is_set()  # a queue never read: the reader is woken
    # the workload's own queue name wins
    watch.of_workload(key, spec=_spec(scheduling={"queueName": "own"}), cluster=cluster, jobsets=[_js("a")])
    assert watch.workloads[key].queue == ("ns", "own")
    # admitted: still read (its ClusterQueue), with nothing waiting
    watch.of_workload(key, spec=_spec(), cluster=cluster, jobsets=[_js("a", suspended=False)])
    assert watch.workloads[key].uids == ()
    # no live JobSet, or Stopped: no more reads for it
    for jobsets, spec in (
        ([_js("a", deleting=True)], _spec()),
        ([_js("a")], _spec(state="Stopped")),
    ):
        watch.of_workload(
            key, spec=_spec(scheduling={"queueName": "own"}), cluster=cluster, jobsets=[_js("a")]
        )
        watch.of_workload(key, spec=spec, cluster=cluster, jobsets=jobsets)
        assert key not in watch.workloads
    watch.of_workload(key, spec=_spec(), cluster=None, jobsets=[_js("a")])
    assert key not in watch.workloads  # no queue name at all


async def test_a_read_is_shared_and_returned() -> None:
    watch = QueueWatch()
    read = QueueRead(namespace="ns", name="team", exists=True, positions={"a": (0, 0), "b": (1, 1)})
    watch.reads[("ns", "team")] = read
    cluster = ObservedCluster(name="c", queue_name="team")
    first = watch.of_workload(("ns", "w1"), spec=_spec(), cluster=cluster, jobsets=[_js("a")])
    second = watch.of_workload(("ns", "w2"), spec=_spec(), cluster=cluster, jobsets=[_js("b")])
    assert first is second is read
    assert watch.cluster("c", [("ns", "team"), ("other", "team")]) == {("ns", "team"): read}
    assert watch.clusters["c"] == {("ns", "team"), ("other", "team")}
    watch.forget(("ns", "w1"))
    watch.forget_cluster("c")
    assert ("ns", "w1") not in watch.workloads
    assert "c" not in watch.clusters


def test_a_tenant_cannot_make_the_operator_read_ten_thousand_queues() -> None:
    """Every workload names its own LocalQueue (``scheduling.queueName`` is the tenant's): a
    round reads at most ``MAX_QUEUES_PER_NAMESPACE`` of one namespace and ``MAX_QUEUES`` in all,
    shared fairly between namespaces, so another tenant's queue is still read; the queues left
    out say why instead of a read."""
    from sparkrun_operator.controllers.kueue import MAX_QUEUES, MAX_QUEUES_PER_NAMESPACE, select_queues

    wanted = {("hostile", f"q{i:05d}") for i in range(10_000)} | {("calm", "team")}
    read, skipped = select_queues(wanted)
    assert ("calm", "team") in read
    assert sum(1 for ns, _ in read if ns == "hostile") == MAX_QUEUES_PER_NAMESPACE
    assert len(read) + len(skipped) == len(wanted)
    assert set(read).isdisjoint(skipped)
    # the same choice every round (no queue flaps between read and not)
    assert select_queues(wanted) == (read, skipped)
    many = {(f"ns{n:04d}", f"q{i}") for n in range(2 * MAX_QUEUES) for i in range(3)}
    read, skipped = select_queues(many)
    assert len(read) == MAX_QUEUES
    assert len({ns for ns, _ in read}) == MAX_QUEUES  # one per namespace before a second of any
    # a workload waiting in a queue left out is told why, not left at "not read yet"
    watch = QueueWatch()
    note = watch.unread(("hostile", "q09999"))
    assert note.exists is None
    assert note.problem is not None
    assert f"more than {MAX_QUEUES_PER_NAMESPACE} LocalQueues" in note.problem
