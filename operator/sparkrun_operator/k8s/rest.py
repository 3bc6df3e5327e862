"""Raw JSON REST access to any Kubernetes resource, over a kubernetes_asyncio ``ApiClient``.

The daemon operations read and write many kinds (the project's CRDs, Nodes, Pods, JobSets,
ServiceAccounts, RBAC, CRDs); typed per-kind clients would be large and slow to deserialise, so
this module speaks plain JSON through ``ApiClient.call_api`` (authentication, TLS and token
refresh stay the client library's job) and returns plain ``dict`` objects.

Contract:

- every call has an explicit timeout (:data:`DEFAULT_TIMEOUT` unless given);
- a non-2xx answer raises :class:`ApiError` carrying the HTTP status and the apiserver's
  ``Status`` body, except :meth:`Rest.get`, which returns ``None`` for 404, and
  :meth:`Rest.delete`, which returns ``False`` for 404;
- :meth:`Rest.watch` yields ``(type, object)`` until the server closes the watch or its
  ``timeoutSeconds`` pass; a ``410 Gone`` (expired resourceVersion) raises :class:`ApiError`
  so the caller relists.

:func:`connect` builds an ``ApiClient`` with the shared constructor of :mod:`.client`; callers
own the client and close it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client

from sparkrun_operator.api.resources import Kind

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIG_MAPS",
    "CRDS",
    "DEFAULT_TIMEOUT",
    "EVENTS",
    "JOBSETS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SECRETS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "ApiError",
    "Resource",
    "Rest",
    "connect",
    "resource_of",
    "stream_lines",
]

DEFAULT_TIMEOUT = 30.0
RETRIES_429 = 3


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The collection or object URL path (namespace required for namespaced objects)."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced:
            if namespace is None:
                path = f"{base}/{self.plural}"  # across all namespaces (list/watch only)
            else:
                path = f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        else:
            path = f"{base}/{self.plural}"
        if name is not None:
            path += "/" + quote(name, safe="")
            if subresource:
                path += "/" + subresource
        return path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def resource_of(kind: Kind) -> Resource:
    """The REST location of one of the project's kinds."""
    return Resource(kind.group, kind.version, kind.plural, kind.namespaced)


