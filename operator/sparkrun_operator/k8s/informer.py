"""The project's one watch primitive: a list-then-watch cache of one resource (ADR 0013).

:class:`Informer` lists the objects (all pages), then follows a watch from the list's
``resourceVersion``:

- a watch the server ends normally is resumed from the last resourceVersion seen (bookmarks
  keep it fresh), at once;
- an expired resourceVersion (``410 Gone``) or an ``ERROR`` event relists; the new list replaces
  the cache in one step, so objects created or deleted while the watch was down are right
  afterwards (no stale entries);
- a failure (apiserver down, connection reset, 5xx) waits a jittered, capped back-off
  (:mod:`sparkrun_operator.retry`) and resumes from the last resourceVersion (a relist follows
  if the server no longer has it), so watchers that fail together do not retry in lockstep.

ResourceVersions are opaque strings: the primitive only remembers the last one the stream
gave, and never compares them. Memory is bounded by the cache itself: events are applied as
they arrive (no queue), and ``transform`` may prune each object before it is stored
(:func:`drop_managed_fields`).

Callbacks run synchronously on the event loop and must not block: ``on_change()`` after every
change to the cache (each event and each relist), ``on_event(type, obj)`` for each applied
event, ``on_relist()`` after each relist, ``on_retry(error, delay)`` before each back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import Resource
from sparkrun_operator.retry import Attempts, Backoff

log = logging.getLogger("sparkrun.k8s.informer")

Key = tuple[str, str]
#: A watch that ends normally sooner than this, with no event, counts as a failure (back-off).
MIN_WATCH_SECONDS = 1.0


def key_of(obj: dict[str, Any]) -> Key:
    """``(namespace, name)`` of an object (namespace empty for cluster-scoped ones)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields`` (often the larger part of a small object)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta.pop("managedFields")
    return obj


def _is_event(error: errors.KubeError) -> bool:
    """Whether ``error`` is an ``ERROR`` event of the stream (as opposed to a transport failure)."""
    return error.method == "WATCH" and error.status != 0


class Informer:
    """Keeps ``objects`` equal to the apiserver's view of ``resource`` (see module docs)."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        on_change: Callable[[], None] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        on_relist: Callable[[], None] | None = None,
        on_retry: Callable[[BaseException, float], None] | None = None,
        watch_timeout: int = 240,
        backoff: Backoff | None = None,
        page_size: int = 500,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.on_change = on_change
        self.on_event = on_event
        self.on_relist = on_relist
        self.on_retry = on_retry
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.attempts = Attempts(backoff or Backoff(initial=0.5, maximum=30.0))
        #: The last resourceVersion the list or the watch gave (``None``: list next).
        self.resource_version: str | None = None
        #: Completed lists (the first one included).
        self.relists = 0
        self._objects: dict[Key, dict[str, Any]] = {}
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._name = f"{resource.plural}{'@' + namespace if namespace else ''}"

    @property
    def objects(self) -> dict[Key, dict[str, Any]]:
        """The cache (do not mutate)."""
        return self._objects

    @property
    def synced(self) -> bool:
        """Whether the first list has completed."""
        return self._synced.is_set()

    async def start(self, *, wait: bool = True, sync_timeout: float | None = 30.0) -> None:
        """Begin listing and watching; with ``wait``, return after the first list (or raise
        ``TimeoutError`` after ``sync_timeout`` seconds; ``None`` waits as long as it takes)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"informer:{self._name}")
        if wait:
            waiter = asyncio.create_task(self._synced.wait())
            done, _ = await asyncio.wait(
                {waiter, self._task}, timeout=sync_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                waiter.cancel()
                if self._task in done:
                    self._task.result()  # re-raise what killed it
                raise TimeoutError(f"listing {self._name} took longer than {sync_timeout} s")

    async def close(self) -> None:
        """Stop watching (the cache keeps its last state)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                await self._follow()
            except asyncio.CancelledError:
                raise
            except errors.KubeGone as error:
                log.info("%s: resourceVersion expired (%s); relisting", self._name, error.message)
                self.resource_version = None
            except errors.KubeUnavailable as error:
                if _is_event(error):
                    self.resource_version = None
                # NB: otherwise resumed from the last resourceVersion; a 410 then relists.
                await self._back_off(error)
            except Exception as error:  # an ERROR event, refused (403), unforeseen: list again
                self.resource_version = None
                await self._back_off(error)

    async def _back_off(self, error: BaseException) -> None:
        delay = self.attempts.next_delay()
        log.warning("%s: watch failed (%s); retrying in %.2f s", self._name, error, delay)
        if self.on_retry is not None:
            self.on_retry(error, delay)
        await asyncio.sleep(delay)

    async def _relist(self) -> None:
        listing = await self.kube.list_versioned(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
        )
        self._objects = {key_of(obj): self._shape(obj) for obj in listing.items}
        self.resource_version = listing.resource_version
        self.relists += 1
        self._synced.set()
        self.attempts.reset()
        self._call(self.on_relist)
        self._call(self.on_change)

    def _shape(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.transform(obj) if self.transform is not None else obj

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        opened, events = loop.time(), 0
        # NB: closed here, not by the garbage collector: a stopped informer (its task cancelled
        # mid-stream) closes the watch's connection at once, even when the loop ends next.
        stream = self.kube.watch(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout,
        )
        async with contextlib.aclosing(stream):
            async for kind, obj in stream:
                events += 1
                if events == 1:
                    self.attempts.reset()
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    self.resource_version = str(version)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._objects.pop(key_of(obj), None)
                elif kind in {"ADDED", "MODIFIED"}:
                    obj = self._shape(obj)
                    self._objects[key_of(obj)] = obj
                else:
                    raise errors.KubeError(f"unexpected watch event {kind!r}", method="WATCH")
                self._event(kind, obj)
                self._call(self.on_change)
        if events == 0 and loop.time() - opened < MIN_WATCH_SECONDS:
            # NB: a server that ends every watch at once must not make us spin.
            await self._back_off(RuntimeError("the watch ended at once"))

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, obj)
        except Exception:  # NB: a broken reader must not stop the watch
            log.exception("%s: on_event failed", self._name)

    def _call(self, callback: Callable[[], None] | None) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:  # NB: a broken reader must not stop the watch
            log.exception("%s: a watch callback failed", self._name)
