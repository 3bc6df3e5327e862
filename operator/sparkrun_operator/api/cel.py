"""Helpers to attach CEL validation rules (``x-kubernetes-validations``) to pydantic types."""

from __future__ import annotations

from typing import Any, Literal

CelReason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]


def rule(
    expr: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: CelReason | None = None,
) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry.

    ``field_path`` (relative to the schema the rule sits on, e.g. ``.gpusPerNode``) makes the
    apiserver report the error at that field instead of at the object holding the rule.
    """
    out: dict[str, Any] = {"rule": expr, "message": message}
    if field_path is not None:
        out["fieldPath"] = field_path
    if reason is not None:
        out["reason"] = reason
    return out


def rules(*entries: dict[str, Any]) -> dict[str, Any]:
    """``json_schema_extra`` carrying the given rules."""
    return {"x-kubernetes-validations": list(entries)}


def immutable(what: str) -> dict[str, Any]:
    """A transition rule that refuses any change once the field is set."""
    return rule("self == oldSelf", f"{what} is immutable; create a new object instead")


#: ``json_schema_extra`` marking a free-form object whose contents the schema does not describe.
FREE_FORM: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
