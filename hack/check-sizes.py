#!/usr/bin/env python3
"""Fail when a product module or function outgrows its budget without a written reason.

Budgets: a module of ``operator/sparkrun_operator`` at most :data:`MODULE_LINES` lines, a
function (or method) at most :data:`FUNCTION_LINES` lines. Exceptions are listed, each with its
reason, in ``hack/size-exceptions.txt`` (``path[:function]  reason``); an exception that no
longer applies is reported too, so the list never rots. Run by ``make verify``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "operator" / "sparkrun_operator"
EXCEPTIONS = REPO / "hack" / "size-exceptions.txt"
MODULE_LINES = 600
FUNCTION_LINES = 80


def measure(root: Path = PACKAGE) -> dict[str, int]:
    """``{"path": lines, "path:function": lines}`` for everything over budget."""
    over: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        text = path.read_text()
        lines = text.count("\n")
        if lines > MODULE_LINES:
            over[rel] = lines
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    over[f"{rel}:{node.name}"] = length
    return over


def exceptions(path: Path = EXCEPTIONS) -> dict[str, str]:
    found: dict[str, str] = {}
    for raw in path.read_text().splitlines() if path.exists() else []:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"{path.name}: {key} has no reason")
        found[key] = reason.strip()
    return found


def main() -> int:
    over = measure()
    allowed = exceptions()
    problems = [
        f"{key}: {lines} lines (budget {MODULE_LINES if ':' not in key else FUNCTION_LINES})"
        for key, lines in over.items()
        if key not in allowed
    ]
    stale = [key for key in allowed if key not in over]
    problems += [f"{key}: listed in {EXCEPTIONS.name} but within budget now" for key in stale]
    for problem in problems:
        print(f"sizes: {problem}", file=sys.stderr)
    if problems:
        print(f"sizes: split it, or add 'key  reason' to hack/{EXCEPTIONS.name}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
