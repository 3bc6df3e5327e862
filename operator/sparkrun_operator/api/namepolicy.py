"""Which model names a namespace may claim: the administrator's name policy (issue 26). Pure.

Model names are global (clients send only ``model``), so without a policy any tenant may claim
any name and the oldest claim keeps it (ADR 0019): a tenant could pre-claim another team's name.
A policy maps each namespace to the **prefixes** of the names it may claim::

    {"team-a": ["a-", "shared/"], "team-b": ["b-"], "*": []}

- a name is claimable from namespace ``N`` only if it starts with one of ``N``'s prefixes, or,
  when ``N`` is not listed, one of ``"*"``'s; a namespace that is not listed where there is no
  ``"*"`` may claim no name;
- ``""`` as a prefix allows every name;
- the empty map (the default) allows every name in every namespace: no policy, the behaviour
  before issue 26.

One rule for the three places that apply it: the chart's admission policy (its CEL is checked
against :meth:`NamePolicy.allows` by ``tests/unit/test_name_policy_cel.py``), the operator (the
names index and ``Routable``/``NameNotAllowed``) and the gateway (its routing table). The map is
an administrator's value (``tenancy.names.prefixes`` of the chart, ``--name-prefixes``), still
bounded (:data:`MAX_NAMESPACES`, :data:`MAX_PREFIXES`, :data:`MAX_PREFIX_LENGTH`), so a typo
cannot make every admission expensive; :func:`parse` says what is wrong.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator import safeload
from sparkrun_operator.api import servedname
from sparkrun_operator.api.clip import echo

__all__ = [
    "ANY_NAMESPACE",
    "JSON_BOUNDS",
    "MAX_NAMESPACES",
    "MAX_PREFIXES",
    "MAX_PREFIX_LENGTH",
    "NamePolicy",
    "parse",
    "parse_json",
]

#: The key of the prefixes of every namespace not listed.
ANY_NAMESPACE: Final = "*"
#: Namespaces (keys, ``"*"`` included) of one policy.
MAX_NAMESPACES: Final = 256
#: Prefixes of one namespace.
MAX_PREFIXES: Final = 32
#: Characters of one prefix: a served name's longest (a longer prefix matches nothing).
MAX_PREFIX_LENGTH: Final = servedname.SERVED_NAME_MAX_LENGTH
#: The JSON text of a policy (``--name-prefixes``): 64 KiB (the chart inlines it into the admission
#: policy), 2 levels (an object of lists).
JSON_BOUNDS: Final = safeload.Bounds("name prefixes", 64 * safeload.KIB, 2)
#: A namespace name (RFC 1123 label); no backtracking (one class, anchored, bounded by length).
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAMESPACE_MAX: Final = 63


@dataclass(frozen=True)
class NamePolicy:
    """``namespace -> prefixes`` (see the module docs); the empty map allows everything."""

    prefixes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether any name is refused anywhere (a non-empty map)."""
        return bool(self.prefixes)

    def prefixes_of(self, namespace: str) -> tuple[str, ...] | None:
        """The prefixes of ``namespace`` (``None``: no policy, every name)."""
        if not self.prefixes:
            return None
        found = self.prefixes.get(namespace)
        if found is None:
            found = self.prefixes.get(ANY_NAMESPACE, ())
        return found

    def allows(self, namespace: str, name: str) -> bool:
        """Whether a workload in ``namespace`` may claim the model name ``name``."""
        allowed = self.prefixes_of(namespace)
        return allowed is None or any(name.startswith(p) for p in allowed)

    def refused(self, namespace: str, names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """The names of ``names`` that ``namespace`` may not claim, in order."""
        if not self.prefixes:
            return ()
        return tuple(n for n in names if not self.allows(namespace, n))

    def describe(self, namespace: str) -> str:
        """What ``namespace`` may claim, for a message (prefixes quoted, cut)."""
        allowed = self.prefixes_of(namespace)
        if allowed is None or "" in allowed:
            return "any name"
        if not allowed:
            return "no model name (the administrator allows it no prefix)"
        return "names starting with " + ", ".join(echo(p) for p in allowed)

    def to_wire(self) -> dict[str, list[str]]:
        """The JSON form (``--name-prefixes``, the chart value)."""
        return {ns: list(p) for ns, p in self.prefixes.items()}


def _namespace_key(key: Any) -> str:
    if not isinstance(key, str):
        raise ValueError(f"namespace {echo(key)}: a string")
    if key == ANY_NAMESPACE:
        return key
    if len(key) > _NAMESPACE_MAX or _NAMESPACE.fullmatch(key) is None:
        raise ValueError(f"namespace {echo(key)}: a namespace name (RFC 1123 label) or {ANY_NAMESPACE!r}")
    return key


def _prefixes(key: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise ValueError(f"namespace {echo(key)}: a list of prefixes")
    if len(raw) > MAX_PREFIXES:
        raise ValueError(f"namespace {echo(key)}: {len(raw)} prefixes, at most {MAX_PREFIXES}")
    out: list[str] = []
    for prefix in raw:
        if not isinstance(prefix, str):
            raise ValueError(f"namespace {echo(key)}: prefix {echo(prefix)} is not a string")
        if len(prefix) > MAX_PREFIX_LENGTH:
            raise ValueError(
                f"namespace {echo(key)}: a prefix of {len(prefix)} characters, at most {MAX_PREFIX_LENGTH}"
            )
        # NB: a prefix is the beginning of a name: it may end in a space, not begin with one
        whole = prefix if len(prefix) == MAX_PREFIX_LENGTH else prefix + "x"
        problem = servedname.problem(whole) if prefix else None
        if problem is not None:
            raise ValueError(f"namespace {echo(key)}: prefix {echo(prefix)} {problem}")
        if prefix not in out:
            out.append(prefix)
    return tuple(out)


OPEN = NamePolicy()
"""The empty map: any namespace may claim any name (the default, ADR 0019's rule)."""


def parse(raw: Any) -> NamePolicy:
    """The policy of a decoded JSON value (``{namespace: [prefix, ...]}``); :class:`ValueError`
    says what is wrong (values quoted, cut)."""
    if raw is None:
        return NamePolicy()
    if not isinstance(raw, Mapping):
        raise ValueError('name prefixes: an object such as {"team-a": ["a-"], "*": []}')
    if len(raw) > MAX_NAMESPACES:
        raise ValueError(f"name prefixes: {len(raw)} namespaces, at most {MAX_NAMESPACES}")
    out: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        namespace = _namespace_key(key)
        out[namespace] = _prefixes(namespace, value)
    return NamePolicy(out)


def parse_json(text: str) -> NamePolicy:
    """:func:`parse` of JSON text (``--name-prefixes``) within :data:`JSON_BOUNDS`; empty text
    is the empty map."""
    if not text.strip():
        return NamePolicy()
    try:
        decoded = safeload.load_json(text, JSON_BOUNDS)
    except safeload.DocumentError as error:
        raise ValueError(str(error)) from None
    return parse(decoded)


def flag(text: str) -> NamePolicy:
    """``--name-prefixes`` of the operator, the gateway and the shim: :func:`parse_json`, a usage
    error (``argparse.ArgumentTypeError``, with the rule's own message) when the map is malformed."""
    try:
        return parse_json(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
