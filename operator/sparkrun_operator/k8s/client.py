"""The operator's Kubernetes client: construction, and JSON calls on any resource.

- :func:`connect` builds a ``kubernetes_asyncio`` ``ApiClient`` from in-cluster credentials (a
  pod's service account) or a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
- :class:`Kube` speaks plain JSON over that client (``ApiClient.call_api``: authentication, TLS
  and token refresh stay the library's job; typed models would cost CPU for nothing here):
  ``get``/``list`` (``None``/``[]`` when absent), ``create``, server-side ``apply`` with the field
  manager ``sparkrun-operator`` (forced: the operator owns the fields it renders),
  ``merge_patch`` (also on subresources such as ``status``), and ``delete`` with a UID
  precondition and foreground propagation.
- Every call has an explicit timeout; failures raise :mod:`~sparkrun_operator.k8s.errors` types
  with the transport exception chained as the cause. An optional ``on_write(verb, kind)`` hook
  counts writes (metrics).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from sparkrun_operator.api.resources import Kind
from sparkrun_operator.k8s import errors
from sparkrun_operator.render import keys

DEFAULT_TIMEOUT: Final = 30.0
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Resource:
    """A REST resource: ``group`` (``""`` for core), ``version``, ``plural``, scope and kind."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object (and a subresource of it)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def resource_of(kind: Kind) -> Resource:
    """The REST resource of one of our kinds."""
    return Resource(kind.group, kind.version, kind.plural, kind.namespaced, kind.kind)


JOBSETS: Final = Resource(keys.JOBSET_GROUP, keys.JOBSET_VERSION, keys.JOBSET_PLURAL, True, "JobSet")
SERVICES: Final = Resource("", "v1", "services", True, "Service")
PODS: Final = Resource("", "v1", "pods", True, "Pod")
NODES: Final = Resource("", "v1", "nodes", False, "Node")
JOBS: Final = Resource("batch", "v1", "jobs", True, "Job")
CLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim")
VOLUMES: Final = Resource("", "v1", "persistentvolumes", False, "PersistentVolume")
EVENTS: Final = Resource("events.k8s.io", "v1", "events", True, "Event")
CRDS: Final = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)
CLUSTER_PEERINGS: Final = Resource("kopf.dev", "v1", "clusterkopfpeerings", False, "ClusterKopfPeering")
PEERINGS: Final = Resource("kopf.dev", "v1", "kopfpeerings", True, "KopfPeering")

WriteHook = Callable[[str, str], None]


async def connect(
    *, kubeconfig: str | None = None, context: str | None = None, connections: int = 32
) -> k8s_client.ApiClient:
    """An ``ApiClient`` for the cluster: in-cluster when running in a pod, else the kubeconfig.

    ``kubeconfig``/``context`` force a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config`` when
    ``kubeconfig`` is None). At most ``connections`` TLS connections are open at once (each
    costs a few hundred KiB). The caller owns the client and closes it.
    """
    configuration = k8s_client.Configuration()
    configuration.connection_pool_maxsize = connections
    in_cluster = (
        kubeconfig is None
        and "KUBERNETES_SERVICE_HOST" in os.environ
        and (SERVICE_ACCOUNT_DIR / "token").exists()
    )
    try:
        if in_cluster:
            # NB: reads two small files; off the loop anyway.
            loader = k8s_config.incluster_config.InClusterConfigLoader(
                token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            )
            await asyncio.to_thread(loader.load_and_set, configuration)
        else:
            await k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (k8s_config.ConfigException, OSError) as error:
        raise errors.KubeError(f"no usable Kubernetes credentials: {error}") from error
    return k8s_client.ApiClient(configuration=configuration)


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


