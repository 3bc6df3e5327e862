"""Check sparkrun.dev manifests offline, as the apiserver would admit them.

Each document of each FILE is defaulted, checked against its CRD's OpenAPI schema and every
CEL rule (``x-kubernetes-validations``) without a cluster (``api/admission.py``), and every
error of an object is reported at once, in the apiserver's words (what ``kubectl apply
--dry-run=server`` prints as the causes of a 422):

  metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of ...
  spec.engine.kind: Unsupported value: "zzz": supported values: "vllm"
  spec.model.name: Required value
  spec.topology.nodes: Invalid value: tensorParallel x pipelineParallel must be a multiple of nodes

As in the apiserver, the CEL rules run even when the schema refused a value (a pattern, a
bound), but not after a wrong type, a missing field, an unsupported value, too long or too many
(then a last line says some rules were not checked). A field the schema does not declare (the
apiserver's strict field validation: ``unknown field "spec.x"``) is reported at the object that
holds it, and the rest of the object is still checked. Documents of other API groups are
skipped. Files are read with the project's bounded loader (at most 8 MiB and 64 levels of
nesting; YAML anchors and aliases are refused, as in recipes).

examples:
  sparkrun-k8s validate examples/*.yaml
  kustomize build overlays/prod | sparkrun-k8s validate -
  sparkrun-k8s validate -o json workload.yaml | jq '.[].errors[].message'

exit codes:
  0  every sparkrun.dev document is valid (others skipped)
  1  a document is rejected, or a file cannot be read or parsed
  2  usage (bad arguments)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from sparkrun_operator import safeload
from sparkrun_operator.api.admission import FieldError, validate
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.cli.common import add_output_option, emit, printable


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check sparkrun.dev manifests offline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files ('-' reads standard input)")
    add_output_option(parser)
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
        meta = doc.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        ident = f"{doc.get('kind', '?')}/{name}"
        if doc.get("apiVersion") != API_VERSION:
            out.append((source, ident, None))
        else:
            out.append((source, ident, validate(doc, unchecked=True)))
    return out


def report(results: list[tuple[str, str, list[FieldError] | None]]) -> list[dict[str, Any]]:
    """The results as data (``-o json|yaml``): each error as the apiserver's cause (field,
    reason, message)."""
    out: list[dict[str, Any]] = []
    for source, ident, errors in results:
        result = "skipped" if errors is None else ("rejected" if errors else "valid")
        causes = [
            {"field": e.path, "reason": e.reason, "message": e.cause or e.message} for e in errors or []
        ]
        out.append({"file": source, "object": ident, "result": result, "errors": causes})
    return out


def _lines(data: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(style, line): one line per object, then one indented line per error (``field: cause``)."""
    lines: list[tuple[str, str]] = []
    for item in printable(data):
        where = f"{item['file']}: {item['object']}"
        if item["result"] == "skipped":
            lines.append(("dim", f"{where}: skipped (not {API_VERSION})"))
        elif item["result"] == "valid":
            lines.append(("green", f"{where}: valid"))
        else:
            count = len(item["errors"])
            lines.append(("red bold", f"{where}: rejected ({count} error{'' if count == 1 else 's'})"))
            lines += [("red", f"  {e['field']}: {e['message']}") for e in item["errors"]]
    return lines


def text(data: list[dict[str, Any]]) -> str:
    """The text report, without colours."""
    return "".join(line + "\n" for _style, line in _lines(data))


def run(args: argparse.Namespace) -> int:
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in args.files:
        try:
            docs += [(path, d) for d in load_documents(path)]
        except (OSError, ValueError) as exc:
            Console(soft_wrap=True, highlight=False).print(escape(printable(f"{path}: {exc}")), style="red")
            return 1
    data = report(check(docs))
    if args.output == "text":
        console = Console(soft_wrap=True, highlight=False)
        for style, line in _lines(data):
            console.print(escape(line), style=style)
    else:
        emit(data, args.output, text)
    return 1 if any(item["result"] == "rejected" for item in data) else 0
