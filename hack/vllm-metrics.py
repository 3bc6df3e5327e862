#!/usr/bin/env python3
"""Write helm/sparkrun-operator/dashboards/vllm-metrics.yaml from a vLLM wheel's source.

The engine dashboard, its tests and the alerts name only metrics of this file; it is read from the
pinned release itself, never from memory. Python's ``ast`` reads (nothing of vLLM is imported or
run) the engine's Prometheus stat logger, ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``:
every metric the engine core exports), and the histogram bucket defaults of
``vllm/v1/metrics/buckets.py``. Each ``Gauge``/``Counter``/``Histogram`` made there with a
``vllm:`` name gives one entry: name, type, label names, help text, the series Prometheus stores
(``prometheus_client`` adds ``_total`` to a counter, ``_bucket``/``_sum``/``_count`` to a
histogram), a histogram's default buckets, and the condition (an enclosing ``if``) under which
vLLM creates it. A call the reader cannot resolve fails the run, naming the line.

When the engine pin moves (``DEFAULT_ENGINE_IMAGE`` in api/workload.py; a unit test compares the
two versions), refresh it with the new version's wheel (no GPU, no install; about 350 MB):

    pip download vllm==X.Y.Z --no-deps -d /tmp/vllm-wheel
    python hack/vllm-metrics.py --wheel /tmp/vllm-wheel/vllm-X.Y.Z-*.whl

then run tests/metrics/ (a metric the dashboard uses that is gone fails there). `make` never runs
this (no wheel download in CI); the file is committed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "helm" / "sparkrun-operator" / "dashboards" / "vllm-metrics.yaml"
LOGGERS = "vllm/v1/metrics/loggers.py"
BUCKETS = "vllm/v1/metrics/buckets.py"
TYPES = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}
TYPES |= {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram"}
WHEEL_NAME = re.compile(r"vllm-([0-9][0-9A-Za-z.+!]*)-")


class Unresolved(Exception):
    """A metric definition this reader cannot follow (vLLM changed its style: extend the reader)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tuple_of_numbers(node: ast.expr) -> list[float]:
    value = ast.literal_eval(node)
    if not isinstance(value, tuple | list) or not all(isinstance(v, int | float) for v in value):
        raise Unresolved(f"buckets.py line {node.lineno}: not a tuple of numbers")
    return [float(v) for v in value]


def bucket_families(source: str) -> dict[str, list[float]]:
    """The static bucket families of buckets.py (``_STATIC_FAMILY_DEFAULTS``), by family key."""
    tree = ast.parse(source)
    constants: dict[str, list[float]] = {}
    families: dict[str, str] = {}
    for node in tree.body:
        target, value = _assignment(node)
        if target is None or value is None:
            continue
        if target.endswith("_BUCKETS"):
            constants[target] = _tuple_of_numbers(value)
        elif target == "_STATIC_FAMILY_DEFAULTS" and isinstance(value, ast.Dict):
            for key, ref in zip(value.keys, value.values, strict=True):
                if not isinstance(key, ast.Constant) or not isinstance(ref, ast.Name):
                    raise Unresolved(f"buckets.py line {value.lineno}: _STATIC_FAMILY_DEFAULTS entry")
                families[str(key.value)] = ref.id
    if not families:
        raise Unresolved("buckets.py: no _STATIC_FAMILY_DEFAULTS")
    return {family: constants[name] for family, name in families.items()}


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
        return ast.unparse(node.targets[0]), node.value  # self.labelname_x = "x"
    return None, None


