"""The catalog of the 94 daemon operations: names, kinds, scopes, aliases, schemas, availability.

Every operation of the daemon API document is registered here with the exact declaration of the
reference daemon (sparkrun 0.4.1): kind, scope, reservation policy (``resources``), version,
HTTP alias, and request/result JSON schemas (``additionalProperties: false`` on every request, so
unknown top-level fields are rejected). The declarations come from the committed package data
``ops/data/daemon-ops.json``, generated from ``../shared/spec`` by ``hack/gen-ops-catalog.py``
(ADR 0005); nothing here is edited by hand except :data:`UNAVAILABLE`, this project's policy of
which operations run on Kubernetes.

Availability. An operation is either *enabled* (an executor in :mod:`sparkrun_operator.ops.executors`
implements it over Kubernetes resources) or *disabled* with a typed reason:

- ``not_applicable``: the operation has no meaning on Kubernetes (SSH key meshing, host setup,
  Tailscale, systemd proxy services, gateway process control); the reason names the
  Kubernetes-native way;
- ``not_implemented``: it has a Kubernetes meaning that the API does not expose yet (model
  caches, benchmarks, recipe registries, image builds); the reason names the resource to use.

Disabled operations stay in ``/openapi.json`` (it describes every registered operation) but are
absent from ``GET /v1/ops`` and answer 403 with an error of type ``FeatureDisabled``.

Contract: :func:`load` is cheap after the first call (cached), the returned :class:`Catalog`
and its :class:`Operation` values are immutable; schemas are shared dicts that callers must not
mutate.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

__all__ = [
    "PLUGIN_ROUTE_PREFIX",
    "SCOPES",
    "UNAVAILABLE",
    "Availability",
    "Catalog",
    "Kind",
    "Operation",
    "Scope",
    "load",
]

Kind = Literal["query", "job", "stream"]
Scope = Literal["read", "operate", "admin"]
Reservation = Literal["auto", "controller", "none"]
#: Permission levels, lowest first. Each level includes the ones before it.
SCOPES: tuple[Scope, ...] = ("read", "operate", "admin")
PLUGIN_ROUTE_PREFIX = "/v1/plugins/"

_DATA_PACKAGE = "sparkrun_operator.ops"
_DATA_FILE = "data/daemon-ops.json"


@dataclass(frozen=True)
class Availability:
    """Whether an operation runs here, and if not, why and what to use instead."""

    enabled: bool
    code: Literal["enabled", "not_applicable", "not_implemented"] = "enabled"
    reason: str = ""
    alternative: str = ""

    def describe(self, name: str) -> str:
        """The message of the 403 a disabled operation answers."""
        if self.enabled:
            return f"Operation {name} is enabled"
        return f"Operation {name} is disabled on Kubernetes: {self.reason} {self.alternative}".strip()


ENABLED = Availability(enabled=True)


def _off(code: Literal["not_applicable", "not_implemented"], reason: str, alternative: str) -> Availability:
    return Availability(enabled=False, code=code, reason=reason, alternative=alternative)


_HOST_SETUP = _off(
    "not_applicable",
    "nodes are not prepared over SSH by the daemon.",
    "Join nodes with your node provisioning (kubeadm, a cloud node pool or Cluster API), install drivers "
    "and fabric with the NVIDIA GPU Operator and Network Operator, and group nodes with an "
    "InferenceCluster resource.",
)
_TAILSCALE = _off(
    "not_applicable",
    "hosts do not join a tailnet through the daemon.",
    "Expose Services with an Ingress, the Gateway API or a LoadBalancer; for Tailscale use the Tailscale "
    "Kubernetes operator.",
)
_SYSTEMD = _off(
    "not_applicable",
    "the gateway is not a systemd service.",
    "The gateway runs as a Deployment installed by the Helm chart; inspect it with "
    "`kubectl -n sparkrun-system get deployment,pods -l app.kubernetes.io/component=gateway`.",
)
_GATEWAY_PROCESS = _off(
    "not_applicable",
    "the gateway is always running and discovers endpoints continuously.",
    "The gateway is a Deployment (scale it with `kubectl scale`); it routes to ready InferenceWorkloads "
    "from their status and EndpointSlices, so there is nothing to start, stop, sync or discover by hand.",
)
_MODEL_CACHE = _off(
    "not_implemented",
    "model caches are not exposed through the daemon API yet.",
    "Use ModelCache resources: `kubectl apply -f modelcache.yaml`, `kubectl get modelcaches`.",
)
_BENCHMARKS = _off(
    "not_implemented",
    "benchmarks are not exposed through the daemon API yet.",
    "Use InferenceBenchmark resources: `kubectl apply -f benchmark.yaml`, results in its status.",
)
_REGISTRIES = _off(
    "not_implemented",
    "recipe registries are not supported yet.",
    "Apply Recipe resources with kubectl or sync them from Git with a GitOps tool (Argo CD, Flux).",
)
_BUILDS = _off(
    "not_implemented",
    "images are not built or staged by the operator.",
    "Build runtime images in CI and serve a Recipe with an InferenceWorkload (spec.recipe).",
)

#: This project's policy: operations that do not run on Kubernetes, and why. Keys ending in
#: ``.`` match every operation under that prefix.
UNAVAILABLE: Mapping[str, Availability] = {
    "setup.": _HOST_SETUP,
    "tailscale.": _TAILSCALE,
    "proxy.install_service": _SYSTEMD,
    "proxy.uninstall_service": _SYSTEMD,
    "proxy.service_status": _SYSTEMD,
    "proxy.start": _GATEWAY_PROCESS,
    "proxy.stop": _GATEWAY_PROCESS,
    "proxy.sync": _GATEWAY_PROCESS,
    "proxy.discovery.": _GATEWAY_PROCESS,
    "model_cache.": _MODEL_CACHE,
    "benchmarks.": _BENCHMARKS,
    "catalog.registries": _REGISTRIES,
    "catalog.registries.": _REGISTRIES,
    "catalog.refresh": _REGISTRIES,
    "recipes.build": _BUILDS,
    "recipes.plan_build": _BUILDS,
    "recipes.realize": _BUILDS,
}


def availability_of(name: str) -> Availability:
    """The availability policy for operation ``name`` (exact entries win over prefixes)."""
    if name in UNAVAILABLE:
        return UNAVAILABLE[name]
    best = ""
    for key in UNAVAILABLE:
        if key.endswith(".") and name.startswith(key) and len(key) > len(best):
            best = key
    return UNAVAILABLE[best] if best else ENABLED


@dataclass(frozen=True)
class Operation:
    """One daemon operation declaration (the reference's ``DaemonOp``, plus availability)."""

    name: str
    owner: str
    local_name: str
    version: int
    kind: Kind
    cacheable: bool
    scope: Scope
    description: str
    resources: Reservation
    http_path: str | None
    feature_flag: str | None
    secret: bool
    request_schema: Mapping[str, Any] = field(repr=False)
    result_schema: Mapping[str, Any] = field(repr=False)
    availability: Availability = ENABLED

    @property
    def enabled(self) -> bool:
        return self.availability.enabled

    def discovery(self) -> dict[str, Any]:
        """This operation's ``GET /v1/ops`` entry (the reference's keys, in its order)."""
        return {
            "name": self.name,
            "owner": self.owner,
            "local_name": self.local_name,
            "version": self.version,
            "kind": self.kind,
            "cacheable": self.cacheable,
            "scope": self.scope,
            "description": self.description,
            "resources": self.resources,
            "http_path": self.http_path,
            "request_schema": self.request_schema,
            "result_schema": self.result_schema,
        }


class Catalog:
    """All registered operations, addressable by name and by HTTP alias."""

    def __init__(self, operations: list[Operation], envelopes: Mapping[str, Mapping[str, Any]]) -> None:
        self._by_name = {op.name: op for op in operations}
        if len(self._by_name) != len(operations):
            raise ValueError("duplicate operation names in the catalog")
        self._by_path: dict[str, Operation] = {}
        for op in operations:
            if op.http_path is None:
                continue
            if op.http_path in self._by_path:
                raise ValueError(f"HTTP alias {op.http_path} is claimed twice")
            self._by_path[op.http_path] = op
        self.envelopes = envelopes

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Operation:
        """The operation called ``name``. Raises ``KeyError`` when there is none."""
        return self._by_name[name]

    def find(self, name: str) -> Operation | None:
        """The operation called ``name``, or ``None``."""
        return self._by_name.get(name)

    def by_path(self, path: str) -> Operation | None:
        """The operation whose HTTP alias is exactly ``path``, or ``None``."""
        return self._by_path.get(path)

    @property
    def paths(self) -> Mapping[str, Operation]:
        """Every HTTP alias and its operation."""
        return self._by_path

    def enabled(self) -> list[Operation]:
        """The operations that run on Kubernetes."""
        return [op for op in self if op.enabled]


def _operation(raw: Mapping[str, Any]) -> Operation:
    return Operation(
        name=raw["name"],
        owner=raw["owner"],
        local_name=raw["local_name"],
        version=int(raw["version"]),
        kind=raw["kind"],
        cacheable=bool(raw["cacheable"]),
        scope=raw["scope"],
        description=raw["description"],
        resources=raw["resources"],
        http_path=raw["http_path"],
        feature_flag=raw["feature_flag"],
        secret=bool(raw["secret"]),
        request_schema=raw["request_schema"],
        result_schema=raw["result_schema"],
        availability=availability_of(raw["name"]),
    )


@functools.cache
def load() -> Catalog:
    """The catalog from the package data (parsed once per process)."""
    text = resources.files(_DATA_PACKAGE).joinpath(_DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    return Catalog([_operation(raw) for raw in data["operations"]], data["envelopes"])
