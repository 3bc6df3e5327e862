"""A list-then-watch cache of one resource: the building block of every watch-driven reader.

:class:`Informer` lists the objects once, then follows a watch from the list's
``resourceVersion``; when the watch ends it resumes from the last version seen (bookmarks keep
that fresh), and when the version has expired (410 Gone) or the connection fails it relists
after a capped back-off. ``on_change`` is called (synchronously, on the event loop) after every
change to the cache, including each relist, so readers rebuild derived state from
:meth:`Informer.objects` and never make an API call per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sparkrun_operator.k8s.rest import ApiError, Resource, Rest

log = logging.getLogger("sparkrun.k8s.informer")

Key = tuple[str, str]


def key_of(obj: dict[str, Any]) -> Key:
    """``(namespace, name)`` of an object (namespace empty for cluster-scoped ones)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """Keeps ``objects`` equal to the apiserver's view of ``resource`` (see module docs)."""

    def __init__(
        self,
        rest: Rest,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[], None] | None = None,
        watch_timeout: int = 240,
        max_backoff: float = 30.0,
    ) -> None:
        self.rest = rest
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self._objects: dict[Key, dict[str, Any]] = {}
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._version: str | None = None

    @property
    def objects(self) -> dict[Key, dict[str, Any]]:
        """The cache (do not mutate)."""
        return self._objects

    @property
    def synced(self) -> bool:
        """Whether the first list has completed."""
        return self._synced.is_set()

    async def start(self, *, wait: bool = True, sync_timeout: float = 30.0) -> None:
        """Begin listing and watching; with ``wait``, return after the first list (or raise)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer:{self.resource.plural}")
        if wait:
            waiter = asyncio.create_task(self._synced.wait())
            done, _ = await asyncio.wait(
                {waiter, self._task}, timeout=sync_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                waiter.cancel()
                if self._task in done:
                    self._task.result()  # re-raise what killed it
                raise TimeoutError(f"listing {self.resource.plural} took longer than {sync_timeout} s")

    async def close(self) -> None:
        """Stop watching (the cache keeps its last state)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                if self._version is None:
                    await self._relist()
                await self._follow()
                backoff = 0.5  # a watch that ended normally: resume at once
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status == 410:
                    log.info("%s: watch expired; relisting", self.resource.plural)
                    self._version = None
                    continue
                log.warning("%s: %s; retrying in %.1f s", self.resource.plural, error, backoff)
                self._version = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as error:  # network errors of any client library
                log.warning(
                    "%s: watch failed (%r); relisting in %.1f s", self.resource.plural, error, backoff
                )
                self._version = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    async def _relist(self) -> None:
        found = await self.rest.list_raw(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        self._objects = {key_of(obj): obj for obj in found.get("items") or []}
        self._version = str((found.get("metadata") or {}).get("resourceVersion") or "") or None
        self._synced.set()
        self._notify()

    async def _follow(self) -> None:
        async for kind, obj in self.rest.watch(
            self.resource,
            self.namespace,
            resource_version=self._version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout,
        ):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self._version = str(version)
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self._objects.pop(key_of(obj), None)
            elif kind in {"ADDED", "MODIFIED"}:
                self._objects[key_of(obj)] = obj
            else:
                continue
            self._notify()

    def _notify(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception:  # NB: a broken reader must not stop the watch
            log.exception("%s: on_change failed", self.resource.plural)
