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
import functools
import re
from dataclasses import replace
from typing import Any

import celpy
import jsonschema
import re2
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from sparkrun_operator.api import fielderrors as fe
from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.api.crdgen import crd
from sparkrun_operator.api.fielderrors import FieldError
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import KINDS_BY_NAME

__all__ = ["FieldError", "apply_defaults", "schema_for", "validate"]


def crd_for(manifest: dict[str, Any], crds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The CRD document of the manifest's kind (from ``crds`` by kind, else generated)."""
    kind = manifest.get("kind")
    if manifest.get("apiVersion") != API_VERSION or kind not in KINDS_BY_NAME:
        raise ValueError(
            f"not a {API_VERSION} resource: apiVersion={manifest.get('apiVersion')!r} kind={kind!r}"
        )
    return crds[kind] if crds is not None else copy.deepcopy(_generated(kind))


@functools.cache
def _generated(kind: str) -> dict[str, Any]:
    """The CRD generated for ``kind``, once a process (generating it takes ~20 ms, and ``validate``
    checks each object of a file against it; callers get a copy)."""
    return crd(KINDS_BY_NAME[kind])


def schema_for(manifest: dict[str, Any], crds: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The openAPIV3Schema for the manifest's kind (from ``crds`` by kind, else generated)."""
    schema: dict[str, Any] = crd_for(manifest, crds)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
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


def _bound(schema: Any, keyword: str, words: str) -> str:
    """``greater than or equal to 1`` / ``greater than 0`` (an exclusive bound, OpenAPI v3.0)."""
    exclusive = (
        isinstance(schema, dict) and schema.get("exclusive" + keyword[:1].upper() + keyword[1:]) is True
    )
    return f"{words}{'' if exclusive else ' or equal to'} {fe.go_number(schema[keyword])}"


def _listed(values: Any) -> str:
    return ", ".join(map(fe.go_value, values)) if isinstance(values, list) else ""


def schema_errors(err: Any) -> list[FieldError]:
    """One jsonschema error as the apiserver's causes (kube-openapi's words, as apiextensions
    converts them to field errors)."""
    parts = list(err.absolute_path)
    where = _path(parts)
    keyword, bound, value = err.validator, err.validator_value, err.instance
    size = len(value) if isinstance(value, (list, dict)) else 0
    body = f"{where} in body"
    if keyword == "required":
        # The apiserver reports a missing field at the field itself ("Required value").
        parts.append(_REQUIRED.match(err.message).group(1))  # type: ignore[union-attr]
        return [FieldError(_path(parts), "Required value", "Required value", fe.REQUIRED)]
    if keyword == "additionalProperties" and isinstance(value, dict):
        known = set(err.schema.get("properties") or {})
        # NB: reported at the object that holds the key (the apiserver's strict decoding names
        # no field, only the key's path in its message).
        unknown = [f'unknown field "{_path([*parts, key])}"' for key in value if key not in known]
        return [FieldError(where, u, u, fe.UNKNOWN) for u in unknown]
    if keyword == "type":
        if value is None and err.schema.get("nullable") is True:
            return []
        expected = ", ".join(bound) if isinstance(bound, list) else str(bound)
        got = fe.json_type(value)
        detail = f"{body} must be of type {expected}: {fe.go_quote(got)}"
        return [fe.error(where, fe.TYPE_INVALID, detail, got)]
    simple = {
        "enum": (fe.NOT_SUPPORTED, f"supported values: {_listed(bound)}", value),
        "pattern": (fe.INVALID, f"{body} should match '{bound}'", value),
        "maxLength": (fe.TOO_LONG, f"may not be more than {bound} bytes", None),
        "minLength": (fe.INVALID, f"{body} should be at least {bound} chars long", value),
        "maxItems": (fe.TOO_MANY, f"must have at most {bound} items", size),
        "maxProperties": (fe.TOO_MANY, f"must have at most {bound} items", size),
        "minItems": (fe.INVALID, f"{body} should have at least {bound} items", value),
        "minProperties": (fe.INVALID, f"{body} should have at least {bound} properties", value),
        "multipleOf": (fe.INVALID, f"{body} should be a multiple of {bound}", value),
    }
    if keyword in ("minimum", "maximum"):
        words = "greater than" if keyword == "minimum" else "less than"
        return [fe.error(where, fe.INVALID, f"{body} should be {_bound(err.schema, keyword, words)}", value)]
    if keyword in simple:
        reason, detail, shown = simple[keyword]
        return [fe.error(where, reason, detail, shown, show=keyword != "maxLength")]
    return [fe.error(where, fe.INVALID, str(err.message), value)]


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


def _rule_message(entry: dict[str, Any], activation: dict[str, Any]) -> str:
    """The rule's message: its ``messageExpression`` when that gives a non-empty string of one
    line, else ``message``, else ``failed rule: <rule>`` (the apiserver's order)."""
    fallback = str(entry.get("message") or f"failed rule: {entry['rule']}")
    expr = entry.get("messageExpression")
    if not expr:
        return fallback
    try:
        text = _program(expr).evaluate(activation)
    except CELEvalError:
        return fallback
    if not isinstance(text, str) or not text.strip() or "\n" in text or "\r" in text:
        return fallback
    return clip(str(text), MESSAGE_MAX)


def _rule_error(
    entry: dict[str, Any], schema: dict[str, Any], value: Any, where: str, message: str
) -> FieldError:
    reason = str(entry.get("reason") or fe.INVALID)
    if reason == fe.DUPLICATE:
        return fe.error(where, reason, "", value)
    # NB: the apiserver prints the value of a scalar node, never of an object or an array.
    show = reason == fe.INVALID and schema.get("type") not in ("object", "array")
    show = show and not isinstance(value, (dict, list))
    return replace(fe.error(where, reason, message, value, show=show), message=message)


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
            message = f"{entry.get('message') or f'failed rule: {expr}'} (rule error: {exc})"
        else:
            message = "" if bool(ok) else _rule_message(entry, activation)
        if not bool(ok):
            where = (_path(path) if path else "") + entry.get("fieldPath", "")
            where = where.removeprefix(".") or "<root>"
            errors.append(_rule_error(entry, schema, value, where, message))
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


_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS_SUBDOMAIN_MAX = 253
_DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    f"and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    f"validation is '{_DNS_SUBDOMAIN}')"
)


