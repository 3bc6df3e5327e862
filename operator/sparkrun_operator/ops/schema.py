"""Validation of operation arguments and results against their declared JSON schemas.

Requests are checked in three steps, all raising :class:`~sparkrun_operator.ops.errors.Invalid`
(HTTP 422) with a ``request.<path>: <problem>`` message in the reference daemon's wording:

1. the declared schema, with JSON Schema (Draft 2020-12) semantics except that ``integer``
   means a JSON integer literal (``1.0`` is a number, not an integer) and booleans are never
   numbers, as in the daemon's schema subset;
2. the daemon's implicit request limits, which apply wherever the schema declares no bound of
   its own: strings of at most 65536 characters, arrays of at most 2048 items, numbers within
   ±1e100, finite floats, nesting depth at most 20;
3. no credentials in arguments: a key that names a secret (``password``, ``token``,
   ``api_key``, ``secret``, ``private_key``, ``authorization``, ``passwd`` as a word of the
   key) is refused anywhere in the arguments, except the non-secret ``api_key_env``,
   ``placement_token`` and ``token_duration``.

Results are checked against the declared result schema only (no implicit limits); a violation
raises :class:`~sparkrun_operator.ops.errors.ResultContractError` (``invalid_operation_result``).

:func:`parse_json_object` decodes a request body strictly (UTF-8 JSON, no NaN/Infinity, a JSON
object at the top level) with the project's bounded loader (``safeload.REQUEST_BODY``: at most
1 MiB and 64 levels of nesting, the depth found by a linear scan before ``json`` decodes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from sparkrun_operator import safeload
from sparkrun_operator.ops.errors import Invalid, ResultContractError

__all__ = [
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_NUMBER",
    "MAX_STRING",
    "SchemaValidator",
    "parse_json_object",
    "reject_secrets",
]

MAX_STRING = 65536
MAX_ITEMS = 2048
MAX_NUMBER = 1e100
MAX_DEPTH = 20

_SECRET_KEY = re.compile(r"(^|_)(password|passwd|secret|token|api_key|private_key|authorization)($|_)", re.I)
_NOT_SECRET = frozenset({"api_key_env", "placement_token", "token_duration"})


def _is_integer(_checker: Any, value: Any) -> bool:
    return type(value) is int


def _is_number(_checker: Any, value: Any) -> bool:
    return type(value) in (int, float)


_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
_Validator = jsonschema.validators.extend(Draft202012Validator, type_checker=_TYPES)  # type: ignore[no-untyped-call]

# Which problem the reference reports first at one location: the type, then unknown fields,
# then missing fields, then everything else.
_RANK = {"type": 0, "anyOf": 1, "additionalProperties": 2, "required": 3}


def _path(root: str, parts: Any) -> str:
    out = root
    for part in parts:
        out += "[]" if isinstance(part, int) else f".{part}"
    return out


def _message(root: str, error: ValidationError) -> str:
    where = _path(root, error.absolute_path)
    keyword = error.validator
    instance = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        known = set(schema.get("properties", {}))
        return f"{where}: unknown fields: {', '.join(sorted(set(instance) - known))}"
    if keyword == "required" and isinstance(instance, Mapping):
        missing = [name for name in schema.get("required", ()) if name not in instance]
        return f"{where}: missing fields: {', '.join(sorted(missing))}"
    if keyword == "type":
        kind = schema.get("type")
        return f"{where}: expected one of {kind}" if isinstance(kind, list) else f"{where}: expected {kind}"
    problem = {
        "enum": "unsupported value",
        "const": "unsupported value",
        "minLength": "string too short",
        "maxLength": "string too long",
        "pattern": "invalid format",
        "minimum": "number out of range",
        "maximum": "number out of range",
        "minItems": "too few items",
        "maxItems": "too many items",
        "anyOf": "invalid value",
    }.get(str(keyword), error.message)
    return f"{where}: {problem}"


def _first(errors: list[ValidationError]) -> ValidationError:
    return min(errors, key=lambda e: (len(e.absolute_path), _RANK.get(str(e.validator), 9)))


class SchemaValidator:
    """A compiled validator for one request or result schema."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator = _Validator(schema)

    def check_request(self, arguments: Any) -> None:
        """Validate operation arguments. Raises ``Invalid`` with the first problem."""
        errors = list(self._validator.iter_errors(arguments))
        if errors:
            raise Invalid(_message("request", _first(errors)))
        _implicit_limits(arguments, self.schema, "request", 0)
        reject_secrets(arguments)

    def check_result(self, name: str, result: Any) -> None:
        """Validate an operation result. Raises ``ResultContractError``."""
        if not _finite(result):
            raise ResultContractError(f"Operation {name} violated its result contract")
        errors = list(self._validator.iter_errors(result))
        if errors:
            raise ResultContractError(
                f"Operation {name} violated its result contract ({_message('result', _first(errors))})"
            )

    def errors(self, value: Any) -> list[str]:
        """Every problem of ``value`` as ``request.<path>: <problem>`` lines (for tests and tools)."""
        return [_message("request", e) for e in self._validator.iter_errors(value)]


