"""Optional API keys: a key grants a set of models (or all of them).

Keys come from a :class:`KeySource` (a static file here; a Kubernetes Secret later). With no key
source configured the gateway is open. A request carries its key as ``Authorization: Bearer K``
(OpenAI, Ollama) or ``x-api-key: K`` (Anthropic). A missing or unknown key is 401; a model the
key does not grant is treated as absent (404 ``No instance found``), as seed 004 treats "an alias
absent from the authorized model catalog".
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml


@dataclass(frozen=True)
class Grant:
    """What a key may use: ``models is None`` means every model."""

    name: str
    models: frozenset[str] | None

    def allows(self, model: str) -> bool:
        return self.models is None or model in self.models


class KeySource(Protocol):
    def lookup(self, key: str) -> Grant | None:
        """The grant of ``key``, or ``None`` when the key is unknown. Must not block."""
        ...


class StaticKeySource:
    """Keys from a mapping ``{key: [model, ...] | ["*"]}`` or a YAML/JSON file of that shape.

    File form::

        keys:
          - key: sk-team-a
            name: team-a        # optional, shows up in logs
            models: [llama, qwen]
          - key: sk-admin
            models: ["*"]
    """

    def __init__(self, grants: dict[str, Grant]) -> None:
        self._grants = dict(grants)

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
            grants[entry["key"]] = _grant(str(entry.get("name") or f"key-{i}"), models)
        return cls(grants)

    def lookup(self, key: str) -> Grant | None:
        # Constant-time comparison per candidate, so response timing does not leak key prefixes.
        found = None
        for candidate, grant in self._grants.items():
            if hmac.compare_digest(candidate.encode(), key.encode()):
                found = grant
        return found


def _grant(name: str, models: list[str]) -> Grant:
    return Grant(name, None if "*" in models else frozenset(models))


def extract_key(headers: dict[bytes, bytes]) -> str | None:
    """The API key of a request (``x-api-key`` first, then a bearer token)."""
    raw = headers.get(b"x-api-key")
    if raw:
        return raw.decode("latin-1").strip()
    auth = headers.get(b"authorization")
    if auth and auth[:7].lower() == b"bearer ":
        return auth[7:].decode("latin-1").strip()
    return None
