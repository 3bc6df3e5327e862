"""The project's one Kubernetes client: construction, and JSON calls on any resource (ADR 0013).

- :func:`connect` (:mod:`.connection`, re-exported here) builds a ``kubernetes_asyncio``
  ``ApiClient`` from in-cluster credentials (a pod's service account) or a kubeconfig
  (``$KUBECONFIG`` or ``~/.kube/config``), reading the environment's proxy settings once.
- :class:`Kube` speaks plain JSON over that client (``ApiClient.call_api``: authentication, TLS
  and token refresh stay the library's job; typed models would cost CPU for nothing here) and
  returns plain ``dict`` objects. Every process constructs it with its own field manager
  (``sparkrun-operator``, ``sparkrun-gateway``, ``sparkrun-daemon-api``); every write
  (``POST``/``PUT``/``PATCH``, :meth:`Kube.request` included) carries it.

Contract:

- every call has an explicit timeout; every failure raises a :mod:`~sparkrun_operator.k8s.errors`
  type with the transport exception chained as ``__cause__`` (a call that got no HTTP answer is
  ``KubeUnavailable``); :meth:`Kube.get` returns ``None`` and :meth:`Kube.delete` ``False`` for 404;
- ``429 Too Many Requests`` was not processed: it is retried up to ``retries_429`` times after
  the advised ``Retry-After`` (jittered, capped), then raised as ``KubeTooManyRequests``;
- lists are paginated (``limit``/``continue``); an expired continue token (410) relists;
- deletes carry a UID precondition when given, and an explicit propagation policy;
- :func:`retry_conflicts` re-runs a read-modify-write that met a 409, with jitter;
- :meth:`Kube.watch` yields ``(type, object)`` until the server ends the watch; an expired
  resourceVersion (410, or an ``ERROR`` event) raises ``KubeGone``; :meth:`Kube.stream_lines` streams
  a body line by line (pod logs). The list-watch-relist loop is :mod:`.informer`'s.

An optional ``on_write(verb, path)`` hook counts writes (metrics). The one ``Resource`` table
lives in :mod:`.resources` (import it from there).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aiohttp
from kubernetes_asyncio import client as k8s_client

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.connection import connect as connect  # re-exported: the one client's constructor
from sparkrun_operator.k8s.resources import PODS, Resource
from sparkrun_operator.render import keys
from sparkrun_operator.retry import Backoff, retry

DEFAULT_TIMEOUT: Final = 30.0
PAGE_SIZE: Final = 500
#: Seconds ``close`` waits after the session closed, for its TLS transports to finish closing.
CLOSE_GRACE_SECONDS: Final = 0.25
RETRIES_429: Final = 3
#: Relists of one paginated list whose continue token expired before giving up.
RELISTS_410: Final = 3
#: The longest watch event (one object) or log line kept in memory while it arrives.
MAX_LINE: Final = 64 * 1024 * 1024
_WRITES: Final = frozenset({"POST", "PUT", "PATCH"})
_TRANSPORT: Final = (TimeoutError, aiohttp.ClientError, ConnectionError)
#: The most bytes of a container's log ``log_tail`` reads unless its caller names another bound.
LOG_TAIL_BYTES: Final = 64 * 1024

#: Field managers of the project's processes (one per process; ADR 0013).
OPERATOR_MANAGER: Final = keys.FIELD_MANAGER
GATEWAY_MANAGER: Final = keys.GATEWAY_MANAGER
AUTOSCALER_MANAGER: Final = keys.AUTOSCALER_MANAGER
DAEMON_API_MANAGER: Final = keys.DAEMON_API_MANAGER


WriteHook = Callable[[str, str], None]
Event = tuple[str, dict[str, Any]]
T = TypeVar("T")
#: Attempts of a read-modify-write that keeps meeting 409 (a resourceVersion race).
MAX_CONFLICTS: Final = 8
#: Between those attempts.
CONFLICT_BACKOFF: Final = Backoff(initial=0.01, maximum=0.25)


async def retry_conflicts(attempt: Callable[[], Awaitable[T]], *, attempts: int = MAX_CONFLICTS) -> T:
    """Run ``attempt`` (a read-modify-write) until it does not fail with 409, with jitter.

    ``KubeAlreadyExists`` is not a race and is raised at once; after ``attempts`` conflicts the
    last ``errors.KubeConflict`` is raised.
    """
    return await retry(
        attempt,
        attempts=attempts,
        retryable=lambda error: (
            isinstance(error, errors.KubeConflict) and not isinstance(error, errors.KubeAlreadyExists)
        ),
        backoff=CONFLICT_BACKOFF,
    )


@dataclass(frozen=True)
class Listing:
    """A complete (all pages) list: the items and the resourceVersion to watch from."""

    items: list[dict[str, Any]]
    resource_version: str | None


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            out.append((key, "true" if value else "false"))
        else:
            out.append((key, str(value)))
    return out


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


async def _read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    """At most ``limit`` bytes of a body (fewer when it ends first)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await content.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def _lines(content: aiohttp.StreamReader, *, max_line: int) -> AsyncIterator[bytes]:
    """The body split at newlines (a line longer than ``max_line`` is yielded in pieces)."""
    pending = b""
    async for chunk in content.iter_any():
        pending += chunk
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            yield pending[: end + 1]
            pending = pending[end + 1 :]
        while len(pending) > max_line:
            yield pending[:max_line]
            pending = pending[max_line:]
    if pending:
        yield pending


