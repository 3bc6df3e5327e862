"""Known secret values: the Secrets that objects reference, read once, for redaction.

``diagnostics.collect`` and the shim's log and monitor streams redact every occurrence of the
value of a Secret that the namespace's workloads or their pods reference, besides the name and
shape patterns of :mod:`sparkrun_operator.ops.redact`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import SECRETS
from sparkrun_operator.ops.redact import Redactor

__all__ = ["known_secrets", "secret_refs"]


def secret_refs(value: Any) -> Iterator[tuple[str, str | None]]:
    """``(name, key)`` of every Secret reference in a spec (``key`` ``None``: all keys):
    ``secretKeyRef``, ``secretRef`` (envFrom), ``*SecretRef`` fields, ``secret.secretName``."""
    if isinstance(value, dict):
        for field, item in value.items():
            is_ref = isinstance(item, dict) and str(field).lower().endswith(("secretkeyref", "secretref"))
            if is_ref and isinstance(item.get("name"), str):
                key = item.get("key")
                yield item["name"], key if isinstance(key, str) else None
            if field == "secret" and isinstance(item, dict) and isinstance(item.get("secretName"), str):
                yield item["secretName"], None
            yield from secret_refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from secret_refs(item)


async def known_secrets(rest: Kube, namespace: str, specs: list[Any]) -> Redactor:
    """A redactor knowing the values of the Secrets that ``specs`` reference (in ``namespace``)."""
    redactor = Redactor()
    wanted: dict[str, set[str] | None] = {}
    for name, key in secret_refs(specs):
        keys_ = wanted.setdefault(name, set())
        if key is None or keys_ is None:
            wanted[name] = None
        else:
            keys_.add(key)
    for name, selected in sorted(wanted.items(), key=lambda item: item[0]):
        try:
            found = await rest.get(SECRETS, name, namespace)
        except k8s_errors.KubeError:
            continue  # not readable: the value cannot be in what we may read either
        for key, raw in ((found or {}).get("data") or {}).items():
            if selected is None or key in selected:
                try:
                    redactor.add(base64.b64decode(raw).decode("utf-8", "replace"))
                except ValueError:
                    continue
    return redactor
