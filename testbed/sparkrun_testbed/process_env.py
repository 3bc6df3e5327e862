"""A container's environment and command line, computed as a kubelet does.

- ``envFrom`` (ConfigMaps, Secrets; optional ``prefix``), then ``env`` in order; a later entry
  overrides an earlier one of the same name.
- ``value`` strings expand ``$(NAME)`` references to variables defined before them;
  ``$$`` is a literal ``$``; a reference to an undefined name is left as written (so shell
  arithmetic such as ``$((JOB_COMPLETION_INDEX+1))`` passes through untouched).
- ``valueFrom``: ``fieldRef`` (``metadata.name|namespace|uid``, ``metadata.labels['k']``,
  ``metadata.annotations['k']`` (which carries ``JOB_COMPLETION_INDEX`` for indexed Jobs),
  ``spec.nodeName``, ``spec.serviceAccountName``, ``status.hostIP(s)``, ``status.podIP(s)``),
  ``resourceFieldRef`` (requests/limits of cpu, memory, ephemeral-storage, with ``divisor``;
  an unset limit is the node's allocatable), ``configMapKeyRef``, ``secretKeyRef``.
- ``command`` and ``args`` expand ``$(NAME)`` against the final environment.

The functions are pure; ConfigMaps and Secrets come in through a :class:`Lookup`. A missing
object or key that is not ``optional`` raises :class:`ConfigError`, which the runtime reports
as ``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import decimal
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

Lookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
"""``lookup(kind, name)`` -> the ConfigMap or Secret (``kind`` ``"ConfigMap"``/``"Secret"``) in
the pod's namespace, or None if it does not exist."""

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_KEYED_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ConfigError(Exception):
    """An env source is missing; the message is what a kubelet would report."""


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (see module docs)."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        ch = value[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = value.find(")", i + 2)
            if end < 0:
                out.append(value[i:])
                break
            name = value[i + 2 : end]
            out.append(env[name] if name in env else value[i : end + 1])
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """The value of a downward-API ``fieldRef.fieldPath`` (raises ``ValueError`` if unsupported)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or ()),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or ()),
    }
    if path in simple:
        return str(simple[path] or "")
    keyed = _KEYED_FIELD.match(path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = (meta.get(path.split(".")[1]) or {}).items()
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items))
    raise ValueError(f"unsupported fieldRef.fieldPath {path!r}")


def parse_quantity(raw: str | int | float) -> decimal.Decimal:
    """A Kubernetes resource quantity (``500m``, ``2Gi``, ``1e3``) as a number."""
    text = str(raw).strip()
    suffixes: dict[str, int | decimal.Decimal] = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
        "n": decimal.Decimal("1e-9"),
        "u": decimal.Decimal("1e-6"),
        "m": decimal.Decimal("1e-3"),
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "P": 10**15,
        "E": 10**18,
    }
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return decimal.Decimal(text[: -len(suffix)]) * suffixes[suffix]
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise ValueError(f"invalid quantity {raw!r}") from None


def resource_value(
    container: Mapping[str, Any],
    resource: str,
    divisor: str | None,
    allocatable: Mapping[str, str],
) -> str:
    """``resourceFieldRef``: ``limits.cpu`` etc. divided by ``divisor``, rounded up."""
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise ValueError(f"unsupported resourceFieldRef.resource {resource!r}")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)
    if raw is None:
        raw = allocatable.get(name, "0")
    value = parse_quantity(raw) / parse_quantity(divisor or "1")
    return str(math.ceil(value))


async def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    lookup: Lookup,
    allocatable: Mapping[str, str],
) -> dict[str, str]:
    """The container's variables from ``envFrom`` and ``env`` (see module docs).

    ``pod`` must already carry ``status.podIP``/``hostIP`` for those fieldRefs to resolve.
    Raises :class:`ConfigError` for a missing non-optional source.
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = str(source.get("prefix") or "")
        for kind, ref_key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(ref_key)
            if ref is None:
                continue
            data = await _data(lookup, kind, ref["name"], optional=bool(ref.get("optional")))
            for key, value in data.items():
                if _ENV_NAME.match(prefix + key):
                    env[prefix + key] = value
    for var in container.get("env") or ():
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                target = next(
                    (c for c in _all_containers(pod) if c.get("name") == ref["containerName"]),
                    container,
                )
            env[name] = resource_value(target, ref["resource"], ref.get("divisor"), allocatable)
        else:
            for kind, ref_key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                ref = source.get(ref_key)
                if ref is None:
                    continue
                optional = bool(ref.get("optional"))
                data = await _data(lookup, kind, ref["name"], optional=optional)
                if ref["key"] in data:
                    env[name] = data[ref["key"]]
                elif not optional:
                    raise ConfigError(f"couldn't find key {ref['key']} in {kind} {_ns(pod)}/{ref['name']}")
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """``container`` with ``command`` and ``args`` expanded against ``env``."""
    result = dict(container)
    for key in ("command", "args"):
        if container.get(key):
            result[key] = [expand(str(a), env) for a in container[key]]
    return result


def _all_containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def _ns(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace", ""))


async def _data(lookup: Lookup, kind: str, name: str, *, optional: bool) -> dict[str, str]:
    obj = await lookup(kind, name)
    if obj is None:
        if optional:
            return {}
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    data = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
    if kind == "Secret":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
    binary = obj.get("binaryData") or {}
    data.update({str(k): base64.b64decode(v).decode(errors="replace") for k, v in binary.items()})
    return data
