#!/usr/bin/env python3
"""Write the RBAC table of docs/security.md from docs/security-rbac.yaml.

docs/security-rbac.yaml lists every rule the chart grants (component, scope, API groups,
resources, verbs, resource names, the values it depends on, why, and for cluster-scoped rows that
hold with watchNamespaces set, why they are unavoidable); tests/tenancy/test_rbac_table.py
compares it with the rendered chart. This writes it as a Markdown table between the
`<!-- rbac-table:start -->` and `<!-- rbac-table:end -->` markers of docs/security.md, one row
per table row, in the file's order. `make verify` fails when the page differs from the file.

    python hack/rbac-table.py [--table docs/security-rbac.yaml] [--page docs/security.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

START = "<!-- rbac-table:start -->"
END = "<!-- rbac-table:end -->"
ROOT = Path(__file__).resolve().parents[1]
HEADER = (
    "| Component | Scope | When | API group | Resources | Verbs | Names | Why |",
    "|---|---|---|---|---|---|---|---|",
)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _codes(items: list[Any]) -> str:
    return ", ".join(f"`{_cell(i) or 'core'}`" for i in items)


def _when(row: dict[str, Any]) -> str:
    when = row.get("when") or {}
    parts = [
        f"`{key}`: {str(value).lower() if isinstance(value, bool) else value}" for key, value in when.items()
    ]
    return "; ".join(parts) or "always"


def _why(row: dict[str, Any]) -> str:
    parts = [_cell(row["why"])]
    if row.get("via"):
        parts.append(f"(built-in `{_cell(row['via'])}`)")
    if row.get("unavoidable"):
        parts.append(f"**Cluster-scoped, unavoidable:** {_cell(row['unavoidable'])}.")
    if row.get("wildcard"):
        parts.append(f"**`*`:** {_cell(row['wildcard'])}.")
    return " ".join(parts)


def table(rows: list[dict[str, Any]]) -> str:
    lines = list(HEADER)
    for row in rows:
        cells = [
            f"`{_cell(row['component'])}`",
            ", ".join(_cell(s) for s in row["scope"]),
            _when(row),
            _codes(row["apiGroups"]),
            _codes(row["resources"]),
            ", ".join(_cell(v) for v in row["verbs"]),
            _codes(row.get("resourceNames") or []) or "all",
            _why(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(page: str, rows: list[dict[str, Any]]) -> str:
    if START not in page or END not in page:
        raise SystemExit(f"the page lacks the markers {START} ... {END}")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(rows)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--table", type=Path, default=ROOT / "docs" / "security-rbac.yaml")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "security.md")
    args = parser.parse_args(argv)
    rows = yaml.safe_load(args.table.read_text())["rows"]
    before = args.page.read_text()
    text = render(before, rows)
    if before != text:
        args.page.write_text(text)
    print(args.page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
