#!/usr/bin/env python3
"""Write the values table of the chart's README from the `# --` comments of values.yaml.

helm-docs conventions, in a few lines of our own: a comment block starting with `# --` right
above a key documents that key (continuation lines are plain `# ` comments; `# -- (type) text`
overrides the type). The table lists documented keys with their dotted path, type and default
(from the parsed YAML), between the README's `<!-- values-table:start -->` and
`<!-- values-table:end -->` markers. Every key must be documented, itself or through a parent
whose value is a map or list documented as a whole; otherwise this fails.

Lines `# @keyword: <YAML>` inside a `# --` block are JSON Schema keywords for that key (e.g.
`# @enum: ["", none, apiKeys]`, `# @pattern: '^v1\\.[0-9]+$'`, `# @minimum: 1`): they are not part
of the description; hack/chart-values-schema.py (values.schema.json) reads them (see there).

    python hack/chart-values-table.py [--chart helm/sparkrun-operator]   (run by `make generate`)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+|\"[^\"]+\"):(?:\s|$)")
_TYPE = re.compile(r"^\((?P<type>[^)]+)\)\s*")
_ANNOTATION = re.compile(r"^@(?P<keyword>[A-Za-z]+):\s*(?P<value>.*)$")


@dataclass
class Doc:
    """The `# --` comment of one key: the `(type)` override, the text and its `@keyword` lines."""

    type: str | None
    description: str
    schema: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    path: str
    type: str
    default: str
    description: str


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null"


def _annotation(path: str, line: str) -> tuple[str, Any]:
    match = _ANNOTATION.match(line)
    if not match:
        raise SystemExit(f"{path}: an annotation is `# @keyword: <YAML value>`, not {line!r}")
    try:
        return match["keyword"], yaml.safe_load(match["value"])
    except yaml.YAMLError as err:
        raise SystemExit(f"{path}: annotation {line!r} is no YAML value: {err}") from None


def _doc(path: str, lines: list[str]) -> Doc:
    text = [line for line in lines if not line.startswith("@")]
    description = " ".join(part for part in text if part)
    override = _TYPE.match(description)
    if override:
        description = description[override.end() :]
    schema = dict(_annotation(path, line) for line in lines if line.startswith("@"))
    return Doc(override["type"] if override else None, description, schema)


def documented_keys(text: str) -> tuple[dict[str, Doc], list[str]]:
    """``{dotted path: its comment}`` and every key path, in file order."""
    docs: dict[str, Doc] = {}
    every: list[str] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped.removeprefix("# --").strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped.removeprefix("#").strip())
            continue
        match = _KEY.match(line)
        if not match:
            if stripped:
                pending = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"].strip('"')))
        path = ".".join(key for _, key in stack)
        every.append(path)
        if pending is not None:
            docs[path] = _doc(path, pending)
        pending = None
    return docs, every


def lookup(values: Any, path: list[str]) -> Any:
    for part in path:
        values = values[part]
    return values


def parse(values_file: Path) -> tuple[Any, dict[str, Doc]]:
    """The values and the comment of each documented key; fails on an undocumented key (one
    neither documented itself nor under a key documented as a whole, or an undocumented empty map)."""
    text = values_file.read_text()
    values = yaml.safe_load(text) or {}
    docs, every = documented_keys(text)

    def covered(path: str) -> bool:
        if path in docs or any(path.startswith(parent + ".") for parent in docs):
            return True
        value = lookup(values, path.split("."))
        return isinstance(value, dict) and any(key.startswith(path + ".") for key in every)

    undocumented = [path for path in every if not covered(path)]
    if undocumented:
        raise SystemExit(f"{values_file}: keys without a `# --` comment: {', '.join(undocumented)}")
    return values, docs


def rows(values_file: Path) -> list[Row]:
    values, docs = parse(values_file)
    out = []
    for path, doc in docs.items():
        value = lookup(values, path.split("."))
        default = json.dumps(value, separators=(",", ":")) if value not in ("", None) else '""'
        if value is None:
            default = "null"
        out.append(Row(path, doc.type or _type_of(value), default, doc.description))
    return out


def table(items: list[Row]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    lines += [f"| `{r.path}` | {r.type} | `{cell(r.default)}` | {cell(r.description)} |" for r in items]
    return "\n".join(lines)


def render(readme: str, items: list[Row]) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"README lacks the markers {START} ... {END}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(items)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default = Path(__file__).resolve().parents[1] / "helm" / "sparkrun-operator"
    parser.add_argument("--chart", type=Path, default=default)
    args = parser.parse_args(argv)
    readme = args.chart / "README.md"
    text = render(readme.read_text(), rows(args.chart / "values.yaml"))
    if readme.read_text() != text:
        readme.write_text(text)
    print(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
