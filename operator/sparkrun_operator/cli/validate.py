"""``sparkrun-k8s validate FILE...``: offline admission of sparkrun.dev manifests.

Applies the CRD defaults, the OpenAPI schema (unknown fields rejected) and every CEL rule, as
the apiserver would (``api/admission.py``). Exit status 1 when any document is rejected.
Files are read with the project's bounded loader (``safeload.USER_MANIFESTS``: at most 8 MiB
and 64 levels of nesting; YAML anchors and aliases are refused, as in recipes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkrun_operator import safeload
from sparkrun_operator.api.admission import FieldError, validate
from sparkrun_operator.api.meta import API_VERSION


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate", help="check sparkrun.dev manifests offline", description=__doc__
    )
    parser.add_argument("files", nargs="+", help="YAML files ('-' reads standard input)")
    parser.set_defaults(func=run)


def load_documents(path: str) -> list[dict[str, Any]]:
    """Every non-empty YAML document of ``path`` ('-' = stdin), loaded within
    ``safeload.USER_MANIFESTS`` (8 MiB, 64 levels, no anchors or aliases; at most one character
    past the bound is read). Raises ``OSError`` or ``ValueError``."""
    limit = safeload.USER_MANIFESTS.max_bytes + 1
    if path == "-":
        text = sys.stdin.read(limit)
    else:
        with Path(path).open(encoding="utf-8") as stream:
            text = stream.read(limit)
    return [doc for doc in safeload.load_yaml_all(text, safeload.USER_MANIFESTS) if doc]


def check(docs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, list[FieldError] | None]]:
    """(source, kind/name, errors) per document; errors is None for documents of other groups."""
    out: list[tuple[str, str, list[FieldError] | None]] = []
    for source, doc in docs:
        ident = f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"
        if doc.get("apiVersion") != API_VERSION:
            out.append((source, ident, None))
        else:
            out.append((source, ident, validate(doc)))
    return out


def run(args: argparse.Namespace) -> int:
    console = Console()
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in args.files:
        try:
            docs += [(path, d) for d in load_documents(path)]
        except (OSError, ValueError) as exc:
            console.print(f"[red]{path}: {exc}[/red]")
            return 1
    results = check(docs)
    table = Table(title="sparkrun.dev admission (offline)")
    table.add_column("file")
    table.add_column("object")
    table.add_column("result")
    failed = 0
    for source, ident, errors in results:
        if errors is None:
            table.add_row(source, ident, "[dim]skipped: not sparkrun.dev/v1alpha1[/dim]")
        elif errors:
            failed += 1
            table.add_row(source, ident, "[red]" + "\n".join(str(e) for e in errors) + "[/red]")
        else:
            table.add_row(source, ident, "[green]valid[/green]")
    console.print(table)
    return 1 if failed else 0
