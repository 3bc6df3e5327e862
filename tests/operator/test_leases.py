"""Executor leases (``ops/leases.py``) against the testbed's apiserver, with skewed clocks.

The executor writes ``renewTime`` from its own wall clock; the observer judges liveness on its own
monotonic clock (injected here, so time can pass in the test without waiting). Tested: a writer
60 s behind the observer is alive while it renews; a writer 60 s ahead is dead once it stops
renewing for a lease duration; a Lease seen for the first time gets one full duration; the
written ``leaseDurationSeconds`` is the one asked for.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube, connect
from sparkrun_operator.k8s.resources import LEASES, PODS
from sparkrun_operator.ops import leases
from sparkrun_testbed import plane

SKEW = dt.timedelta(seconds=60)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _kube(testbed: plane.Testbed) -> Kube:
    return Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager=DAEMON_API_MANAGER)


async def test_writer_sixty_seconds_behind_is_alive_while_renewing(
    testbed: plane.Testbed, namespace: str
) -> None:
    kube = await _kube(testbed)
    clock = _Clock()
    observer = leases.LeaseObserver(clock)
    try:
        for round_ in range(4):  # renewing every 5 s (of the observer's time), 60 s behind
            stamp = dt.datetime.now(dt.UTC) - SKEW
            await leases.renew(kube, namespace, "slow-clock", now=stamp, duration=10)
            alive = await leases.executor_liveness(kube, namespace, observer=observer)
            assert alive == {"slow-clock": True}, f"round {round_}: a live, renewing executor judged dead"
            clock.now += 5
        found = await kube.get(LEASES, leases.lease_name("slow-clock"), namespace)
        assert found is not None
        assert found["spec"]["leaseDurationSeconds"] == 10
        clock.now += 10  # no renewal for one lease duration: now it is dead
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"slow-clock": False}
    finally:
        await kube.close()


async def test_writer_sixty_seconds_ahead_dies_when_it_stops(testbed: plane.Testbed, namespace: str) -> None:
    kube = await _kube(testbed)
    clock = _Clock()
    observer = leases.LeaseObserver(clock)
    try:
        await leases.renew(kube, namespace, "fast-clock", now=dt.datetime.now(dt.UTC) + SKEW, duration=10)
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"fast-clock": True}
        clock.now += 9.5
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"fast-clock": True}
        clock.now += 1  # 10.5 s of the observer's time without a new record
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"fast-clock": False}
        # A renewal revives it (a new record), whatever its timestamp says.
        await leases.renew(kube, namespace, "fast-clock", now=dt.datetime.now(dt.UTC) + SKEW, duration=10)
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"fast-clock": True}
    finally:
        await kube.close()


async def test_a_stale_lease_seen_first_gets_one_duration(testbed: plane.Testbed, namespace: str) -> None:
    kube = await _kube(testbed)
    clock = _Clock()
    try:
        # Renewed "an hour ago" by the writer's clock: the observer cannot tell skew from death,
        # so it waits one duration of its own time.
        await leases.renew(
            kube, namespace, "old", now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1), duration=6
        )
        observer = leases.LeaseObserver(clock)
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"old": True}
        clock.now += 6
        assert await leases.executor_liveness(kube, namespace, observer=observer) == {"old": False}
    finally:
        await kube.close()


def test_the_pod_owns_the_lease_only_in_its_own_namespace() -> None:
    env = {"POD_NAME": "op-0", "POD_UID": "u-1", "POD_NAMESPACE": "sparkrun-system"}
    assert leases.pod_owner("sparkrun-system", env) == {"name": "op-0", "uid": "u-1"}
    assert leases.pod_owner("elsewhere", env) is None  # an owner reference cannot cross namespaces
    assert leases.pod_owner("sparkrun-system", {**env, "POD_UID": ""}) is None
    assert leases.pod_owner("sparkrun-system", {}) is None


async def test_a_lease_owned_by_its_pod_is_collected_with_it(testbed: plane.Testbed, namespace: str) -> None:
    """``helm uninstall`` removes the Role while the operator's Pod terminates, so its graceful
    release may be refused: the garbage collector still deletes the Lease once the Pod is gone."""
    kube = await _kube(testbed)
    try:
        pod = await kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "operator-0", "namespace": namespace},
                # never scheduled (no node matches): an unbound Pod is deleted at once, no kubelet
                "spec": {
                    "nodeSelector": {"sparkrun.dev/test": "no-such-node"},
                    "containers": [{"name": "c", "image": "none"}],
                },
            },
            namespace,
        )
        owner = {"name": "operator-0", "uid": pod["metadata"]["uid"]}
        await leases.renew(kube, namespace, "op/1/owned", owner=owner)
        lease = await kube.get(LEASES, leases.lease_name("op/1/owned"), namespace)
        assert lease is not None
        assert lease["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]
        await kube.delete(PODS, "operator-0", namespace, propagation="Background")
        deadline = asyncio.get_running_loop().time() + 60
        while await kube.get(LEASES, leases.lease_name("op/1/owned"), namespace) is not None:
            assert asyncio.get_running_loop().time() < deadline, "the Lease outlived its Pod by 60 s"
            await asyncio.sleep(0.5)
    finally:
        await kube.close()
