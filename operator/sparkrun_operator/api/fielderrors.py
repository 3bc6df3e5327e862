"""Admission errors in the apiserver's words. Pure.

The apiserver answers an invalid object with one *cause* per problem: a field path and a
message that starts with the error's type (``Invalid value``, ``Required value``,
``Unsupported value``, ``Too long``, ``Too many``, ``Forbidden``, ``Duplicate value``) and,
for most types, the offending value as Go prints it (``"Bad_Name"``, ``-1``, ``5``)::

    metadata.name: Invalid value: "Bad_Name": metadata.name in body should match '^[a-z]...$'
    spec.engine.kind: Unsupported value: "zzz": supported values: "vllm"
    spec.model.revision: Too long: may not be more than 128 bytes
    spec.topology.nodes: Invalid value: tensorParallel x pipelineParallel must be a multiple of nodes

This module builds those texts for ``api/admission.py`` (offline admission: ``sparkrun-k8s
validate``, ``upgrade --check``); ``tests/cli/test_validate_parity.py`` holds them against the
testbed's real kube-apiserver. A quoted value is clipped (:data:`VALUE_MAX` characters): a
hostile manifest cannot make one line unbounded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.clip import clip

#: A quoted value in a cause, at most (characters, before quoting).
VALUE_MAX: Final = 1024

# The field.ErrorType reasons (``details.causes[].reason``) and how a cause starts with each.
INVALID: Final = "FieldValueInvalid"
REQUIRED: Final = "FieldValueRequired"
NOT_SUPPORTED: Final = "FieldValueNotSupported"
TOO_LONG: Final = "FieldValueTooLong"
TOO_MANY: Final = "FieldValueTooMany"
TYPE_INVALID: Final = "FieldValueTypeInvalid"
FORBIDDEN: Final = "FieldValueForbidden"
DUPLICATE: Final = "FieldValueDuplicate"
UNKNOWN: Final = "FieldValueUnknown"  # strict decoding: a field the schema does not declare
_TITLES: Final = {
    INVALID: "Invalid value",
    REQUIRED: "Required value",
    NOT_SUPPORTED: "Unsupported value",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    TYPE_INVALID: "Invalid value",
    FORBIDDEN: "Forbidden",
    DUPLICATE: "Duplicate value",
}
#: Errors after which the apiserver skips the CEL rules (apiextensions' ``hasBlockingErr``):
#: the rules would see values of the wrong type or shape.
BLOCKING: Final = frozenset({NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY, TYPE_INVALID})
#: What the apiserver adds (at field ``<nil>``) when it skipped the CEL rules.
UNCHECKED: Final = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


@dataclass(frozen=True)
class FieldError:
    """One rejection: the field path (``spec.topology.gpusPerNode``) and the message (a CEL
    rule's own message, else the apiserver's cause). ``cause`` is the whole text the apiserver
    gives for it (``Invalid value: "x": <rule's message>``); ``reason`` its type."""

    path: str
    message: str
    cause: str = field(default="", compare=False)
    reason: str = field(default=INVALID, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.cause or self.message}"

    @property
    def blocking(self) -> bool:
        """Whether the apiserver skips the CEL rules after this error."""
        return self.reason in BLOCKING


def error(path: str, reason: str, detail: str = "", value: Any = None, *, show: bool = True) -> FieldError:
    """A :class:`FieldError` whose cause reads ``<type>[: <value>][: <detail>]``; the value is
    printed when ``show`` (the apiserver omits it for objects and arrays, and for some types)."""
    parts = [_TITLES.get(reason, "Invalid value")]
    if show:
        parts.append(go_value(value))
    if detail:
        parts.append(detail)
    cause = ": ".join(parts)
    return FieldError(path, cause, cause, reason)


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` prints it (``strconv.Quote``): printable characters as they are,
    the rest escaped (``\\t``, ``\\x1b``, ``\\u200b``)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_number(number: float) -> str:
    """A JSON number as Go's ``%v`` prints a float64 (``5``, ``0.5``, ``1e-05``, ``1e+21``)."""
    if math.isfinite(number) and number == int(number) and abs(number) < 1e21:
        return str(int(number))
    return repr(float(number))


def go_value(value: Any) -> str:
    """A JSON value as the apiserver prints it in a cause (strings quoted and clipped)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_number(value)
    if isinstance(value, str):
        return go_quote(clip(value, VALUE_MAX))
    return json_type(value)


def json_type(value: Any) -> str:
    """The JSON type name of a value (``string``, ``integer``, ``number``, ``object`` ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value == int(value) else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
