#!/usr/bin/env python3
"""Write the chart's values.schema.json from values.yaml and its `# --` comments (one source).

Helm validates every install, upgrade, template and lint against it (JSON Schema draft-07), so a
typo fails with Helm's message naming the key instead of being ignored:

    helm install ... --set operator.replicass=2
    Error: values don't meet the specifications of the schema(s) ...
    - at '/operator': additional properties 'replicass' not allowed

The comments are those of the README's values table (hack/chart-values-table.py, whose parser
this reuses); from them:

- a map whose keys are documented one by one is closed: `type: object`, a property per key and
  `additionalProperties: false` (the top level too);
- a key documented as a whole (a leaf, or a map or list such as `commonLabels`, `nodeSelector`,
  `resources`, `tolerations`) takes the type of its default (`bool` boolean, `int` integer,
  `float` number, `str` string, even empty, `list` array, `dict` an open object), or the
  helm-docs override `# -- (type) text`: `string`, `int`, `bool`, `float`, `list`, `object` or
  `null`, several joined by ` or ` (`# -- (int or string) ...`, e.g. a count or a percentage);
  a `null` default accepts null besides the override's types, and any type without one;
- lines `# @keyword: <YAML value>` in the comment add that JSON Schema keyword to the key's
  schema, for closed sets and bounds: `# @enum: [soft, hard, none]`,
  `# @pattern: '^(sha256:[a-f0-9]{64})?$'` (quote patterns: the value is YAML),
  `# @minimum: 1`, `# @maximum: 65535`, `# @items: {type: string}`, and the other keywords in
  KEYWORDS. They are not part of the README's description.

The schema is checked against draft-07's meta-schema and the defaults against the schema, so an
annotation that contradicts its default fails here, not at install time.

    python hack/chart-values-schema.py [--chart helm/sparkrun-operator]   (run by `make generate`)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema

DRAFT = "http://json-schema.org/draft-07/schema#"
#: The JSON Schema keywords a `# @keyword:` line may set (`type` comes from the default or the
#: `(type)` override; `properties` from the keys below).
KEYWORDS = frozenset(
    {
        "enum",
        "const",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "additionalProperties",
        "propertyNames",
        "maxProperties",
        "examples",
    }
)
_TYPES = {
    "string": "string",
    "int": "integer",
    "bool": "boolean",
    "float": "number",
    "list": "array",
    "object": "object",
    "null": "null",
}


def _table_module() -> ModuleType:
    """hack/chart-values-table.py (its name has dashes: loaded by path)."""
    path = Path(__file__).resolve().with_name("chart-values-table.py")
    spec = importlib.util.spec_from_file_location("chart_values_table", path)
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return module


def _json_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


def _override(path: str, text: str) -> str | list[str]:
    names = [part.strip() for part in text.split(" or ")]
    unknown = [name for name in names if name not in _TYPES]
    if unknown:
        raise SystemExit(f"{path}: unknown type {unknown[0]!r} in `(type)`; known: {', '.join(_TYPES)}")
    types = [_TYPES[name] for name in names]
    return types[0] if len(types) == 1 else types


def _leaf(path: str, value: Any, doc: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = _override(path, doc.type) if doc.type else _json_type(value)
    if value is None and kind is not None and "null" not in kind:
        kind = [kind, "null"] if isinstance(kind, str) else [*kind, "null"]  # a null default
    if kind is not None:
        out["type"] = kind
    out["description"] = doc.description
    bad = sorted(set(doc.schema) - KEYWORDS)
    if bad:
        raise SystemExit(f"{path}: `# @{bad[0]}:` is not one of {', '.join(sorted(KEYWORDS))}")
    out.update(doc.schema)
    return out


def _node(path: list[str], value: Any, docs: dict[str, Any]) -> dict[str, Any]:
    dotted = ".".join(path)
    doc = docs.get(dotted)
    prefix = dotted + "." if path else ""
    closed = isinstance(value, dict) and any(key.startswith(prefix) for key in docs)
    if not closed:
        return _leaf(dotted, value, doc)
    if doc is not None and (doc.type or doc.schema):
        raise SystemExit(f"{dotted}: a map documented key by key takes no `(type)` or `@keyword`")
    out: dict[str, Any] = {"type": "object"}
    if doc is not None:
        out["description"] = doc.description
    out["properties"] = {key: _node([*path, str(key)], item, docs) for key, item in value.items()}
    out["additionalProperties"] = False
    return out


def schema(values_file: Path) -> dict[str, Any]:
    """The draft-07 schema of ``values_file``; fails on an undocumented key or a bad annotation."""
    values, docs = _table_module().parse(values_file)
    out = {
        "$schema": DRAFT,
        "title": "Values of the sparkrun-operator chart",
        "description": "Generated from values.yaml by hack/chart-values-schema.py; do not edit.",
        **_node([], values, docs),
    }
    jsonschema.Draft7Validator.check_schema(out)
    errors = sorted(jsonschema.Draft7Validator(out).iter_errors(values), key=lambda e: list(e.path))
    if errors:
        where = ".".join(str(part) for part in errors[0].path)
        raise SystemExit(f"{values_file}: the default of {where} breaks its schema: {errors[0].message}")
    return out


def dump(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default = Path(__file__).resolve().parents[1] / "helm" / "sparkrun-operator"
    parser.add_argument("--chart", type=Path, default=default)
    args = parser.parse_args(argv)
    target = args.chart / "values.schema.json"
    text = dump(schema(args.chart / "values.yaml"))
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
