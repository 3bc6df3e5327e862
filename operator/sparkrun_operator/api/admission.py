"""Offline admission: check a manifest the way the apiserver would, without a cluster.

It applies the CRD's structural defaults, validates against the OpenAPI v3 schema with strict
field validation (unknown fields are errors, as with ``kubectl apply --server-side``), then
evaluates every CEL rule (``x-kubernetes-validations``), transition rules too when the old
object is given. Each finding carries the field path the apiserver would report. Patterns are
matched with RE2, as the apiserver's Go ``regexp`` matches them (and CEL's ``matches``, which
celpy runs on RE2 too): linear in the text, which a stored object's author chose
(``sparkrun-k8s upgrade --check`` runs this over every tenant's objects).

Used by ``sparkrun-k8s validate``, ``make demo`` before the testbed exists, and the tests; the
real apiserver remains the authority (the testbed tests run the same corpus against it).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import celpy
import jsonschema
import re2
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from sparkrun_operator.api.crdgen import crd
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import KINDS_BY_NAME


@dataclass(frozen=True)
class FieldError:
    """One rejection: the field path (``spec.topology.gpusPerNode``) and the message."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def schema_for(manifest: dict[str, Any], crds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The openAPIV3Schema for the manifest's kind (from ``crds`` by kind, else generated)."""
    kind = manifest.get("kind")
    if manifest.get("apiVersion") != API_VERSION or kind not in KINDS_BY_NAME:
        raise ValueError(
            f"not a {API_VERSION} resource: apiVersion={manifest.get('apiVersion')!r} kind={kind!r}"
        )
    doc = crds[kind] if crds is not None else crd(KINDS_BY_NAME[kind])
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting, as the apiserver does it: missing properties get their default."""
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key in value:
            value[key] = apply_defaults(schema["additionalProperties"], value[key])
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _strict(schema: dict[str, Any], *, root: bool = True) -> dict[str, Any]:
    out = dict(schema)
    out.pop("x-kubernetes-validations", None)
    if "properties" in out:
        props = {k: _strict(v, root=False) for k, v in out["properties"].items()}
        if root and "metadata" in props:
            props["metadata"] = {k: v for k, v in props["metadata"].items() if k != "additionalProperties"}
        out["properties"] = props
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"], root=False)
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"], root=False)
    # NB: a free-form node without a type keeps its bounds (maxLength, maxItems, maxProperties
    # apply only to values of their kind, in jsonschema as in the apiserver; api/bounds.py).
    return out


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


_REQUIRED = re.compile(r"^'(.+)' is a required property$")
_PATTERNS: dict[str, Any] = {}


def _search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, with RE2 (a pattern RE2 cannot
    compile, which the apiserver would refuse in a CRD, falls back to Python's ``re``)."""
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        options = re2.Options()
        options.log_errors = False
        try:
            compiled = re2.compile(pattern, options)
        except re2.error:
            compiled = re.compile(pattern)
        _PATTERNS[pattern] = compiled
    return compiled.search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """JSON Schema's ``pattern`` keyword on RE2 (jsonschema's own uses Python's backtracking
    ``re``: quadratic and worse on some patterns)."""
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_VALIDATOR: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator, {"pattern": _pattern}
)
_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(expr: str) -> Any:
    prog = _PROGRAMS.get(expr)
    if prog is None:
        prog = _PROGRAMS[expr] = _ENV.program(_ENV.compile(expr))
    return prog


def _cel(schema: dict[str, Any], value: Any, old: Any, path: list[Any], errors: list[FieldError]) -> None:
    for entry in schema.get("x-kubernetes-validations", []):
        expr = entry["rule"]
        if "oldSelf" in expr and old is None:
            continue  # transition rules run on update only
        activation: dict[str, Any] = {"self": json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = json_to_cel(old)
        try:
            ok = _program(expr).evaluate(activation)
        except CELEvalError as exc:  # e.g. no such key: the apiserver rejects too
            ok = False
            message = f"{entry['message']} (rule error: {exc})"
        else:
            message = entry["message"]
        if not bool(ok):
            where = (_path(path) if path else "") + entry.get("fieldPath", "")
            where = where.removeprefix(".") or "<root>"
            errors.append(FieldError(where, message))
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name in value:
                old_child = old.get(name) if isinstance(old, dict) else None
                _cel(sub, value[name], old_child, [*path, name], errors)
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, child in value.items():
            _cel(schema["additionalProperties"], child, None, [*path, key], errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _cel(schema["items"], item, None, [*path, i], errors)


def validate(
    manifest: dict[str, Any],
    *,
    old: dict[str, Any] | None = None,
    crds: dict[str, dict[str, Any]] | None = None,
) -> list[FieldError]:
    """Every admission error of ``manifest`` (empty when the apiserver would accept it).

    ``crds`` maps kind -> CRD document (e.g. loaded from ``crds/``); by default the CRD is
    generated from the types. ``old`` enables transition rules (``oldSelf``) as on update.
    """
    try:
        schema = schema_for(manifest, crds)
    except ValueError as exc:
        return [FieldError("apiVersion", str(exc))]
    obj = apply_defaults(schema, copy.deepcopy(manifest))
    old_obj = apply_defaults(schema, copy.deepcopy(old)) if old is not None else None
    errors: list[FieldError] = []
    validator = _VALIDATOR(_strict(schema))
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        parts = list(err.absolute_path)
        if err.validator == "required":
            # The apiserver reports a missing field at the field itself ("Required value").
            parts.append(_REQUIRED.match(err.message).group(1))  # type: ignore[union-attr]
            errors.append(FieldError(_path(parts), "Required value"))
        else:
            errors.append(FieldError(_path(parts), err.message))
    if errors:
        return errors  # the apiserver runs CEL only on schema-valid objects
    _cel(schema, obj, old_obj, [], errors)
    return errors
