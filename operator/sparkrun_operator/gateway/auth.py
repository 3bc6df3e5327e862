"""Optional API keys: a key grants a set of models (or all of them).

Keys come from a :class:`KeySource` (a static file here; Kubernetes Secrets in :mod:`.kube`):
the ``keys`` authentication mode. Without a key source the gateway is open (mode ``none``: every
caller is one caller) or takes Kubernetes tokens instead (``kubernetes``, :mod:`.identity`). A
request carries its key as ``Authorization: Bearer K`` (OpenAI, Ollama) or ``x-api-key: K``
(Anthropic). A missing or unknown key is 401; a model the
key does not grant is answered as an absent one is (404 ``No instance found``;
``docs/gateway.md``, "API keys").
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml


@dataclass(frozen=True)
class Grant:
    """What a key may use: ``models is None`` means every model; ``namespace`` (when set)
    limits it to the workloads of that namespace (a key from a tenant's own Secret)."""

    name: str
    models: frozenset[str] | None
    namespace: str | None = None

    def allows(self, model: str, namespace: str) -> bool:
        """Whether the key may use the name ``model`` of a workload in ``namespace``."""
        if self.namespace is not None and namespace != self.namespace:
            return False
        return self.models is None or model in self.models

    @property
    def admin(self) -> bool:
        """Every model of every namespace (may read ``/metrics`` on the serving port)."""
        return self.models is None and self.namespace is None


class KeySource(Protocol):
    def lookup(self, key: str) -> Grant | None:
        """The grant of ``key``, or ``None`` when the key is unknown. Must not block."""
        ...


def digest(key: str) -> bytes:
    """The SHA-256 of a key: what key tables are indexed by (never the key itself)."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class DigestTable:
    """Grants by key digest: O(1) in the number of keys, and the final comparison is
    constant-time (``hmac.compare_digest``), so timing tells nothing about stored keys."""

    def __init__(self, grants: Mapping[str, Grant] | Iterable[tuple[str, Grant]] = ()) -> None:
        items = grants.items() if isinstance(grants, Mapping) else grants
        self._by_digest: dict[bytes, tuple[bytes, Grant]] = {}
        for key, grant in items:
            d = digest(key)
            self._by_digest[d] = (d, grant)

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, key: str) -> Grant | None:
        d = digest(key)
        found = self._by_digest.get(d)
        if found is None or not hmac.compare_digest(found[0], d):
            return None
        return found[1]


class MergedKeySource:
    """Several key sources as one (a static file and Secrets): the first that knows a key wins.
    ``start``/``close`` are passed on to the sources that have them."""

    def __init__(self, *sources: KeySource) -> None:
        self.sources = sources

    def lookup(self, key: str) -> Grant | None:
        for source in self.sources:
            grant = source.lookup(key)
            if grant is not None:
                return grant
        return None

    async def start(self) -> None:
        for source in self.sources:
            start = getattr(source, "start", None)
            if start is not None:
                await start()

    async def close(self) -> None:
        await asyncio.gather(
            *(close() for source in self.sources if (close := getattr(source, "close", None)) is not None)
        )


class StaticKeySource:
    """Keys from a mapping ``{key: [model, ...] | ["*"]}`` or a YAML/JSON file of that shape.

    File form::

        keys:
          - key: sk-team-a
            name: team-a        # optional, shows up in logs
            models: [llama, qwen]
          - key: sk-admin
            models: ["*"]
          - key: sk-ml
            namespace: ml       # optional: only workloads of namespace ml
    """

    def __init__(self, grants: dict[str, Grant]) -> None:
        self._table = DigestTable(grants)

    @classmethod
    def from_mapping(cls, keys: dict[str, list[str]]) -> StaticKeySource:
        return cls({k: _grant(f"key-{i}", v) for i, (k, v) in enumerate(keys.items())})

    @classmethod
    def from_file(cls, path: str | Path) -> StaticKeySource:
        doc = yaml.safe_load(Path(path).read_text()) or {}
        entries = doc.get("keys", []) if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"{path}: expected a mapping with a 'keys' list")
        grants: dict[str, Grant] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("key"), str) or not entry["key"]:
                raise ValueError(f"{path}: keys[{i}] needs a non-empty 'key'")
            models = entry.get("models", ["*"])
            if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
                raise ValueError(f"{path}: keys[{i}].models must be a list of model names")
            namespace = entry.get("namespace")
            if namespace is not None and (not isinstance(namespace, str) or not namespace):
                raise ValueError(f"{path}: keys[{i}].namespace must be a non-empty string")
            grants[entry["key"]] = _grant(str(entry.get("name") or f"key-{i}"), models, namespace)
        return cls(grants)

    def lookup(self, key: str) -> Grant | None:
        return self._table.lookup(key)


def _grant(name: str, models: list[str], namespace: str | None = None) -> Grant:
    return Grant(name, None if "*" in models else frozenset(models), namespace)


def extract_key(headers: dict[bytes, bytes]) -> str | None:
    """The API key of a request (``x-api-key`` first, then a bearer token)."""
    raw = headers.get(b"x-api-key")
    if raw:
        return raw.decode("latin-1").strip()
    auth = headers.get(b"authorization")
    if auth and auth[:7].lower() == b"bearer ":
        return auth[7:].decode("latin-1").strip()
    return None