def _object_meta(manifest: dict[str, Any]) -> list[FieldError]:
    """The apiserver's own checks of ``metadata.name`` (before the CRD's schema): a DNS subdomain."""
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name")
    if not name:
        if meta.get("generateName"):
            return []
        return [fe.error("metadata.name", fe.REQUIRED, "name or generateName is required", show=False)]
    if not isinstance(name, str):
        return []  # a schema error (type) reports it
    errors = []
    if len(name) > _DNS_SUBDOMAIN_MAX:
        errors.append(
            fe.error(
                "metadata.name", fe.INVALID, f"must be no more than {_DNS_SUBDOMAIN_MAX} characters", name
            )
        )
    if not _search(f"^(?:{_DNS_SUBDOMAIN})$", name):
        errors.append(fe.error("metadata.name", fe.INVALID, _DNS_SUBDOMAIN_MESSAGE, name))
    return errors


def _scale(doc: dict[str, Any], obj: dict[str, Any]) -> list[FieldError]:
    """The scale subresource's check of ``spec.replicas`` (a path the apiserver writes with a
    leading dot)."""
    versions = doc.get("spec", {}).get("versions") or [{}]
    where = ((versions[0].get("subresources") or {}).get("scale") or {}).get("specReplicasPath")
    if not isinstance(where, str) or not where.startswith("."):
        return []
    node: Any = obj
    for part in where[1:].split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, int) and not isinstance(node, bool) and node < 0:
        return [fe.error(where, fe.INVALID, "should be a non-negative integer", node)]
    return []


def validate(
    manifest: dict[str, Any],
    *,
    old: dict[str, Any] | None = None,
    crds: dict[str, dict[str, Any]] | None = None,
    unchecked: bool = False,
) -> list[FieldError]:
    """Every admission error of ``manifest`` (empty when the apiserver would accept it), in the
    apiserver's words (:class:`FieldError`'s ``cause``): ``metadata.name``'s own checks, every
    schema error (a field the schema does not declare too: the apiserver's strict decoding), the
    scale subresource's, then every CEL rule, unless a schema error blocks them as it blocks
    them in the apiserver (a wrong type, a missing field, an unsupported value, too long, too
    many). With ``unchecked``, such a skip is reported as the apiserver does (field ``<nil>``).

    ``crds`` maps kind -> CRD document (e.g. loaded from ``crds/``); by default the CRD is
    generated from the types. ``old`` enables transition rules (``oldSelf``) as on update.
    """
    try:
        doc = crd_for(manifest, crds)
    except ValueError as exc:
        return [FieldError("apiVersion", str(exc))]
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = apply_defaults(schema, copy.deepcopy(manifest))
    old_obj = apply_defaults(schema, copy.deepcopy(old)) if old is not None else None
    errors = _object_meta(obj)
    validator = _VALIDATOR(_strict(schema))
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        errors += schema_errors(err)
    errors += _scale(doc, obj)
    if any(e.blocking for e in errors):
        if unchecked:
            errors.append(FieldError("<nil>", fe.UNCHECKED, f"Invalid value: null: {fe.UNCHECKED}"))
        return errors
    _cel(schema, obj, old_obj, [], errors)
    return errors