def _child_schema(schema: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    props = schema.get("properties", {})
    if key in props:
        child: Mapping[str, Any] = props[key]
        return child
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else {}


def _branch(value: Any, schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first ``anyOf`` branch ``value`` satisfies (bounds then come from that branch)."""
    for choice in schema.get("anyOf", ()):
        if _Validator(choice).is_valid(value):
            merged = {k: v for k, v in schema.items() if k != "anyOf"}
            merged.update(choice)
            return merged
    return schema


def _implicit_limits(value: Any, schema: Mapping[str, Any], where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Invalid(f"{where}: maximum nesting depth exceeded")
    if "anyOf" in schema:
        schema = _branch(value, schema)
    if isinstance(value, str):
        if "maxLength" not in schema and len(value) > MAX_STRING:
            raise Invalid(f"{where}: string too long")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise Invalid(f"{where}: number out of range")
        if ("minimum" not in schema and value < -MAX_NUMBER) or (
            "maximum" not in schema and value > MAX_NUMBER
        ):
            raise Invalid(f"{where}: number out of range")
    elif isinstance(value, dict):
        for key, item in value.items():
            _implicit_limits(item, _child_schema(schema, key), f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        if "maxItems" not in schema and len(value) > MAX_ITEMS:
            raise Invalid(f"{where}: too many items")
        items = schema.get("items")
        child = items if isinstance(items, Mapping) else {}
        for item in value:
            _implicit_limits(item, child, f"{where}[]", depth + 1)


def reject_secrets(value: Any) -> None:
    """Refuse credentials anywhere in ``value`` (see the module docstring). Raises ``Invalid``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key not in _NOT_SECRET and _SECRET_KEY.search(key):
                raise Invalid("Secrets must be supplied through a credential prompt, not persisted arguments")
            reject_secrets(item)
    elif isinstance(value, list):
        for item in value:
            reject_secrets(item)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def parse_json_object(body: bytes) -> dict[str, Any]:
    """Decode a request body that must be one JSON object, within ``safeload.REQUEST_BODY``
    (1 MiB, 64 levels, checked before it is decoded). Raises ``Invalid``."""
    try:
        value = safeload.load_json(body, safeload.REQUEST_BODY)
    except safeload.LimitExceeded as error:
        raise Invalid(f"Invalid JSON request: {error}") from None
    except safeload.DocumentError as error:
        raise Invalid("Invalid JSON request") from error
    if not isinstance(value, dict):
        raise Invalid("Request must be a JSON object")
    return value


_COMPILED: dict[tuple[str, int, str], SchemaValidator] = {}


def request_validator(name: str, version: int, schema: Mapping[str, Any]) -> SchemaValidator:
    """The compiled request validator of an operation (compiled once per process)."""
    key = (name, version, "request")
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = SchemaValidator(schema)
    return found


def result_validator(name: str, version: int, schema: Mapping[str, Any]) -> SchemaValidator:
    """The compiled result validator of an operation (compiled once per process)."""
    key = (name, version, "result")
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = SchemaValidator(schema)
    return found