class Kube:
    """JSON calls on any resource through one ``ApiClient`` (see the module docstring)."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        field_manager: str,
        timeout: float = DEFAULT_TIMEOUT,
        on_write: WriteHook | None = None,
        retries_429: int = RETRIES_429,
        backoff_429: Backoff | None = None,
        owns_api: bool = True,
    ) -> None:
        if not field_manager:
            raise ValueError("every Kubernetes client writes as a named field manager")
        self.api = api
        self.field_manager = field_manager
        self.timeout = timeout
        self.on_write = on_write
        self.retries_429 = retries_429
        self.backoff_429 = backoff_429 or Backoff(initial=0.25, maximum=5.0)
        self.owns_api = owns_api

    @classmethod
    async def connect(
        cls,
        *,
        field_manager: str,
        kubeconfig: str | None = None,
        context: str | None = None,
        **options: Any,
    ) -> Kube:
        """A client that owns a new ``ApiClient`` (see :func:`connect`)."""
        return cls(
            await connect(kubeconfig=kubeconfig, context=context), field_manager=field_manager, **options
        )

    def as_manager(self, field_manager: str) -> Kube:
        """A client on the same connection pool writing as ``field_manager`` (not owning it)."""
        return Kube(
            self.api,
            field_manager=field_manager,
            timeout=self.timeout,
            on_write=self.on_write,
            retries_429=self.retries_429,
            backoff_429=self.backoff_429,
            owns_api=False,
        )

    @property
    def host(self) -> str:
        """The apiserver URL."""
        return str(self.api.configuration.host)

    async def close(self) -> None:
        if self.owns_api:
            await self.api.close()
            # NB: aiohttp closes its TLS connections asynchronously: a loop that ends right after
            # the session's close finds their transports unclosed (aiohttp's "graceful shutdown";
            # the intermittent ResourceWarning at the end of tests/operator/test_jobcache.py).
            await asyncio.sleep(CLOSE_GRACE_SECONDS)

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        limit: float | aiohttp.ClientTimeout | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request (and ``headers``); the response, unread. Only transport failures raise."""
        params = dict(query or {})
        if method in _WRITES:
            params.setdefault("fieldManager", self.field_manager)
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=_query(params),
                header_params={**(headers or {}), "Accept": accept, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limit or self.timeout,
            )
        except _TRANSPORT as error:
            raise errors.from_transport(error, method=method, path=path) from error
        except k8s_client.ApiException as error:
            raise errors.from_response(
                status=error.status or 0, body=error.body, method=method, path=path
            ) from error
        return response

    async def _refuse(self, response: aiohttp.ClientResponse, method: str, path: str) -> errors.KubeError:
        """The typed error for a non-2xx ``response`` (at most 1 MiB of its body read)."""
        try:
            raw = await _read_at_most(response.content, 1 << 20)  # NB: an aggregated API's may not end
        except _TRANSPORT:
            raw = b""
        return errors.from_response(
            status=response.status,
            body=raw,
            method=method,
            path=path,
            retry_after=response.headers.get("Retry-After"),
        )

    async def _once(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str,
        limit: float,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        response = await self._open(
            method, path, query=query, body=body, content_type=content_type, limit=limit, headers=headers
        )
        raw, cap = b"", max_bytes if max_bytes is not None else -1
        try:
            if not 200 <= response.status < 300:
                raise await self._refuse(response, method, path)
            try:
                raw = await (response.read() if cap < 0 else _read_at_most(response.content, cap + 1))
            except _TRANSPORT as error:
                raise errors.from_transport(error, method=method, path=path) from error
        finally:
            if 0 <= cap < len(raw):
                response.close()  # NB: the rest unread: the connection is not reused
            else:
                response.release()
        if 0 <= cap < len(raw):
            raise errors.KubeError(
                f"answer over {cap} bytes", status=response.status, method=method, path=path
            )
        if method != "GET" and self.on_write is not None:
            self.on_write(method, path)
        return _decode(raw)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        """One call (with ``headers``); the decoded JSON answer (``None`` when empty). Non-2xx
        raise ``KubeError``, as does an answer over ``max_bytes`` (never read past it)."""
        timeout = request_timeout or self.timeout
        return await retry(
            lambda: self._once(method, path, query, body, content_type, timeout, headers, max_bytes),
            attempts=self.retries_429 + 1,
            retryable=lambda error: isinstance(error, errors.KubeTooManyRequests),
            backoff=self.backoff_429,
            floor=lambda error: min(getattr(error, "retry_after", 0.0), self.backoff_429.maximum),
        )

    async def log_tail(
        self, namespace: str, pod: str, *, container: str, lines: int = 20, limit_bytes: int = LOG_TAIL_BYTES
    ) -> str:
        """The last ``lines`` lines of a container's log, at most ``limit_bytes`` of them (the
        kubelet's ``limitBytes``, counted from the first of those lines; and never more read
        here, whatever the answer holds): a line cut at the limit is dropped. ``""`` when there is
        none to read (the pod or container is gone or not started, or its node cannot be
        reached). No answer at all raises ``KubeUnavailable`` like every call."""
        path = PODS.path(namespace=namespace, name=pod, subresource="log")
        query = {"container": container, "tailLines": lines, "limitBytes": limit_bytes}
        try:
            response = await self._open("GET", path, query=query, accept="*/*")
        except errors.KubeError as error:
            if isinstance(error, errors.KubeUnavailable) and not error.status:
                raise
            return ""
        raw = b""
        try:
            if not 200 <= response.status < 300:
                return ""
            try:
                raw = await _read_at_most(response.content, limit_bytes)
            except _TRANSPORT as error:
                raise errors.from_transport(error, method="GET", path=path) from error
        finally:
            if len(raw) >= limit_bytes:
                response.close()  # NB: the rest unread: the connection is not reused
            else:
                response.release()
        if len(raw) >= limit_bytes:
            raw = raw[: raw.rfind(b"\n") + 1]
        return raw.decode(errors="replace")

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            found: dict[str, Any] = await self.request("GET", resource.path(namespace, name))
        except errors.KubeNotFound:
            return None
        return found

    async def list_versioned(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
        cached: bool = False,
    ) -> Listing:
        """Every object, page by page, and the list's resourceVersion (to watch from).

        ``cached`` reads from the apiserver's watch cache as it is (``resourceVersion=0``; the
        apiserver may then ignore ``limit``) instead of a consistent read: for read-only answers
        that may be a moment old, never for read-modify-write. A continue token that expired
        between pages (410) restarts the list, at most :data:`RELISTS_410` times.
        """
        for relist in range(RELISTS_410 + 1):
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = await self.request(
                        "GET",
                        resource.path(namespace),
                        query={
                            "labelSelector": label_selector,
                            "fieldSelector": field_selector,
                            "limit": limit,
                            "continue": token,
                            "resourceVersion": "0" if cached and token is None else None,
                        },
                    )
                    items.extend(page.get("items") or [])
                    metadata = page.get("metadata") or {}
                    token = metadata.get("continue") or None
                    if token is None:
                        return Listing(items, str(metadata.get("resourceVersion") or "") or None)
            except errors.KubeGone:
                if token is None or relist == RELISTS_410:
                    raise
        raise AssertionError("unreachable")

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
        cached: bool = False,
    ) -> list[dict[str, Any]]:
        """Every object of ``resource`` (in ``namespace``, or all): :meth:`list_versioned`'s items."""
        listing = await self.list_versioned(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            cached=cached,
        )
        return listing.items

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Create ``obj`` (in ``namespace``, else its own); ``KubeAlreadyExists`` when the name is taken."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace")
        created: dict[str, Any] = await self.request("POST", resource.path(namespace), body=dict(obj))
        return created

    async def replace(
        self,
        resource: Resource,
        name: str,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT: replaces the object (a ``metadata.resourceVersion`` in ``obj`` is a precondition)."""
        replaced: dict[str, Any] = await self.request(
            "PUT", resource.path(namespace, name, subresource), body=dict(obj)
        )
        return replaced

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        owner: Mapping[str, Any] | None = None,
        force: bool = True,
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` (named by its ``metadata.name``) as this client's manager.

        ``owner`` (an ``ownerReferences`` entry) is set on the object when given. ``force``
        takes over fields another manager set: the writer is the authority on what it renders.
        """
        doc = dict(obj)
        metadata = dict(doc.get("metadata") or {})
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        doc["metadata"] = metadata
        doc.setdefault("apiVersion", resource.api_version)
        if resource.kind:
            doc.setdefault("kind", resource.kind)
        path = resource.path(namespace or metadata.get("namespace"), metadata["name"])
        applied: dict[str, Any] = await self.request(
            "PATCH",
            path,
            query={"force": force},
            body=doc,
            content_type="application/apply-patch+yaml",
        )
        return applied

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (``subresource`` e.g. ``status``; ``metadata.resourceVersion`` in the
        patch is a precondition)."""
        patched: dict[str, Any] = await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )
        return patched

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete ``name`` (if its UID is still ``uid`` and, when given, its resourceVersion still
        ``resource_version``); ``False`` when it is already gone.

        ``propagation`` (``Foreground``, ``Background`` or ``Orphan``) is always explicit. A
        precondition mismatch (a new object reused the name, or the object changed) raises
        ``KubeConflict`` and deletes nothing.
        """
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        if uid is not None or resource_version is not None:
            body["preconditions"] = {k: v for k, v in preconditions.items() if v is not None}
        try:
            await self.request("DELETE", resource.path(namespace, name), body=body)
        except errors.KubeNotFound:
            return False
        return True

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AsyncGenerator[Event, None]:
        """Stream ``(type, object)`` events until the server ends the watch.

        A non-2xx answer raises its typed error (method ``GET``); an ``ERROR`` event raises the
        typed error of its ``Status`` (method ``WATCH``; ``KubeGone`` for an expired
        ``resource_version``); a broken stream raises ``KubeUnavailable`` (method ``WATCH``, status 0).
        """
        query = {
            "watch": True,
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": bookmarks,
        }
        path = resource.path(namespace)
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_connect=self.timeout)
        response = await self._open("GET", path, query=query, limit=timeout)
        try:
            if response.status != 200:
                raise await self._refuse(response, "GET", path)
            try:
                async for line in _lines(response.content, max_line=MAX_LINE):
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = str(event.get("type", "")), event.get("object") or {}
                    if kind == "ERROR":
                        raise errors.from_response(
                            status=int(obj.get("code") or 500), body=obj, method="WATCH", path=path
                        )
                    yield kind, obj
            except _TRANSPORT as error:
                raise errors.from_transport(error, method="WATCH", path=path) from error
            except ValueError as error:  # a truncated or garbled event
                raise errors.KubeUnavailable(
                    f"undecodable watch event: {error}", method="WATCH", path=path
                ) from error
        finally:
            response.release()

    async def stream_lines(
        self,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
        max_line: int = 1024 * 1024,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[bytes]:
        """GET ``path`` (with ``headers``) and yield the body line by line (pod logs, events);
        lines longer than ``max_line`` come in pieces. Failures raise typed errors like every call."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=read_timeout)
        response = await self._open("GET", path, query=query, accept="*/*", limit=timeout, headers=headers)
        try:
            if response.status != 200:
                raise await self._refuse(response, "GET", path)
            try:
                async for line in _lines(response.content, max_line=max_line):
                    yield line
            except _TRANSPORT as error:
                raise errors.from_transport(error, method="GET", path=path) from error
        finally:
            response.release()
