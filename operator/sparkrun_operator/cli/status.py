"""sparkrun-k8s status: what runs, at a glance.

Lists the InferenceWorkloads (phase, ready replicas, the name clients send as 'model', age, and
the condition that matters: "Ready", "Progressing: Creating", "CacheReady: WaitingForCache", the
last failure), the InferenceClusters (ready nodes, free GPUs, GPU product), the ModelCaches
(phase, size, download progress, pinned) and the InferenceBenchmarks (phase, target, headline
figures once done). A section with nothing in it is left out; a kind whose CRD is not installed,
or that you may not list, says so in its section and the others are still shown.

Each section shows at most --limit objects (default 200) and says how many more there are.

examples:
  sparkrun-k8s status                  # the current namespace
  sparkrun-k8s status -n team-a
  sparkrun-k8s status -A               # every namespace
  sparkrun-k8s status --watch          # redraw every 2 s until Ctrl-C
  sparkrun-k8s status -o json | jq '.workloads[] | select(.ready == false) | .name'

-o json|yaml prints {workloads: [...], clusters: [...], caches: [...], benchmarks: [...],
notes: {...}} with the same fields as the text (notes: a section that could not be read, and
why; more: how many objects a section left out). With --watch, one document per redraw.

exit codes:
  0  shown (also when some sections could not be read: see notes)
  2  bad arguments
  3  the cluster cannot be reached, or the credentials are refused
  130  interrupted (Ctrl-C, the normal end of --watch)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.resources import (
    INFERENCE_BENCHMARK,
    INFERENCE_CLUSTER,
    INFERENCE_WORKLOAD,
    MODEL_CACHE,
    Kind,
)
from sparkrun_operator.cli import common, view
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import resource_of

#: Objects shown per section unless --limit says otherwise (one page of the list).
DEFAULT_LIMIT: Final = 200
MAX_LIMIT: Final = 5000
#: Seconds between --watch redraws.
WATCH_INTERVAL: Final = 2.0

SECTIONS: Final[tuple[tuple[str, Kind], ...]] = (
    ("workloads", INFERENCE_WORKLOAD),
    ("clusters", INFERENCE_CLUSTER),
    ("caches", MODEL_CACHE),
    ("benchmarks", INFERENCE_BENCHMARK),
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="workloads, clusters, caches and benchmarks at a glance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common.add_cluster_options(parser)
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (default: the current one)"
    )
    parser.add_argument("-w", "--watch", action="store_true", help="redraw every 2 s until Ctrl-C")
    parser.add_argument(
        "--limit", type=_limit, default=DEFAULT_LIMIT, metavar="N", help="objects shown per section (200)"
    )
    common.add_output_option(parser)
    parser.set_defaults(func=main)


def _limit(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"between 1 and {MAX_LIMIT}")
    return number


@dataclass
class Section:
    """One kind's objects as read (at most the limit), how many more, or why none could be read."""

    items: list[dict[str, Any]] = field(default_factory=list)
    more: int = 0
    note: str = ""


async def read_section(rest: Kube, kind: Kind, namespace: str | None, limit: int) -> Section:
    """One page of ``kind`` (``namespace`` None: all); a missing CRD or a refusal is a note."""
    path = resource_of(kind).path(None if not kind.namespaced else namespace)
    try:
        page = await rest.request("GET", path, query={"limit": limit})
    except errors.KubeNotFound:
        return Section(note=f"{kind.kind} is not installed in this cluster (no CRD {kind.crd_name})")
    except errors.KubeForbidden:
        where = f" in namespace {namespace}" if kind.namespaced and namespace else ""
        return Section(note=f"you may not list {kind.plural}{where}")
    items = [item for item in (page or {}).get("items") or () if isinstance(item, dict)][:limit]
    metadata = (page or {}).get("metadata") or {}
    remaining = metadata.get("remainingItemCount")
    more = remaining if isinstance(remaining, int) and remaining > 0 else 0
    if not more and metadata.get("continue"):
        more = -1  # NB: more exist, the apiserver did not count them
    return Section(items=items, more=more)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _ready(row: dict[str, Any]) -> str:
    """READY as people read it: a sleeping workload's pods are Ready but serve nothing."""
    counts = f"{row['readyReplicas']}/{row['replicas']}"
    return f"{counts} asleep" if row.get("phase") == "Sleeping" else counts


