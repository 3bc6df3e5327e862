"""Generate CustomResourceDefinitions from the pydantic types (see docs/decisions/0001).

pydantic emits JSON Schema (draft 2020-12); Kubernetes wants a *structural* OpenAPI v3 schema.
``structural()`` bridges the two: it inlines ``$ref``, collapses ``Optional`` (``anyOf`` with
``null``) into the plain type, turns ``const`` into a one-value ``enum`` and numeric
``exclusiveMinimum`` into the OpenAPI boolean form, drops ``title`` and ``additionalProperties:
false`` (structural schemas prune unknown fields; strict field validation rejects them), keeps
descriptions, defaults, bounds, patterns, formats and every ``x-kubernetes-*`` extension.

Defaults: scalar defaults are written as they are; a nested object built by a default factory
defaults to ``{}`` so the apiserver applies the nested defaults; empty lists and maps get no
default, so objects stay as small as the user wrote them.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sparkrun_operator.api.meta import CATEGORY, DNS_LABEL
from sparkrun_operator.api.resources import KINDS, Kind

_DROP = {"title", "discriminator"}
_KEEP_AT_USE_SITE = {"description", "default", "x-kubernetes-validations"}


class SchemaError(ValueError):
    """The pydantic schema uses something the CRD generator cannot express."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
            ref = all_of[0]["$ref"]
    if ref is None:
        return node
    name = ref.rsplit("/", 1)[-1]
    target: dict[str, Any] = copy.deepcopy(defs[name])
    for key, value in node.items():
        if key in {"$ref", "allOf"}:
            continue
        if key == "x-kubernetes-validations":
            target[key] = [*target.get(key, []), *value]
        else:
            target[key] = value  # use-site description/default win over the type's
    return target