class _Reader(ast.NodeVisitor):
    """Collects the ``vllm:`` metrics of one module, resolving names assigned in the function."""

    def __init__(self, families: dict[str, list[float]]) -> None:
        self.families = families
        self.names: dict[str, ast.expr] = {}
        self.conditions: list[str] = []
        self.found: list[dict[str, Any]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.names = self.names, {}
        self.generic_visit(node)
        self.names = outer

    def visit_Assign(self, node: ast.Assign) -> None:
        target, value = _assignment(node)
        if target is not None and value is not None:
            self.names[target] = value
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.conditions.append(ast.unparse(node.test))
        for child in node.body:
            self.visit(child)
        self.conditions[-1] = f"not ({self.conditions[-1]})"
        for child in node.orelse:
            self.visit(child)
        self.conditions.pop()

    def visit_Call(self, node: ast.Call) -> None:
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name = kw.get("name")
        if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith("vllm:"):
            self.found.append(self._metric(node, name.value, kw))
        self.generic_visit(node)

    def _metric(self, node: ast.Call, name: str, kw: dict[str, ast.expr]) -> dict[str, Any]:
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        kind = TYPES.get(callee)
        if kind is None:
            raise Unresolved(f"{LOGGERS} line {node.lineno}: {name}: unknown constructor {callee!r}")
        doc = self._string(kw.get("documentation"), node, name)
        entry: dict[str, Any] = {
            "name": name,
            "type": kind,
            "labels": self._labels(kw.get("labelnames"), node),
        }
        entry["help"] = doc
        entry["series"] = _series(name, kind)
        if kind == "histogram":
            entry |= self._buckets(kw.get("buckets"), node, name)
        if self.conditions:
            entry["when"] = " and ".join(self.conditions)
        entry["line"] = node.lineno
        return entry

    def _resolve(self, node: ast.expr | None) -> ast.expr | None:
        seen = 0
        while isinstance(node, ast.Name | ast.Attribute) and ast.unparse(node) in self.names and seen < 8:
            node, seen = self.names[ast.unparse(node)], seen + 1
        return node

    def _string(self, node: ast.expr | None, call: ast.Call, name: str) -> str:
        node = self._resolve(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return " ".join(node.value.split())
        raise Unresolved(f"{LOGGERS} line {call.lineno}: {name}: documentation is not a string")

    def _labels(self, node: ast.expr | None, call: ast.Call) -> list[str]:
        node = self._resolve(node)
        if node is None:
            return []
        if isinstance(node, ast.List | ast.Tuple):
            out = []
            for item in map(self._resolve, node.elts):
                if not isinstance(item, ast.Constant) or not isinstance(item.value, str):
                    raise Unresolved(f"{LOGGERS} line {call.lineno}: a label name is not a string")
                out.append(item.value)
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._labels(node.left, call) + self._labels(node.right, call)
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(".keys"):
            raise Unresolved(f"{LOGGERS} line {call.lineno}: labels from a config's keys")
        raise Unresolved(f"{LOGGERS} line {call.lineno}: labelnames {ast.unparse(node)!r}")

    def _buckets(self, node: ast.expr | None, call: ast.Call, name: str) -> dict[str, Any]:
        made = self._resolve(node)
        if not (isinstance(made, ast.Call) and ast.unparse(made.func) == "histogram_buckets" and made.args):
            raise Unresolved(f"{LOGGERS} line {call.lineno}: {name}: buckets not from histogram_buckets()")
        family = ast.literal_eval(made.args[0])
        if family in self.families:
            return {"bucketFamily": family, "buckets": list(self.families[family])}
        if family == "request_tokens":  # 1, 2, 5, 10, 20, 50, ... up to --max-model-len
            return {"bucketFamily": family, "buckets": "1-2-5 series up to max_model_len"}
        raise Unresolved(f"{LOGGERS} line {call.lineno}: {name}: unknown bucket family {family!r}")


def _series(name: str, kind: str) -> list[str]:
    if kind == "counter":
        return [name.removesuffix("_total") + "_total"]
    if kind == "histogram":
        return [f"{name}_bucket", f"{name}_sum", f"{name}_count"]
    return [name]


def _info_gauges(tree: ast.Module) -> list[dict[str, Any]]:
    """``log_metrics_info``'s info gauge (``name = "vllm:cache_config_info"``; labels: the
    config's ``metrics_info()`` keys plus ``engine``), which is made from a variable."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            if isinstance(value, str) and re.fullmatch(r"vllm:[a-z_]+_info", value):
                out.append(
                    {
                        "name": value,
                        "type": "gauge",
                        "labels": ["engine"],
                        "labelsFrom": "CacheConfig.metrics_info() (its keys, one label each)",
                        "help": "Information of the LLMEngine CacheConfig (value 1)",
                        "series": [value],
                        "line": node.lineno,
                    }
                )
    return out


def extract(wheel: Path) -> dict[str, Any]:
    found = WHEEL_NAME.match(wheel.name)
    if found is None:
        raise SystemExit(f"{wheel.name}: not a vllm wheel's file name")
    with zipfile.ZipFile(wheel) as zf:
        loggers = zf.read(LOGGERS).decode()
        buckets = zf.read(BUCKETS).decode()
    reader = _Reader(bucket_families(buckets))
    tree = ast.parse(loggers)
    reader.visit(tree)
    metrics = sorted(reader.found + _info_gauges(tree), key=lambda m: str(m["name"]))
    names = [m["name"] for m in metrics]
    if len(set(names)) != len(names):
        raise Unresolved(f"a metric name twice: {sorted({n for n in names if names.count(n) > 1})}")
    return {
        "package": "vllm",
        "version": found.group(1),
        "wheel": wheel.name,
        "sha256": _sha256(wheel),
        "files": [LOGGERS, BUCKETS],
        "metrics": metrics,
    }


HEADER = """\
# vLLM's engine metrics, read from the pinned release's wheel by hack/vllm-metrics.py (do not edit:
# rerun it when the engine pin moves; see the script's docstring). Source: PyPI `vllm`, the version
# and wheel below, files `files` (Python's ast, nothing imported). Each entry: the metric's name,
# type, label names, help text, the series Prometheus stores, a histogram's default buckets, the
# condition under which vLLM creates it (`when`) and its line in vllm/v1/metrics/loggers.py.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True, help="a vllm-*.whl (pip download)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        doc = extract(args.wheel)
    except Unresolved as exc:
        print(f"vllm-metrics: {exc}", file=sys.stderr)
        return 1
    body = yaml.safe_dump(doc, sort_keys=False, width=100, default_flow_style=None)
    args.out.write_text(HEADER + body)
    print(f"{args.out.relative_to(ROOT)}: {len(doc['metrics'])} metrics of vllm {doc['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
