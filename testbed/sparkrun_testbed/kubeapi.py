"""A small synchronous client for the testbed's own API calls, and for tests.

The testbed needs a handful of verbs (readiness, server-side apply, create, delete, list,
wait) before any of the project's clients exist, from synchronous code (the CLI, pytest
session fixtures). It speaks plain HTTPS to kube-apiserver with ``httpx`` and resolves
``apiVersion``/``kind`` to URLs through API discovery, so it works for any resource the server
knows, custom resources included.

Errors: every non-2xx answer raises :class:`ApiError`, which carries the HTTP status and the
apiserver's ``Status.message`` (where admission puts field paths).
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

DEFAULT_FIELD_MANAGER = "sparkrun-testbed"
T = TypeVar("T")


class ApiError(Exception):
    """A non-2xx answer from kube-apiserver."""

    def __init__(self, status: int, message: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body: Mapping[str, Any] = body or {}

    @property
    def reason(self) -> str:
        """The Status ``reason`` (e.g. ``Invalid``, ``NotFound``), '' if there was none."""
        return str(self.body.get("reason", ""))


class WaitTimeout(TimeoutError):
    """Raised by :meth:`KubeApi.wait` when the condition did not hold in time."""


class KubeApi:
    """Admin access to one apiserver. Use as a context manager or call :meth:`close`."""

    def __init__(self, *, server: str, ca_pem: bytes, token: str, timeout: float = 30.0) -> None:
        context = ssl.create_default_context(cadata=ca_pem.decode())
        self.server = server
        self._http = httpx.Client(
            base_url=server,
            verify=context,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
        )
        self._kinds: dict[str, dict[str, tuple[str, bool]]] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi:
        """A client for the current context of a token-based kubeconfig (as the testbed writes)."""
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        return cls(
            server=cluster["server"],
            ca_pem=base64.b64decode(cluster["certificate-authority-data"]),
            token=user["token"],
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw requests ---------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send a request; raise :class:`ApiError` on any non-2xx status."""
        response = self._http.request(method, path, **kwargs)
        if response.is_success:
            return response
        try:
            body = response.json()
        except ValueError:
            body = {}
        message = body.get("message") if isinstance(body, dict) else None
        raise ApiError(
            response.status_code, message or response.text[:2000], body if isinstance(body, dict) else None
        )

    def get_json(self, path: str, **params: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", path, params=params).json()
        return result

    def healthy(self, path: str = "/readyz") -> bool:
        """True if ``path`` answers 2xx; False on any HTTP or connection error."""
        try:
            self.request("GET", path, timeout=5.0)
        except (ApiError, httpx.HTTPError):
            return False
        return True

    # -- discovery ------------------------------------------------------------------------------

    def resource_path(
        self, api_version: str, kind: str, *, namespace: str | None = None, name: str | None = None
    ) -> str:
        """The URL path of a collection (``name=None``) or an object.

        ``namespace`` is ignored for cluster-scoped kinds. Raises :class:`KeyError` if the
        server does not serve ``kind`` in ``api_version`` (after refreshing discovery once).
        """
        plural, namespaced = self._resolve(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespaced:
            if namespace is None:
                raise ValueError(f"{kind} is namespaced; give a namespace")
            base += f"/namespaces/{namespace}"
        path = f"{base}/{plural}"
        return path if name is None else f"{path}/{name}"

    def _resolve(self, api_version: str, kind: str) -> tuple[str, bool]:
        for refresh in (False, True):
            kinds = self._discover(api_version, refresh=refresh)
            if kind in kinds:
                return kinds[kind]
        raise KeyError(f"the server does not serve kind {kind!r} in {api_version!r}")

    def _discover(self, api_version: str, *, refresh: bool) -> dict[str, tuple[str, bool]]:
        if refresh or api_version not in self._kinds:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            try:
                resources = self.get_json(path).get("resources", [])
            except ApiError as e:
                if e.status != 404:
                    raise
                resources = []
            self._kinds[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"])) for r in resources if "/" not in r["name"]
            }
        return self._kinds[api_version]

    def _object_path(self, manifest: Mapping[str, Any], namespace: str | None) -> str:
        meta = manifest.get("metadata", {})
        return self.resource_path(
            manifest["apiVersion"],
            manifest["kind"],
            namespace=meta.get("namespace", namespace),
            name=meta["name"],
        )

    # -- verbs ----------------------------------------------------------------------------------

    def apply(
        self,
        manifest: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        force: bool = True,
    ) -> dict[str, Any]:
        """Server-side apply ``manifest``; returns the object as stored.

        ``namespace`` is used when the manifest names none and the kind is namespaced.
        """
        path = self._object_path(manifest, namespace)
        response = self.request(
            "PATCH",
            path,
            params={"fieldManager": field_manager, "force": "true" if force else "false"},
            content=json.dumps(manifest),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        result: dict[str, Any] = response.json()
        return result

    def create(self, manifest: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """POST ``manifest`` to its collection; returns the created object."""
        meta = manifest.get("metadata", {})
        path = self.resource_path(
            manifest["apiVersion"], manifest["kind"], namespace=meta.get("namespace", namespace)
        )
        result: dict[str, Any] = self.request("POST", path, json=dict(manifest)).json()
        return result

    def get(
        self, api_version: str, kind: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object, or None if it does not exist (HTTP 404)."""
        try:
            return self.get_json(self.resource_path(api_version, kind, namespace=namespace, name=name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list_items(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Items of a collection (all namespaces when ``namespace`` is None and the kind is namespaced)."""
        plural, namespaced = self._resolve(api_version, kind)
        if namespaced and namespace is not None:
            path = self.resource_path(api_version, kind, namespace=namespace)
        else:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            path = f"{base}/{plural}"
        params = {"labelSelector": label_selector} if label_selector else {}
        items: list[dict[str, Any]] = self.get_json(path, **params).get("items", [])
        return items

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete an object; returns False if it was already gone."""
        path = self.resource_path(api_version, kind, namespace=namespace, name=name)
        try:
            self.request("DELETE", path, json={"propagationPolicy": propagation})
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def wait(
        self,
        probe: Callable[[], T | None],
        *,
        timeout: float,
        what: str,
        interval: float = 0.2,
    ) -> T:
        """Call ``probe`` until it returns something other than None/False; return that.

        :class:`ApiError` from the probe counts as "not yet". Raises :class:`WaitTimeout`
        naming ``what`` and the last error when ``timeout`` seconds pass.
        """
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                result = probe()
            except (ApiError, httpx.HTTPError) as e:
                last_error, result = e, None
            if result is not None and result is not False:
                return result
            if time.monotonic() >= deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
            time.sleep(interval)


def load_manifests(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
