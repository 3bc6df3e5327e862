"""DaemonJob objects: create, read, list, guarded status writes, and a watch-backed cache.

Contract:

- :meth:`DaemonJobs.update_status` is the only way status is written: it applies a mutation to
  the freshest status it knows, stamps ``observedGeneration`` with the generation of the object
  the mutation saw, writes it with ``PUT .../status`` carrying the object's
  ``resourceVersion`` (optimistic concurrency), and on a 409 re-reads the object and applies the
  mutation again (at most :data:`MAX_ATTEMPTS` times). The mutation must therefore be a pure
  function of the status it is given; it may raise to abort (nothing is written).
- :class:`JobCache` mirrors the DaemonJobs of one namespace with the watch primitive
  (:class:`~sparkrun_operator.k8s.informer.Informer`). Reads are served from memory; a miss
  falls back to one direct GET. Writers feed their answers back with :meth:`JobCache.observe`
  so readers see their own writes at once: such an object overlays the watch's copy until the
  watch delivers that very resourceVersion (or the object's deletion), or for at most
  :data:`OVERLAY_SECONDS`. ResourceVersions are compared for equality only, never ordered: the
  watch's order says which copy is newer. :meth:`JobCache.changed` wakes waiters whenever any
  job changes (SSE streams wait on it).
- The cache is bounded in bytes per job: ``managedFields`` are dropped, and a result larger than
  :data:`CACHED_RESULT_BYTES` (encoded) is not kept: the cached copy carries
  ``status.resultOmitted = true`` instead, and readers that need the result fetch the object
  (:meth:`JobCache.full`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import MAX_CONFLICTS, Kube, retry_conflicts
from sparkrun_operator.k8s.informer import Informer, drop_managed_fields
from sparkrun_operator.k8s.resources import resource_of

__all__ = ["CACHED_RESULT_BYTES", "DAEMON_JOBS", "MAX_ATTEMPTS", "OMITTED", "DaemonJobs", "JobCache", "slim"]

log = logging.getLogger(__name__)

DAEMON_JOBS = resource_of(DAEMON_JOB)
MAX_ATTEMPTS = MAX_CONFLICTS
#: The longest an observed write overlays the watch's copy.
OVERLAY_SECONDS = 5.0
#: ``(name, resourceVersion)`` pairs the watch delivered, remembered to recognise stale writes.
SEEN_VERSIONS = 4096

Mutation = Callable[[DaemonJobStatus, dict[str, Any]], None]
#: Results larger than this (encoded) are not kept in the cache.
CACHED_RESULT_BYTES = 64 * 1024
#: The status key of a cached copy whose result was left out.
OMITTED = "resultOmitted"


def _result_size(status: dict[str, Any]) -> int:
    packed = status.get("resultGzip")
    if isinstance(packed, str):
        return len(packed)
    result = status.get("result")
    if result is None or isinstance(result, (bool, int, float)):
        return 0
    return len(json.dumps(result, separators=(",", ":")))


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the cache keeps it: no managedFields, no result above :data:`CACHED_RESULT_BYTES`."""
    drop_managed_fields(obj)
    status = obj.get("status")
    if isinstance(status, dict) and _result_size(status) > CACHED_RESULT_BYTES:
        status = obj["status"] = {k: v for k, v in status.items() if k not in ("result", "resultGzip")}
        status[OMITTED] = True
    return obj


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class DaemonJobs:
    """DaemonJob CRUD in one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create; raises ``errors.KubeAlreadyExists`` for a taken name."""
        return await self.kube.create(DAEMON_JOBS, obj, self.namespace)

    async def get(self, name: str) -> dict[str, Any] | None:
        return await self.kube.get(DAEMON_JOBS, name, self.namespace)

    async def list_all(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        return await self.kube.list(DAEMON_JOBS, self.namespace, label_selector=label_selector)

    async def patch_spec(
        self, name: str, spec: dict[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch ``spec`` (with a resourceVersion precondition when given)."""
        patch: dict[str, Any] = {"spec": spec}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        return await self.kube.merge_patch(DAEMON_JOBS, name, patch, self.namespace)

    async def label(self, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
        return await self.kube.merge_patch(
            DAEMON_JOBS, name, {"metadata": {"labels": labels}}, self.namespace
        )

    async def delete(self, name: str, *, uid: str | None = None) -> bool:
        return await self.kube.delete(DAEMON_JOBS, name, self.namespace, uid=uid, propagation="Background")

    async def update_status(
        self, obj: dict[str, Any], mutate: Mutation, *, fresh: bool = False, conditional: bool = False
    ) -> dict[str, Any]:
        """Apply ``mutate(status, object)`` and write it; returns the written object.

        ``obj`` is the caller's latest copy; with ``fresh`` it is re-read first (and after
        every 409). Raises ``LookupError`` when the job no longer exists, ``RuntimeError`` after
        :data:`MAX_ATTEMPTS` conflicts, ``errors.KubeError`` on other failures, and whatever
        ``mutate`` raises. With ``conditional`` the write is tried once, at ``obj``'s
        resourceVersion (an If-Match the caller checked), and a 409 is raised as ``KubeConflict``.
        """
        name = obj["metadata"]["name"]
        reread = fresh

        async def attempt() -> dict[str, Any]:
            nonlocal reread
            current = obj
            if reread:
                found = await self.get(name)
                if found is None:
                    raise LookupError(f"DaemonJob {name} no longer exists")
                current = found
            reread = True
            status = DaemonJobStatus.model_validate(current.get("status") or {})
            mutate(status, current)
            generation = (current.get("metadata") or {}).get("generation")
            if isinstance(generation, int) and generation >= 0:
                # the spec this status was computed from (cancel and answers raise the generation)
                status.observed_generation = generation
            body = {
                "apiVersion": current.get("apiVersion"),
                "kind": current.get("kind"),
                "metadata": current["metadata"],
                "spec": current.get("spec", {}),
                "status": status.to_wire(),
            }
            try:
                return await self.kube.replace(DAEMON_JOBS, name, body, self.namespace, subresource="status")
            except errors.KubeNotFound as error:
                raise LookupError(f"DaemonJob {name} no longer exists") from error

        if conditional:
            return await attempt()
        try:
            return await retry_conflicts(attempt, attempts=MAX_ATTEMPTS)
        except errors.KubeConflict as error:
            raise RuntimeError(f"status of DaemonJob {name} kept changing; gave up") from error


class JobCache:
    """An in-memory mirror of one namespace's DaemonJobs, kept by the watch primitive."""

    def __init__(self, jobs: DaemonJobs, *, watch_timeout: int = 300) -> None:
        self.jobs = jobs
        self.informer = Informer(
            jobs.kube,
            DAEMON_JOBS,
            namespace=jobs.namespace,
            watch_timeout=watch_timeout,
            transform=slim,
            on_event=self._on_event,
            on_relist=self._on_relist,
            on_change=self._on_change,
        )
        #: Writes this process observed that the watch has not delivered yet (``None``: deleted).
        self._written: dict[str, tuple[str, dict[str, Any] | None, float]] = {}
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._changed = asyncio.Event()
        self.version = 0

    async def start(self) -> None:
        """Start mirroring; returns after the first list (or raises why it could not)."""
        await self.informer.start(wait=True, sync_timeout=None)

    async def stop(self) -> None:
        await self.informer.close()

    @property
    def synced(self) -> bool:
        return self.informer.synced

    # -- the watch's side -------------------------------------------------------------------

    def _remember(self, name: str, version: str) -> None:
        self._seen[(name, version)] = None
        self._seen.move_to_end((name, version))
        while len(self._seen) > SEEN_VERSIONS:
            self._seen.popitem(last=False)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name, version = obj["metadata"]["name"], _version(obj)
        self._remember(name, version)
        written = self._written.get(name)
        if written is not None and (kind == "DELETED" or written[0] == version):
            del self._written[name]  # the watch caught up with this process's write

    def _on_relist(self) -> None:
        for (_, name), obj in self.informer.objects.items():
            self._remember(name, _version(obj))
        for name, (version, written, _) in list(self._written.items()):
            listed = self.informer.objects.get((self.jobs.namespace, name))
            if (listed is not None and _version(listed) == version) or (written is None and listed is None):
                del self._written[name]

    def _on_change(self) -> None:
        self.version += 1
        # NB: wakes every current waiter; later waiters wait for the next change.
        self._changed.set()
        self._changed = asyncio.Event()

    # -- readers and writers ----------------------------------------------------------------

    def _overlay(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """``(True, object or None for deleted)`` while a write of ``name`` overlays the watch."""
        written = self._written.get(name)
        if written is None:
            return False, None
        if time.monotonic() - written[2] > OVERLAY_SECONDS:
            del self._written[name]
            return False, None
        return True, written[1]

    async def observe(self, obj: dict[str, Any]) -> None:
        """Record an object this process just read or wrote, until the watch delivers it."""
        name, version = obj["metadata"]["name"], _version(obj)
        if (name, version) in self._seen:
            return  # the watch has delivered this version already (and perhaps newer ones)
        self._written[name] = (version, obj, time.monotonic())
        self._on_change()

    async def forget(self, name: str) -> None:
        """Record that this process deleted ``name``."""
        self._written[name] = ("", None, time.monotonic())
        self._on_change()

    async def get(self, name: str) -> dict[str, Any] | None:
        """The job from memory, else from the apiserver (``None`` when it does not exist)."""
        overlaid, written = self._overlay(name)
        if overlaid:
            return written
        found = self.informer.objects.get((self.jobs.namespace, name))
        if found is not None:
            return found
        fetched = await self.jobs.get(name)
        if fetched is not None:
            await self.observe(fetched)
        return fetched

    async def full(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with its result: fetched from the apiserver when the cache left it out."""
        if not (obj.get("status") or {}).get(OMITTED):
            return obj
        fetched = await self.jobs.get(obj["metadata"]["name"])
        return fetched if fetched is not None else obj

    def values(self) -> list[dict[str, Any]]:
        merged = {name: obj for (_, name), obj in self.informer.objects.items()}
        for name in list(self._written):
            overlaid, written = self._overlay(name)
            if not overlaid:
                continue
            if written is None:
                merged.pop(name, None)
            else:
                merged[name] = written
        return list(merged.values())

    async def changed(self, wait: float) -> bool:
        """Wait until any job changes or ``wait`` seconds pass; ``True`` when something changed."""
        try:
            await asyncio.wait_for(self._changed.wait(), wait)
        except TimeoutError:
            return False
        return True
