"""The DaemonJob cache (``k8s/daemonjobs.py`` ``JobCache``) on the watch primitive, against the
testbed's apiserver: read-your-writes without ordering resourceVersions, a later write by
someone else wins as soon as the watch delivers it, deletions, and change notifications.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube, connect
from sparkrun_operator.k8s.daemonjobs import OVERLAY_SECONDS, DaemonJobs, JobCache, slim
from sparkrun_operator.ops import jobs
from sparkrun_testbed import plane


def _job(name: str, namespace: str) -> dict[str, Any]:
    return jobs.new_job(
        name=name,
        namespace=namespace,
        operation="workloads.run",
        version=1,
        arguments={},
        username="alice",
        uid=None,
        groups=["team"],
        manager="daemon",
        client=None,
        key=None,
        digest="0" * 64,
    )


async def _until(check: Callable[[], bool], *, within: float) -> None:
    for _ in range(int(within / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"condition not met within {within} s")


async def test_reads_follow_own_writes_and_the_watch(
    testbed: plane.Testbed, crds: list[str], namespace: str
) -> None:
    kube = Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager=DAEMON_API_MANAGER)
    daemonjobs = DaemonJobs(kube, namespace)
    cache = JobCache(daemonjobs)
    try:
        await cache.start()
        assert cache.synced
        assert cache.values() == []

        created = await daemonjobs.create(_job("job-1", namespace))
        await cache.observe(created)
        # At once, whatever the watch does (its copy comes without managedFields: slim()).
        assert await cache.get("job-1") in (created, slim(copy.deepcopy(created)))

        def running(status: DaemonJobStatus, _obj: dict[str, Any]) -> None:
            status.state = "running"

        written = await daemonjobs.update_status(created, running)
        await cache.observe(written)
        mine = await cache.get("job-1")
        assert mine is not None
        assert mine["status"]["state"] == "running"

        # Someone else writes after us: the watch delivers our write, then theirs, which wins
        # long before an overlay could expire.
        version = cache.version
        waiter = asyncio.create_task(cache.changed(10.0))
        await daemonjobs.label("job-1", {"other": "writer"})
        assert await waiter
        assert cache.version > version

        def labelled() -> bool:
            found = next((o for o in cache.values() if o["metadata"]["name"] == "job-1"), None)
            return found is not None and (found["metadata"].get("labels") or {}).get("other") == "writer"

        await _until(labelled, within=OVERLAY_SECONDS / 2)
        current = await cache.get("job-1")
        assert current is not None
        assert current["status"]["state"] == "running"

        # A deletion by this process hides the job at once; the watch confirms it.
        assert await daemonjobs.delete("job-1", uid=created["metadata"]["uid"])
        await cache.forget("job-1")
        assert await cache.get("job-1") is None
        await _until(lambda: not cache.values(), within=OVERLAY_SECONDS / 2)
        assert await cache.get("job-1") is None
    finally:
        await cache.stop()
        await kube.close()
