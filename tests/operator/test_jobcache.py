"""The DaemonJob cache (``k8s/daemonjobs.py`` ``JobCache``) on the watch primitive, against the
testbed's apiserver: read-your-writes without ordering resourceVersions, a later write by
someone else wins as soon as the watch delivers it, deletions, change notifications, and the
cache's bound in bytes per job (large results left out, read on demand).
"""

from __future__ import annotations

import asyncio
import copy
import secrets
from collections.abc import Callable
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube, connect
from sparkrun_operator.k8s.daemonjobs import (
    CACHED_RESULT_BYTES,
    OMITTED,
    OVERLAY_SECONDS,
    DaemonJobs,
    JobCache,
    slim,
)
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


def _rows(i: int, size: int) -> list[dict[str, str]]:
    """About ``size`` bytes of JSON that compresses like real output (hex digests, repeated keys)."""
    return [{"name": f"item-{i}-{n}", "digest": secrets.token_hex(32)} for n in range(size // 90)]


async def test_the_cache_leaves_large_results_out_and_full_reads_them(
    testbed: plane.Testbed, crds: list[str], namespace: str
) -> None:
    """The bound of the cache (the shim's memory under many jobs: ``bench/shim_memory.py``):
    managedFields dropped, results above CACHED_RESULT_BYTES (inline or gzip) left out."""
    kube = Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager=DAEMON_API_MANAGER)
    daemonjobs = DaemonJobs(kube, namespace)
    cache = JobCache(daemonjobs)
    # A small inline result is kept; an inline one above the bound and a gzip one are not.
    results = {
        "small": {"ok": True},
        "inline": _rows(1, 2 * CACHED_RESULT_BYTES),
        "gzip": _rows(2, 3 * 2**19),
    }
    try:
        await cache.start()
        for name, result in results.items():
            inline, packed, _ = jobs.encode_result(result)
            assert (packed is None) == (name != "gzip")

            def done(
                status: DaemonJobStatus, _obj: dict[str, Any], inline: Any = inline, packed: Any = packed
            ) -> None:
                status.state = "succeeded"
                status.result, status.result_gzip = inline, packed

            await daemonjobs.update_status(await daemonjobs.create(_job(name, namespace)), done)

        def delivered() -> bool:
            found = [cache.informer.objects.get((namespace, name)) for name in results]
            return all(o is not None and (o.get("status") or {}).get("state") == "succeeded" for o in found)

        await _until(delivered, within=30)
        for name, result in results.items():
            cached = cache.informer.objects[(namespace, name)]
            assert "managedFields" not in cached["metadata"]
            if name == "small":
                assert OMITTED not in cached["status"]
                assert await cache.full(cached) is cached  # nothing to fetch
            else:
                assert cached["status"][OMITTED] is True
                assert not {"result", "resultGzip"} & set(cached["status"])
            assert jobs.result_of((await cache.full(cached))["status"]) == result
    finally:
        await cache.stop()
        await kube.close()