def _collapse_optional(node: dict[str, Any]) -> dict[str, Any]:
    any_of = node.get("anyOf")
    if not isinstance(any_of, list):
        return node
    non_null = [branch for branch in any_of if branch.get("type") != "null"]
    if len(non_null) != 1:
        raise SchemaError(f"unions other than Optional[X] cannot be expressed structurally: {any_of}")
    merged = dict(non_null[0])
    for key, value in node.items():
        if key == "anyOf":
            continue
        if key == "x-kubernetes-validations":
            merged[key] = [*merged.get(key, []), *value]
        else:
            merged[key] = value
    if merged.get("default", "absent") is None:
        del merged["default"]
    return merged


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node (and its children) to structural OpenAPI v3."""
    node = _resolve(node, defs)
    node = _collapse_optional(node)
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: structural(child, defs) for name, child in value.items()}
        elif key == "items":
            out["items"] = (
                structural(value, defs) if value else {"x-kubernetes-preserve-unknown-fields": True}
            )
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = structural(value, defs)
            # False (extra="forbid") and True (dict[str, Any]) have no structural form here.
        elif key in {"exclusiveMinimum", "exclusiveMaximum"} and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        else:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields"):
        # NB: a free-form node keeps items/additionalProperties given as schemas: they bound the
        # nesting (api/bounds.py json_value).
        if out.get("type") != "object":
            out.pop("type", None)
    elif "type" not in out and "enum" not in out and "x-kubernetes-int-or-string" not in out:
        raise SchemaError(f"schema node without a type: {node}")
    if "enum" in out and "type" not in out:
        out["type"] = _enum_type(out["enum"])
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _enum_type(values: list[Any]) -> str:
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return "string"
    if kinds <= {int}:
        return "integer"
    if kinds == {bool}:
        return "boolean"
    raise SchemaError(f"mixed enum {values!r}")


def _factory_defaults(model: type[BaseModel], schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """Add CRD defaults for fields whose pydantic default is a factory (pydantic omits them)."""
    for name, info in model.model_fields.items():
        prop_name = info.serialization_alias or info.alias or name
        prop = schema.get("properties", {}).get(prop_name)
        if prop is None:
            continue
        annotation = _model_type(info)
        if annotation is not None:
            _factory_defaults(annotation, prop, defs)
            if info.default_factory is not None and "default" not in prop:
                # NB: the full default, not {}: the apiserver checks a default against the
                # schema's CEL rules without applying the nested defaults first.
                built = info.default_factory()  # type: ignore[call-arg]
                prop["default"] = _prune_empty(
                    built.model_dump(by_alias=True, exclude_none=True, mode="json")
                )
        item_model = _list_item_model(info)
        if item_model is not None and "items" in prop:
            _factory_defaults(item_model, prop["items"], defs)


def _prune_empty(value: Any) -> Any:
    """``value`` without empty lists and maps below the top (they add nothing as defaults)."""
    if isinstance(value, dict):
        return {k: _prune_empty(v) for k, v in value.items() if v not in ([], {})}
    return value


def _model_type(info: FieldInfo) -> type[BaseModel] | None:
    ann = info.annotation
    is_union = isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union
    candidates = [ann, *(typing.get_args(ann) if is_union else ())]
    for cand in candidates:
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def _list_item_model(info: FieldInfo) -> type[BaseModel] | None:
    ann = info.annotation
    for cand in [ann, *getattr(ann, "__args__", ())]:
        if getattr(cand, "__origin__", None) is list:
            (item,) = cand.__args__
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item
    return None


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of ``model`` with all defaults (including factory ones)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    out = structural(raw, defs)
    _factory_defaults(model, out, defs)
    return out


#: InferenceWorkload names are limited so that every child name stays a DNS-1035 label (63
#: chars). JobSet's webhook validates the longest *pod name* it will generate,
#: ``<jobset>-worker-<jobIdx>-<podIdx>-<random5>``: with JobSet ``<name>-<replica:3>-<rev:5>``
#: and a worker pod index of up to 2 digits (64 nodes) that is ``len(name) + 28``, so 35.
#: ``render/names.py`` derives the same number; a unit test keeps them equal.
WORKLOAD_NAME_MAX = 35
WORKLOAD_NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


def _name_schema(kind: Kind) -> dict[str, Any] | None:
    """The restriction on ``metadata.name`` of a kind that has one (the apiserver allows this and
    nothing else of metadata; CEL on self.metadata.name could only report at the object root)."""
    if kind.kind == "InferenceWorkload":
        return {
            "type": "string",
            "maxLength": WORKLOAD_NAME_MAX,
            "pattern": WORKLOAD_NAME_PATTERN,
            "description": f"At most {WORKLOAD_NAME_MAX} characters, starting with a lowercase "
            "letter: JobSet names its Jobs and pods after it and they must fit in 63.",
        }
    if kind.kind == "RecipeRegistry":
        # NB: its name is the value of the sparkrun.dev/registry label on what it writes
        return {
            "type": "string",
            "maxLength": 63,
            "pattern": DNS_LABEL,
            "description": "A DNS label (at most 63 characters): it labels the objects the registry writes.",
        }
    return None


def crd(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind``."""
    spec_schema = model_schema(kind.spec)
    status_schema = model_schema(kind.status)
    spec_schema.setdefault("description", "Desired state.")
    status_schema["description"] = "Observed state, written by the operator."
    root: dict[str, Any] = {
        "type": "object",
        "description": kind.description,
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object.",
            },
            "kind": {
                "type": "string",
                "description": "Kind is a string value representing the REST resource.",
            },
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    if kind.spec_required:
        root["required"] = ["spec"]
    name = _name_schema(kind)
    if name is not None:
        root["properties"]["metadata"] = {"type": "object", "properties": {"name": name}}
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/part-of": "sparkrun-operator"},
        },
        "spec": {
            "group": kind.group,
            "scope": kind.scope,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": [c.to_crd() for c in kind.columns],
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    """Every CRD, in the order of ``KINDS``."""
    return [crd(k) for k in KINDS]
