"""Where a ``model_cache.*`` operation acts: ``cache_dir`` as a claim and a directory in it.

On Kubernetes the HF home lives on a PersistentVolumeClaim of the API namespace, so ``cache_dir``
is ``<claim>`` or ``<claim>:/dir`` (the directory inside the volume, ``storage.path`` of a
ModelCache; default ``/``). A host path (``/models/hf``) is refused with that explanation. The
ModelCaches whose storage is that claim and directory are the location's tracking records
(pins in ``spec.pinned``, workload claims and last use in ``status``); see ADR 0023.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.api.modelcache import ModelCacheSpec
from sparkrun_operator.api.resources import MODEL_CACHE
from sparkrun_operator.k8s.resources import CLAIMS, resource_of
from sparkrun_operator.ops.errors import Invalid, NotFound
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.render.modelcache import claim_name

CACHES = resource_of(MODEL_CACHE)
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _norm(path: str) -> str:
    return "/" + posixpath.normpath("/" + path.strip()).strip("/") if path.strip("/") else "/"


def parse_cache_dir(raw: str) -> tuple[str, str]:
    """``(claim, path)`` of ``cache_dir``; ``Invalid`` naming the accepted forms otherwise."""
    text = raw.strip()
    claim, sep, path = text.partition(":")
    if text.startswith("/") or not _DNS.match(claim) or (sep and not path.startswith("/")):
        raise Invalid(
            f"cache_dir {raw!r}: on Kubernetes cache_dir names a PersistentVolumeClaim of the API "
            "namespace and a directory in it: '<claim>' or '<claim>:/dir' (host paths do not exist here)"
        )
    if ".." in path.split("/"):
        raise Invalid(f"cache_dir {raw!r}: the directory may not contain '..'")
    return claim, _norm(path or "/")


@dataclass(frozen=True)
class Location:
    """One cache location and what tracks it."""

    namespace: str
    claim: str
    path: str
    access_modes: tuple[str, ...]
    hosts: tuple[str, ...]
    #: ModelCaches stored at this claim and directory (raw objects), by name.
    caches: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    node: str | None = None

    @property
    def key(self) -> str:
        return f"pvc/{self.namespace}/{self.claim}{'' if self.path == '/' else self.path}"

    @property
    def cache_dir(self) -> str:
        return self.claim if self.path == "/" else f"{self.claim}:{self.path}"

    @property
    def shared(self) -> bool:
        return bool({"ReadWriteMany", "ReadOnlyMany"} & set(self.access_modes))

    def scheduling(self) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """``(nodeSelector, tolerations)`` of a tool pod: the first tracking ModelCache's download
        placement, pinned to the requested host or to the node of a node-local volume."""
        selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for cache in self.caches:
            download = (cache.get("spec") or {}).get("download") or {}
            selector = dict(download.get("nodeSelector") or {})
            tolerations = list(download.get("tolerations") or [])
            break
        node = self.hosts[0] if self.hosts else self.node
        if node:
            selector[HOSTNAME_LABEL] = node
        return selector, tolerations

    def describe(self, host: str) -> dict[str, Any]:
        """The report's ``location``: counted once however many hosts share it."""
        hosts = list(self.hosts) or [host]
        return {
            "key": self.key,
            "kind": "network" if self.shared else "local",
            "source": f"PersistentVolumeClaim {self.namespace}/{self.claim}",
            "hosts": hosts,
            "paths": dict.fromkeys(hosts, self.path),
            "verified": True,
        }


def stored_at(cache: Mapping[str, Any], claim: str, path: str) -> bool:
    try:
        spec = ModelCacheSpec.model_validate(cache.get("spec") or {})
    except ValueError:
        return False
    name = str((cache.get("metadata") or {}).get("name") or "")
    return claim_name(name, spec) == claim and _norm(spec.storage.path) == path


async def locate(ctx: OperationContext, arguments: Mapping[str, Any]) -> Location:
    """The location ``cache_dir`` names; ``NotFound`` when its claim does not exist."""
    claim, path = parse_cache_dir(str(arguments["cache_dir"]))
    raw = await ctx.rest.get(CLAIMS, claim, ctx.namespace)
    if raw is None:
        raise NotFound(
            f"PersistentVolumeClaim {claim} not found in namespace {ctx.namespace} (cache_dir "
            f"{arguments['cache_dir']!r})"
        )
    status = raw.get("status") or {}
    modes = tuple(status.get("accessModes") or (raw.get("spec") or {}).get("accessModes") or ())
    caches = sorted(
        (c for c in await ctx.rest.list(CACHES, ctx.namespace) if stored_at(c, claim, path)),
        key=lambda c: str(c["metadata"]["name"]),
    )
    node = next(
        ((c.get("status") or {}).get("nodeName") for c in caches if (c.get("status") or {}).get("nodeName")),
        None,
    )
    hosts = tuple(dict.fromkeys(str(h) for h in arguments.get("hosts") or ()))
    return Location(ctx.namespace, claim, path, modes, hosts, tuple(caches), node)
