"""DaemonJob objects: create, read, list, guarded status writes, and a watch-backed cache.

Contract:

- :meth:`DaemonJobs.update_status` is the only way status is written: it applies a mutation to
  the freshest status it knows, writes it with ``PUT .../status`` carrying the object's
  ``resourceVersion`` (optimistic concurrency), and on a 409 re-reads the object and applies the
  mutation again (at most :data:`MAX_ATTEMPTS` times). The mutation must therefore be a pure
  function of the status it is given; it may raise to abort (nothing is written).
- :class:`JobCache` mirrors the DaemonJobs of one namespace by list+watch. Reads are served from
  memory; a miss falls back to one direct GET (read-your-writes right after a create). Writers
  feed their answers back with :meth:`JobCache.observe` so readers see their own writes at once.
  :meth:`JobCache.changed` wakes waiters whenever any job changes (SSE streams wait on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.k8s.rest import ApiError, Rest, resource_of

__all__ = ["DAEMON_JOBS", "MAX_ATTEMPTS", "DaemonJobs", "JobCache"]

log = logging.getLogger(__name__)

DAEMON_JOBS = resource_of(DAEMON_JOB)
MAX_ATTEMPTS = 8

Mutation = Callable[[DaemonJobStatus, dict[str, Any]], None]


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class DaemonJobs:
    """DaemonJob CRUD in one namespace."""

    def __init__(self, rest: Rest, namespace: str) -> None:
        self.rest = rest
        self.namespace = namespace

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create; raises ``ApiError`` (``already_exists`` for a taken name)."""
        return await self.rest.create(DAEMON_JOBS, obj, self.namespace)

    async def get(self, name: str) -> dict[str, Any] | None:
        return await self.rest.get(DAEMON_JOBS, name, self.namespace)

    async def list_all(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        return await self.rest.items(DAEMON_JOBS, self.namespace, label_selector=label_selector)

    async def patch_spec(
        self, name: str, spec: dict[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch ``spec`` (with a resourceVersion precondition when given)."""
        patch: dict[str, Any] = {"spec": spec}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        return await self.rest.merge_patch(DAEMON_JOBS, name, patch, self.namespace)

    async def label(self, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
        return await self.rest.merge_patch(
            DAEMON_JOBS, name, {"metadata": {"labels": labels}}, self.namespace
        )

    async def delete(self, name: str, *, uid: str | None = None) -> bool:
        return await self.rest.delete(DAEMON_JOBS, name, self.namespace, uid=uid)

    async def update_status(
        self, obj: dict[str, Any], mutate: Mutation, *, fresh: bool = False
    ) -> dict[str, Any]:
        """Apply ``mutate(status, object)`` and write it; returns the written object.

        ``obj`` is the caller's latest copy; with ``fresh`` it is re-read first. Raises
        ``LookupError`` when the job no longer exists, ``ApiError`` on other failures, and
        whatever ``mutate`` raises.
        """
        current: dict[str, Any] | None = obj
        for attempt in range(MAX_ATTEMPTS):
            if fresh or attempt > 0:
                current = await self.get(obj["metadata"]["name"])
                if current is None:
                    raise LookupError(f"DaemonJob {obj['metadata']['name']} no longer exists")
            assert current is not None
            status = DaemonJobStatus.model_validate(current.get("status") or {})
            mutate(status, current)
            body = {
                "apiVersion": current.get("apiVersion"),
                "kind": current.get("kind"),
                "metadata": current["metadata"],
                "spec": current.get("spec", {}),
                "status": status.to_wire(),
            }
            try:
                return await self.rest.replace(
                    DAEMON_JOBS, current["metadata"]["name"], body, self.namespace, subresource="status"
                )
            except ApiError as error:
                if error.not_found:
                    raise LookupError(f"DaemonJob {current['metadata']['name']} no longer exists") from error
                if not error.conflict:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        raise RuntimeError(f"status of DaemonJob {obj['metadata']['name']} kept changing; gave up")


class JobCache:
    """An in-memory mirror of one namespace's DaemonJobs, kept by list+watch."""

    def __init__(self, jobs: DaemonJobs, *, watch_timeout: int = 300) -> None:
        self.jobs = jobs
        self.objects: dict[str, dict[str, Any]] = {}
        self.watch_timeout = watch_timeout
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self.version = 0

    async def start(self) -> None:
        """Start mirroring; returns after the first list."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="daemonjob-cache")
        waiter = asyncio.create_task(self._synced.wait())
        done, _ = await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            self._task.result()  # re-raise why the mirror died

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def _notify(self) -> None:
        self.version += 1
        async with self._changed:
            self._changed.notify_all()

    def _store(self, obj: dict[str, Any]) -> bool:
        name = obj["metadata"]["name"]
        old = self.objects.get(name)
        if old is not None and _rv(old) >= _rv(obj):
            return False
        self.objects[name] = obj
        return True

    async def observe(self, obj: dict[str, Any]) -> None:
        """Record an object this process just read or wrote (newer resourceVersions win)."""
        if self._store(obj):
            await self._notify()

    async def forget(self, name: str) -> None:
        if self.objects.pop(name, None) is not None:
            await self._notify()

    async def get(self, name: str) -> dict[str, Any] | None:
        """The job from memory, else from the apiserver (``None`` when it does not exist)."""
        found = self.objects.get(name)
        if found is not None:
            return found
        fetched = await self.jobs.get(name)
        if fetched is not None:
            await self.observe(fetched)
        return fetched

    def values(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    async def changed(self, wait: float) -> bool:
        """Wait until any job changes or ``wait`` seconds pass; ``True`` when something changed."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                return False
        return True

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                listed = await self.jobs.rest.list_raw(DAEMON_JOBS, self.jobs.namespace)
                fresh = {o["metadata"]["name"]: o for o in listed.get("items") or []}
                self.objects = fresh
                self._synced.set()
                await self._notify()
                version = listed.get("metadata", {}).get("resourceVersion")
                backoff = 0.5
                while True:
                    async for kind, obj in self.jobs.rest.watch(
                        DAEMON_JOBS,
                        self.jobs.namespace,
                        resource_version=version,
                        timeout_seconds=self.watch_timeout,
                    ):
                        version = obj.get("metadata", {}).get("resourceVersion") or version
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            await self.forget(obj["metadata"]["name"])
                        elif self._store(obj):
                            await self._notify()
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status != 410:
                    log.warning("DaemonJob watch failed: %s", error)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
            except Exception as error:
                log.warning("DaemonJob watch failed (%s); relisting", error or type(error).__name__)
                log.debug("DaemonJob watch failure", exc_info=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)


async def retry_conflicts(
    attempt: Callable[[], Awaitable[dict[str, Any]]], *, attempts: int = MAX_ATTEMPTS
) -> dict[str, Any]:
    """Run ``attempt`` until it does not fail with 409 (a resourceVersion race)."""
    for index in range(attempts):
        try:
            return await attempt()
        except ApiError as error:
            if not error.conflict or error.already_exists or index == attempts - 1:
                raise
            await asyncio.sleep(0.01 * (index + 1))
    raise RuntimeError("unreachable")
