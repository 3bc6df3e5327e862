"""Redaction of secrets from diagnostic records (``diagnostics.collect``, ADR 0021).

Three rules, applied to every JSON value (dict keys and values, list items, strings):

- **by name**: the value of a dict key that names a secret (``token``, ``apiKey``, ``api_key``,
  ``password``, ``authorization``, ``credentials`` ...), the ``value`` of a ``{"name", "value"}``
  pair (environment variables, headers) whose name does, and, inside strings (log lines,
  tracebacks, event messages), ``NAME=value`` / ``NAME: value`` / ``"NAME": "value"`` with such
  a name;
- **by shape**: bearer/basic credentials after ``Bearer``/``Basic``, JSON Web Tokens and the
  well-known token formats (Hugging Face ``hf_``, OpenAI ``sk-``, GitHub ``ghp_``/``github_pat_``,
  AWS access key ids, Slack ``xox.-``);
- **by value**: any occurrence of a known secret value (the values of the Secrets the workloads
  reference), whatever surrounds it.

Each redacted value becomes ``[redacted]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "Redactor", "secret_name"]

REDACTED = "[redacted]"
#: Smallest known secret value redacted by value (shorter ones would erase ordinary text).
MIN_VALUE = 6

_WORDS = (
    r"pass(?:word|wd|phrase)|secret|token(?!s|iz)|api[-_.]?key|apikey|access[-_.]?key|private[-_.]?key"
    r"|auth(?:orization)?(?!or|en)|credentials?|cookie|session[-_.]?id|bearer|signature"
)
_NAME = re.compile(rf"(?:{_WORDS})", re.I)
_ASSIGNMENT = re.compile(
    rf"""(?P<name>[A-Za-z0-9_.-]*(?:{_WORDS})[A-Za-z0-9_.-]*)(?P<quote>["']?)"""
    r"""(?P<sep>\s*[=:]\s*|\s*["']?\s*:\s*["']?)(?P<open>["']?)(?P<value>[^\s"',;&}\]]+)""",
    re.I,
)
_SHAPES = (
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    re.compile(r"\b(?:hf|ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
)


def secret_name(name: str) -> bool:
    """Whether ``name`` (a key, variable or header name) names a secret."""
    return bool(_NAME.search(name))


class Redactor:
    """Redacts by name, shape and known values (see the module docstring)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: set[str] = set()
        for value in values:
            self.add(value)

    def add(self, value: str) -> None:
        value = value.strip()
        if len(value) >= MIN_VALUE:
            self.values.add(value)
            # Also as it appears inside one log line (multi-line values: each line).
            self.values.update(line.strip() for line in value.splitlines() if len(line.strip()) >= MIN_VALUE)

    def text(self, value: str) -> str:
        for known in sorted(self.values, key=len, reverse=True):
            if known in value:
                value = value.replace(known, REDACTED)
        for shape in _SHAPES:
            value = shape.sub(_keep_scheme, value)
        return _ASSIGNMENT.sub(_assignment, value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            named = value.get("name")
            pair = isinstance(named, str) and secret_name(named)
            out: dict[Any, Any] = {}
            for key, item in value.items():
                scalar = item is not None and not isinstance(item, dict | list | bool)
                if scalar and (secret_name(str(key)) or (pair and key == "value")):
                    out[key] = REDACTED
                else:
                    out[key] = self(item)
            return out
        if isinstance(value, list | tuple):
            return [self(item) for item in value]
        return value


def _keep_scheme(found: re.Match[str]) -> str:
    if found.lastindex and found.lastindex >= 2:  # "Bearer <token>": keep the scheme
        return f"{found.group(1)}{found.group(2)}{REDACTED}"
    return REDACTED


def _assignment(found: re.Match[str]) -> str:
    if found.group("value") == REDACTED or found.group("value").startswith("[redacted"):
        return found.group(0)
    return found.group(0)[: found.start("value") - found.start(0)] + REDACTED