class Kube:
    """JSON calls on any resource through one ``ApiClient`` (see the module docstring)."""

    def __init__(
        self,
        api: k8s_client.ApiClient,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        field_manager: str = keys.FIELD_MANAGER,
        on_write: WriteHook | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.field_manager = field_manager
        self.on_write = on_write

    async def close(self) -> None:
        await self.api.close()

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
        """One call; the decoded JSON answer (``None`` when empty). Non-2xx raise ``KubeError``."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response = await self.api.call_api(
                path,
                method,
                query_params=_query(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout or self.timeout,
            )
            try:
                raw = await response.read()
                status = response.status
            finally:
                response.release()
        except (TimeoutError, aiohttp.ClientError) as error:
            raise errors.Unavailable(f"{type(error).__name__}: {error}", method=method, path=path) from error
        except k8s_client.ApiException as error:
            raise errors.from_response(
                status=error.status or 0, body=error.body, method=method, path=path
            ) from error
        if not 200 <= status < 300:
            raise errors.from_response(status=status, body=raw, method=method, path=path)
        if method != "GET" and self.on_write is not None:
            self.on_write(method, path)
        return json.loads(raw) if raw else None

    async def log_tail(self, namespace: str, pod: str, *, container: str, lines: int = 20) -> str:
        """The last ``lines`` lines of a container's log (``""`` when the pod or log is gone)."""
        path = PODS.path(namespace=namespace, name=pod, subresource="log")
        try:
            response = await self.api.call_api(
                path,
                "GET",
                query_params=_query({"container": container, "tailLines": lines}),
                header_params={"Accept": "*/*"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.timeout,
            )
            try:
                raw = await response.read()
                ok = 200 <= response.status < 300
            finally:
                response.release()
        except (TimeoutError, aiohttp.ClientError) as error:
            raise errors.Unavailable(f"{type(error).__name__}: {error}", method="GET", path=path) from error
        except k8s_client.ApiException:
            return ""  # not found, not started yet, or the node cannot be reached: no progress
        return raw.decode(errors="replace") if ok else ""

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            found: dict[str, Any] = await self.request("GET", resource.path(namespace=namespace, name=name))
        except errors.NotFound:
            return None
        return found

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of ``resource`` (in ``namespace``, or all), following ``continue`` tokens."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = await self.request(
                "GET",
                resource.path(namespace=namespace),
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": 500,
                    "continue": token,
                },
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    async def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj``; ``AlreadyExists`` when the name is taken."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        created: dict[str, Any] = await self.request(
            "POST", resource.path(namespace=namespace), body=dict(obj)
        )
        return created

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        owner: Mapping[str, Any] | None = None,
        force: bool = True,
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` as field manager ``sparkrun-operator``.

        ``owner`` (an ``ownerReferences`` entry) is set on the object when given. ``force``
        takes over fields another manager set: the operator is the authority on what it renders.
        """
        doc = dict(obj)
        metadata = dict(doc.get("metadata") or {})
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        doc["metadata"] = metadata
        doc.setdefault("apiVersion", resource.api_version)
        doc.setdefault("kind", resource.kind)
        path = resource.path(namespace=metadata.get("namespace"), name=metadata["name"])
        applied: dict[str, Any] = await self.request(
            "PATCH",
            path,
            query={"fieldManager": self.field_manager, "force": force},
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
        """JSON merge patch (``subresource`` e.g. ``status``)."""
        patched: dict[str, Any] = await self.request(
            "PATCH",
            resource.path(namespace=namespace, name=name, subresource=subresource),
            query={"fieldManager": self.field_manager},
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
        uid: str | None = None,
        propagation: str = "Foreground",
    ) -> bool:
        """Delete ``name`` if its UID is still ``uid``; ``False`` when it is already gone.

        A UID mismatch (a new object reused the name) raises ``Conflict`` and deletes nothing.
        """
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", resource.path(namespace=namespace, name=name), body=body)
        except errors.NotFound:
            return False
        return True

    async def delete_all(self, items: Sequence[tuple[Resource, str, str | None, str | None]]) -> None:
        """Delete several ``(resource, name, namespace, uid)`` concurrently; absent ones are fine."""
        await asyncio.gather(*(self.delete(r, n, ns, uid=u) for r, n, ns, u in items))