NODES = Resource("", "v1", "nodes", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
PODS = Resource("", "v1", "pods", namespaced=True)
SERVICES = Resource("", "v1", "services", namespaced=True)
SECRETS = Resource("", "v1", "secrets", namespaced=True)
CONFIG_MAPS = Resource("", "v1", "configmaps", namespaced=True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", namespaced=True)
EVENTS = Resource("", "v1", "events", namespaced=True)
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)


class ApiError(Exception):
    """A non-2xx answer from the apiserver."""

    def __init__(self, status: int, body: Any, *, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        self.reason = str(self.body.get("reason", ""))
        self.message = str(self.body.get("message", body if isinstance(body, str) else ""))
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message}".strip())

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: AlreadyExists, or a resourceVersion precondition that failed."""
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"


async def connect(kubeconfig: str | None = None, context: str | None = None) -> k8s_client.ApiClient:
    """An ``ApiClient`` from :func:`sparkrun_operator.k8s.client.connect` (in-cluster credentials
    when running in a pod and no kubeconfig is given, else the kubeconfig)."""
    from sparkrun_operator.k8s import client

    return await client.connect(kubeconfig=kubeconfig, context=context)


def _query(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    out = []
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))
    return out


class Rest:
    """JSON requests to the apiserver through one ``ApiClient`` (shared, not owned)."""

    def __init__(self, api: k8s_client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.api = api
        self.timeout = timeout

    @property
    def host(self) -> str:
        """The apiserver URL."""
        return str(self.api.configuration.host)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Any:
        """One request; the decoded JSON answer. Raises :class:`ApiError` on non-2xx.

        A ``429 Too Many Requests`` (apiserver priority and fairness, or storage still
        initializing) was not processed, so it is retried up to :data:`RETRIES_429` times after
        the advertised delay (at most 2 s).
        """
        for attempt in range(RETRIES_429 + 1):
            response = await self.api.call_api(
                path,
                method,
                query_params=_query(query),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout or self.timeout,
            )
            async with response:
                raw = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After", "1")
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = raw.decode("utf-8", "replace")
            if status == 429 and attempt < RETRIES_429:
                try:
                    delay = min(float(retry_after), 2.0)
                except ValueError:
                    delay = 1.0
                await asyncio.sleep(max(delay, 0.1))
                continue
            if not 200 <= status <= 299:
                raise ApiError(status, decoded, method=method, path=path)
            return decoded
        raise AssertionError("unreachable")

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            found: dict[str, Any] = await self.request("GET", resource.path(namespace, name))
        except ApiError as error:
            if error.not_found:
                return None
            raise
        return found

    async def list_raw(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        cached: bool = False,
    ) -> dict[str, Any]:
        """The List object (``items``, ``metadata.resourceVersion``).

        ``cached`` reads from the apiserver's watch cache as it is (``resourceVersion=0``)
        instead of a consistent read, which waits until the cache has caught up with etcd
        (tens of milliseconds right after writes). For read-only answers that may be a
        moment old (inline queries, monitors); never for read-modify-write.
        """
        query = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "resourceVersion": "0" if cached else None,
        }
        found: dict[str, Any] = await self.request("GET", resource.path(namespace), query=query)
        return found

    async def items(
        self, resource: Resource, namespace: str | None = None, **selectors: Any
    ) -> list[dict[str, Any]]:
        """The objects of a list."""
        found = await self.list_raw(resource, namespace, **selectors)
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
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

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (``metadata.resourceVersion`` in the patch is a precondition)."""
        patched: dict[str, Any] = await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )
        return patched

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        namespace: str | None = None,
        force: bool = True,
    ) -> dict[str, Any]:
        """Server-side apply of ``obj`` (named by its ``metadata.name``)."""
        name = obj["metadata"]["name"]
        applied: dict[str, Any] = await self.request(
            "PATCH",
            resource.path(namespace, name),
            query={"fieldManager": field_manager, "force": force},
            body=dict(obj),
            content_type="application/apply-patch+yaml",
        )
        return applied

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete (with a UID precondition when given). ``False`` when it did not exist."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", resource.path(namespace, name), body=body)
        except ApiError as error:
            if error.not_found:
                return False
            raise
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
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events. Raises :class:`ApiError` (410 when expired)."""
        query = {
            "watch": True,
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": bookmarks,
        }
        response = await self.api.call_api(
            resource.path(namespace),
            "GET",
            query_params=_query(query),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_connect=self.timeout),
        )
        async with response:
            if response.status != 200:
                raw = await response.read()
                try:
                    decoded = json.loads(raw)
                except ValueError:
                    decoded = raw.decode("utf-8", "replace")
                raise ApiError(response.status, decoded, method="WATCH", path=resource.path(namespace))
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(
                        int(obj.get("code", 500)), obj, method="WATCH", path=resource.path(namespace)
                    )
                yield kind, obj


async def stream_lines(
    rest: Rest, path: str, *, query: Mapping[str, Any] | None = None, read_timeout: float | None = None
) -> AsyncIterator[bytes]:
    """GET ``path`` and yield the body line by line (pod logs). Raises :class:`ApiError`."""
    response = await rest.api.call_api(
        path,
        "GET",
        query_params=_query(query),
        header_params={"Accept": "*/*"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=rest.timeout, sock_read=read_timeout),
    )
    async with response:
        if response.status != 200:
            raw = await response.read()
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = raw.decode("utf-8", "replace")
            raise ApiError(response.status, decoded, method="GET", path=path)
        async for line in response.content:
            yield line