def workload_row(obj: dict[str, Any]) -> dict[str, Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    model = status.get("model") or {}
    served = model.get("servedName") or (spec.get("model") or {}).get("servedName") or ""
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    failure = status.get("lastFailure") or {}
    return {
        "namespace": _meta(obj).get("namespace", ""),
        "name": _meta(obj).get("name", ""),
        "phase": status.get("phase") or "",
        "ready": ready,
        "readyReplicas": status.get("readyReplicas") or 0,
        "replicas": spec.get("replicas", 1) if isinstance(spec.get("replicas", 1), int) else 0,
        "served": served,
        "model": model.get("name") or (spec.get("model") or {}).get("name") or "",
        "workloadId": status.get("workloadId") or "",
        "condition": view.condition_summary(status.get("conditions")),
        "lastFailure": (
            {"reason": failure.get("reason", ""), "time": failure.get("time", "")} if failure else None
        ),
        "created": _meta(obj).get("creationTimestamp", ""),
    }


def cluster_row(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status") or {}
    totals = status.get("totals") or {}
    gpus = totals.get("gpus") or {}
    return {
        "name": _meta(obj).get("name", ""),
        "nodes": totals.get("nodes") or 0,
        "readyNodes": totals.get("readyNodes") or 0,
        "gpusAllocatable": gpus.get("allocatable") or 0,
        "gpusFree": gpus.get("free") or 0,
        "product": status.get("gpuProduct") or "",
        "default": bool((obj.get("spec") or {}).get("default")),
        "condition": view.condition_summary(status.get("conditions")),
        "created": _meta(obj).get("creationTimestamp", ""),
    }


def cache_row(obj: dict[str, Any]) -> dict[str, Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    progress = status.get("progress") or {}
    total = (status.get("manifest") or {}).get("totalBytes") or progress.get("bytesTotal") or 0
    done = progress.get("bytesDone") or 0
    percent = None
    if status.get("phase") == "Ready":
        percent = 100
    elif isinstance(total, int) and total > 0 and isinstance(done, int):
        percent = min(100, done * 100 // total)
    source = spec.get("source") or {}
    return {
        "namespace": _meta(obj).get("namespace", ""),
        "name": _meta(obj).get("name", ""),
        "phase": status.get("phase") or "",
        "model": (source.get("huggingFace") or {}).get("repo") or "",
        "bytes": total if isinstance(total, int) else 0,
        "percent": percent,
        "pinned": bool(spec.get("pinned")),
        "condition": view.condition_summary(status.get("conditions")),
        "created": _meta(obj).get("creationTimestamp", ""),
    }


def benchmark_row(obj: dict[str, Any]) -> dict[str, Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    target = spec.get("target") or {}
    headline = status.get("headline") or {}
    return {
        "namespace": _meta(obj).get("namespace", ""),
        "name": _meta(obj).get("name", ""),
        "phase": status.get("phase") or "",
        "target": (target.get("workloadRef") or {}).get("name") or target.get("url") or "",
        "model": target.get("model") or "",
        "headline": {k: v for k, v in headline.items() if isinstance(v, int | float)},
        "condition": view.condition_summary(status.get("conditions")),
        "created": _meta(obj).get("creationTimestamp", ""),
    }


ROWS: Final[dict[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "workloads": workload_row,
    "clusters": cluster_row,
    "caches": cache_row,
    "benchmarks": benchmark_row,
}


def snapshot(sections: dict[str, Section]) -> dict[str, Any]:
    """The JSON document: rows per section (stable fields), ``notes`` and ``more`` per section."""
    data: dict[str, Any] = {
        name: [ROWS[name](item) for item in section.items] for name, section in sections.items()
    }
    data["notes"] = {name: section.note for name, section in sections.items() if section.note}
    data["more"] = {name: section.more for name, section in sections.items() if section.more}
    return data


def _headline(values: dict[str, Any]) -> str:
    parts = []
    if "ttftP50Ms" in values:
        parts.append(f"TTFT p50 {values['ttftP50Ms']:.0f} ms")
    if "itlP50Ms" in values:
        parts.append(f"ITL p50 {values['itlP50Ms']:.1f} ms")
    if "outputTokensPerSecond" in values:
        parts.append(f"{values['outputTokensPerSecond']:.1f} tok/s")
    return ", ".join(parts)


def _last_failure(row: dict[str, Any], now: Any) -> str:
    failure = row["lastFailure"]
    if not failure or row["ready"]:
        return ""
    return f" (last failure: {failure['reason']}, {view.age(failure['time'], now)} ago)"


def _more(count: int) -> str:
    return "... and more (raise --limit)" if count < 0 else f"... and {count} more (raise --limit)"


def text(
    data: dict[str, Any], *, all_namespaces: bool = False, now: Any = None, width: int | None = None
) -> str:
    """The sections as tables a person reads at a glance (``data`` already printable)."""
    items: list[Any] = []
    fit = width or view.terminal_width()
    ns: list[str] = ["NAMESPACE"] if all_namespaces else []

    def namespaced(row: dict[str, Any]) -> list[Any]:
        return [row["namespace"]] if all_namespaces else []

    tables: dict[str, tuple[list[str], Callable[[dict[str, Any]], list[Any]]]] = {
        "workloads": (
            [*ns, "NAME", "PHASE", "READY", "SERVED", "AGE", "CONDITION"],
            lambda r: [
                *namespaced(r),
                r["name"],
                r["phase"],
                _ready(r),
                r["served"],
                view.age(r["created"], now),
                r["condition"] + _last_failure(r, now),
            ],
        ),
        "clusters": (
            ["NAME", "NODES", "GPUS FREE", "PRODUCT", "AGE", "CONDITION"],
            lambda r: [
                r["name"] + (" (default)" if r["default"] else ""),
                f"{r['readyNodes']}/{r['nodes']} ready",
                f"{r['gpusFree']}/{r['gpusAllocatable']}",
                r["product"],
                view.age(r["created"], now),
                r["condition"],
            ],
        ),
        "caches": (
            [*ns, "NAME", "PHASE", "MODEL", "SIZE", "PROGRESS", "PINNED", "AGE", "CONDITION"],
            lambda r: [
                *namespaced(r),
                r["name"],
                r["phase"],
                r["model"],
                view.size(r["bytes"]) if r["bytes"] else "",
                "" if r["percent"] is None else f"{r['percent']}%",
                "yes" if r["pinned"] else "",
                view.age(r["created"], now),
                r["condition"],
            ],
        ),
        "benchmarks": (
            [*ns, "NAME", "PHASE", "TARGET", "HEADLINE", "AGE", "CONDITION"],
            lambda r: [
                *namespaced(r),
                r["name"],
                r["phase"],
                r["target"] or r["model"],
                _headline(r["headline"]),
                view.age(r["created"], now),
                r["condition"],
            ],
        ),
    }
    titles = {
        "workloads": "InferenceWorkloads",
        "clusters": "InferenceClusters",
        "caches": "ModelCaches",
        "benchmarks": "InferenceBenchmarks",
    }
    for name, (headers, cells) in tables.items():
        rows, note, more = data.get(name) or [], data["notes"].get(name), data["more"].get(name)
        if note:
            items += [f"{titles[name]}: {note}", ""]
        elif rows:
            items += [view.table(headers, [cells(r) for r in rows], title=titles[name], fit=fit)]
            items += [_more(more), ""] if more else [""]
    if not items:
        return "nothing to show: no workloads, clusters, caches or benchmarks (sparkrun-k8s run MODEL)\n"
    return view.render(*items, width=width)


async def read_all(rest: Kube, namespace: str | None, limit: int) -> dict[str, Any]:
    """Every section, read at once; the JSON document."""
    read = await asyncio.gather(*(read_section(rest, kind, namespace, limit) for _name, kind in SECTIONS))
    return snapshot({name: section for (name, _kind), section in zip(SECTIONS, read, strict=True)})


def main(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else common.namespace_of(args)

    def show(data: dict[str, Any], width: int | None = None) -> str:
        return text(common.printable(data), all_namespaces=args.all_namespaces, width=width)

    async def work() -> int:
        rest = await common.connect(args)
        try:
            if not args.watch:
                common.emit(await read_all(rest, namespace, args.limit), args.output, show)
                return common.EXIT_OK
            await watch(rest, args, namespace, show)
        finally:
            await rest.close()
        return common.EXIT_OK  # pragma: no cover (watch ends only by Ctrl-C)

    return common.run_async(work)


async def watch(rest: Kube, args: argparse.Namespace, namespace: str | None, show: Any) -> None:
    """Redraw every :data:`WATCH_INTERVAL` seconds until interrupted: the text in place (rich
    Live), JSON or YAML one document per change."""
    if args.output != "text":
        last = None
        while True:
            data = await read_all(rest, namespace, args.limit)
            if data != last:
                if args.output == "yaml" and last is not None:
                    sys.stdout.write("---\n")
                common.emit(data, args.output, show)
                sys.stdout.flush()
                last = data
            await asyncio.sleep(WATCH_INTERVAL)
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console(markup=False, highlight=False, emoji=False)
    where = "all namespaces" if namespace is None else f"namespace {namespace}"
    with Live(Text(""), console=console, auto_refresh=False, transient=False) as live:
        while True:
            data = await read_all(rest, namespace, args.limit)
            header = f"every {WATCH_INTERVAL:.0f}s, Ctrl-C to stop: sparkrun-k8s status, {where}\n\n"
            # NB: laid out for the terminal's width now (it may have been resized)
            screen = Text.from_ansi(header + show(data, console.width))
            live.update(screen, refresh=True)
            await asyncio.sleep(WATCH_INTERVAL)
