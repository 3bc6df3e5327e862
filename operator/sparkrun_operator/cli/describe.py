"""sparkrun-k8s describe: one object in full.

Shows an object's spec, its startup timeline (for a workload: each stage of the cold start, when
it was seen, seconds since the workload was accepted, the replica, and a recipe hook's outcome),
its conditions (type, status, reason, age, message), the Events about it (newest last, at most
50), its endpoints, and for a workload the model names the gateway routes and its first and last
failure. Secret values are never printed: a spec names the Secrets it references, and values
under secret-looking names (token, password, apiKey ...) are shown as [redacted].

TARGET is KIND/NAME, or a NAME alone for an InferenceWorkload (its name or its daemon workload
id, sparkrun_<intent>_<placement>). KIND is one of:
  workload, iw, inferenceworkload     an InferenceWorkload (namespaced)
  cluster, ic, inferencecluster       an InferenceCluster (cluster-scoped)
  cache, mc, modelcache               a ModelCache
  benchmark, ib, inferencebenchmark   an InferenceBenchmark
  recipe, rcp                         a Recipe
  daemonjob, dj                       a DaemonJob (a job of the daemon API)

examples:
  sparkrun-k8s describe chat                       # the workload chat
  sparkrun-k8s describe sparkrun_0123456789abcdef_0123456789ab
  sparkrun-k8s describe ic/gpu-pool
  sparkrun-k8s describe cache/qwen -n models -o yaml

-o json|yaml prints the object (managedFields left out, secret-looking values redacted) with
its Events under "events". Events are read up to 4 MiB (tenants write Events): over that they
are not shown ("eventsNotShown" says why) and the rest of the object is.

exit codes:
  0  shown
  2  bad arguments (an unknown kind, a name Kubernetes cannot store)
  3  the cluster cannot be reached, or the credentials are refused
  4  no such object
  5  you may not read it (403)
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
from typing import Any, Final

import yaml

from sparkrun_operator.api.resources import (
    DAEMON_JOB,
    INFERENCE_BENCHMARK,
    INFERENCE_CLUSTER,
    INFERENCE_WORKLOAD,
    MODEL_CACHE,
    RECIPE,
    Kind,
)
from sparkrun_operator.cli import common, view
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import EVENTS, resource_of
from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.redact import Redactor

#: Events shown (the newest), and read at most (one page) to find them.
MAX_EVENTS: Final = 50
EVENTS_READ: Final = 500
#: The Events answer read, at most (bytes): tenants write Events, up to an object's size each.
EVENTS_MAX_BYTES: Final = 4 << 20
#: The ``KIND/`` a TAB offers.
KIND_PREFIXES: Final = ("iw", "ic", "mc", "ib", "recipe", "dj")
#: Lines of the spec shown in the text output (the rest: -o yaml).
SPEC_LINES: Final = 200

KIND_NAMES: Final[dict[str, Kind]] = {
    alias: kind
    for kind, aliases in (
        (INFERENCE_WORKLOAD, ("workload", "workloads")),
        (INFERENCE_CLUSTER, ("cluster", "clusters")),
        (MODEL_CACHE, ("cache", "caches")),
        (INFERENCE_BENCHMARK, ("benchmark", "benchmarks", "bench")),
        (RECIPE, ("recipes",)),
        (DAEMON_JOB, ("daemonjobs", "job")),
    )
    for alias in (*aliases, kind.singular, kind.plural, *kind.short_names)
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "describe",
        help="one object in full: spec, startup, conditions, events",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = parser.add_argument(
        "target", metavar="TARGET", help="KIND/NAME, or a workload's NAME or workload id"
    )
    target.completer = complete
    common.add_cluster_options(parser)
    common.add_output_option(parser)
    parser.set_defaults(func=main)


def complete(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Shell completion of TARGET (``cli/complete.py``: bounded, nothing without a cluster):
    workload names and ``KIND/``; after ``KIND/``, that kind's names in the namespace (a
    cluster-scoped kind's, such as ``ic/``, everywhere)."""
    from sparkrun_operator.cli import complete as completion

    if "/" not in prefix:
        kinds = [f"{alias}/" for alias in KIND_PREFIXES if alias.startswith(prefix)]
        return completion.workload_names(prefix, parsed_args) + kinds
    kind_name, _slash, name = prefix.partition("/")
    kind = KIND_NAMES.get(kind_name.lower()[:64])
    if kind is None:
        return []
    return [f"{kind_name}/{found}" for found in completion.names(kind, name, parsed_args)]


def parse_target(target: str) -> tuple[Kind, str]:
    """``KIND/NAME`` or ``NAME`` (a workload) as (kind, name); ``CliError`` (2) for an unknown kind."""
    if "/" in target and not target.startswith("/"):
        kind_name, _, name = target.partition("/")
        kind = KIND_NAMES.get(kind_name.lower()[:64])
        if kind is None:
            known = "workload|iw, cluster|ic, cache|mc, benchmark|ib, recipe|rcp, daemonjob|dj"
            raise common.CliError(
                f"unknown kind {common.printable(kind_name[:64])!r} (one of {known})", common.EXIT_USAGE
            )
        if not name:
            raise common.CliError(f"{target!r} names no object (KIND/NAME)", common.EXIT_USAGE)
        return kind, name
    return INFERENCE_WORKLOAD, target


async def find(rest: Kube, kind: Kind, name: str, namespace: str) -> dict[str, Any]:
    """The object; ``CliError`` 4 when it does not exist."""
    if kind is INFERENCE_WORKLOAD:
        return await rollout.find_workload(rest, namespace, name)
    from sparkrun_operator.ops.kube import check_name

    found = await rest.get(resource_of(kind), check_name(name, kind.singular), namespace)
    if found is None:
        where = f" in namespace {namespace}" if kind.namespaced else ""
        raise common.CliError(f"{kind.kind} {name} not found{where}", common.EXIT_NOT_FOUND)
    return found


def _event_time(event: dict[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


class EventsNotShown(Exception):
    """The Events about the object could not be shown (why: the exception's text)."""


async def events_of(rest: Kube, obj: dict[str, Any], kind: Kind) -> list[dict[str, Any]]:
    """The Events about ``obj`` (by its UID), newest last, at most :data:`MAX_EVENTS`; raises
    :class:`EventsNotShown` when the answer is over :data:`EVENTS_MAX_BYTES` (never read past).

    core/v1 and events.k8s.io/v1 are two views of the same stored Events, so reading core/v1
    finds those written through either. A cluster-scoped object's Events may be in any namespace:
    read across namespaces, else (forbidden) in ``default``."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return []
    query = {"fieldSelector": f"involvedObject.uid={uid}", "limit": EVENTS_READ}
    places = [meta.get("namespace")] if kind.namespaced else [None, "default"]
    for namespace in places:
        try:
            page = await rest.request("GET", EVENTS.path(namespace), query=query, max_bytes=EVENTS_MAX_BYTES)
        except errors.KubeForbidden:
            continue
        except errors.KubeError as error:
            if not 200 <= error.status < 300:
                raise
            # NB: a 2xx refused by the client is an answer over max_bytes
            raise EventsNotShown(
                f"too large (over {view.size(EVENTS_MAX_BYTES)}; "
                f"kubectl get events --field-selector involvedObject.uid={uid})"
            ) from error
        items = [_trimmed(e) for e in (page or {}).get("items") or () if isinstance(e, dict)]
        items.sort(key=lambda e: (_event_time(e), str(e.get("eventTime") or "")))
        return items[-MAX_EVENTS:]
    return []


def _trimmed(event: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (event.get("metadata") or {}).items() if k != "managedFields"}
    return {**event, "metadata": meta}


def shown(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what no one reads (managedFields, last-applied configuration)."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return {**obj, "metadata": meta}


def _spec_text(spec: Any) -> list[str]:
    if not spec:
        return ["  (empty)"]
    dumped = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, width=120)
    lines = ["  " + line for line in dumped.splitlines()]
    if len(lines) > SPEC_LINES:
        lines = [*lines[:SPEC_LINES], f"  ... {len(lines) - SPEC_LINES} more lines (-o yaml)"]
    return lines


def _failure(label: str, failure: dict[str, Any]) -> list[str]:
    where = ", ".join(
        part
        for part in (
            f"replica {failure['replica']}" if failure.get("replica") is not None else "",
            f"rank {failure['rank']}" if failure.get("rank") is not None else "",
            str(failure.get("role") or ""),
            str(failure.get("object") or ""),
            f"exit code {failure['exitCode']}" if failure.get("exitCode") is not None else "",
        )
        if part
    )
    lines = [
        f"  {label}: {failure.get('reason', '')} {view.age(failure.get('time'))} ago"
        + (f" ({where})" if where else "")
    ]
    if failure.get("message"):
        lines.append(f"    {view.clip(failure['message'], 300)}")
    for line in (failure.get("log") or [])[-5:]:
        lines.append(f"    | {view.clip(line, 200)}")
    return lines


def text(data: dict[str, Any], kind: Kind) -> str:
    """The object as sections a person reads (``data`` printable and redacted)."""
    meta, spec, status = data.get("metadata") or {}, data.get("spec") or {}, data.get("status") or {}
    where = f"{meta.get('namespace')}/" if kind.namespaced else ""
    head = [f"{kind.kind} {where}{meta.get('name', '')}"]
    facts = [
        ("Phase", status.get("phase") or status.get("state")),
        ("Summary", view.condition_summary(status.get("conditions"))),
        ("Workload id", status.get("workloadId")),
        ("Age", view.age(meta.get("creationTimestamp"))),
        ("Generation", _generation(meta, status)),
    ]
    if kind is INFERENCE_WORKLOAD:
        facts.insert(1, ("Replicas", f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)} ready"))
        model = status.get("model") or {}
        if model:
            names = ", ".join([model.get("servedName", ""), *(model.get("aliases") or ())])
            facts.append(("Model", f"{model.get('name', '')} (gateway names: {names})"))
        facts.append(("Revision", status.get("revision")))
    facts += [(label, value) for label, value in _kind_facts(kind, spec, status)]
    facts = [(label, value) for label, value in facts if value not in (None, "")]
    width = max((len(label) for label, _value in facts), default=0) + 2
    head += [f"  {label + ':':<{width}}{value}" for label, value in facts]
    items: list[Any] = ["\n".join(head), "", "Spec:", "\n".join(_spec_text(spec)), ""]
    rows: list[tuple[Any, ...]]
    timeline = view.startup_timeline(status)
    if timeline:
        start = next((t for s, t, *_rest in timeline if s == "accepted"), timeline[0][1])
        rows = [
            (stage, when.replace("T", " "), view.since(start, when), "" if r is None else r, o, m)
            for stage, when, r, o, m in timeline
        ]
        headers = ("STAGE", "TIME", "SINCE", "REPLICA", "OUTCOME", "MESSAGE")
        items += [view.table(headers, rows, title="Startup:"), ""]
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    if conditions:
        rows = [
            (
                c.get("type", ""),
                c.get("status", ""),
                c.get("reason", ""),
                view.age(c.get("lastTransitionTime")),
                view.clip(c.get("message"), 200),
            )
            for c in conditions
        ]
        items += [view.table(("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"), rows, title="Conditions:"), ""]
    endpoints = [e for e in status.get("endpoints") or () if isinstance(e, dict)]
    if endpoints:
        rows = [
            (e.get("replica", ""), e.get("url", ""), "yes" if e.get("ready") else "no") for e in endpoints
        ]
        items += [view.table(("REPLICA", "URL", "READY"), rows, title="Endpoints:"), ""]
    failures = [
        line
        for label, key in (("first", "firstFailure"), ("last", "lastFailure"))
        if isinstance(status.get(key), dict)
        for line in _failure(label, status[key])
    ]
    if failures:
        items += ["Failures:", "\n".join(failures), ""]
    events = data.get("events") or []
    if data.get("eventsNotShown"):
        items += [f"Events: not shown: {view.clip(data['eventsNotShown'], 200)}"]
    elif events:
        rows = [
            (
                view.age(_event_time(e)),
                e.get("type", ""),
                e.get("reason", ""),
                _source(e),
                e.get("count") or "",
                view.clip(e.get("message") or e.get("note"), 200),
            )
            for e in events
        ]
        items += [view.table(("AGE", "TYPE", "REASON", "FROM", "COUNT", "MESSAGE"), rows, title="Events:")]
    else:
        items += ["Events: none"]
    return view.render(*items)


def _generation(meta: dict[str, Any], status: dict[str, Any]) -> str:
    if meta.get("generation") is None:
        return ""
    observed = status.get("observedGeneration")
    return f"{meta['generation']}" + ("" if observed is None else f" (observed {observed})")


def _source(event: dict[str, Any]) -> str:
    source = event.get("source") or {}
    return str(event.get("reportingComponent") or source.get("component") or "")


def _kind_facts(kind: Kind, spec: dict[str, Any], status: dict[str, Any]) -> list[tuple[str, Any]]:
    if kind is INFERENCE_CLUSTER:
        totals = status.get("totals") or {}
        gpus = totals.get("gpus") or {}
        return [
            ("Nodes", f"{totals.get('readyNodes', 0)}/{totals.get('nodes', 0)} ready"),
            ("GPUs", f"{gpus.get('free', 0)} free of {gpus.get('allocatable', 0)} allocatable"),
            ("Product", status.get("gpuProduct")),
        ]
    if kind is MODEL_CACHE:
        progress = status.get("progress") or {}
        total = (status.get("manifest") or {}).get("totalBytes") or progress.get("bytesTotal")
        return [
            ("Size", view.size(total) if total else ""),
            ("Done", view.size(progress.get("bytesDone")) if progress else ""),
            ("Pinned", "yes" if spec.get("pinned") else "no"),
            ("Revision", status.get("resolvedRevision")),
            ("Message", view.clip(status.get("message"), 200)),
        ]
    if kind is INFERENCE_BENCHMARK:
        return [(k, v) for k, v in (status.get("headline") or {}).items()]
    return []


def main(args: argparse.Namespace) -> int:
    async def work() -> int:
        kind, name = parse_target(args.target)
        namespace = common.namespace_of(args)
        rest = await common.connect(args)
        try:
            obj = await find(rest, kind, name, namespace)
            try:
                events, omitted = await events_of(rest, obj, kind), {}
            except EventsNotShown as why:
                events, omitted = [], {"eventsNotShown": str(why)}
        finally:
            await rest.close()
        redactor = Redactor()
        data = await redactor.apply({**shown(obj), "events": events, **omitted})
        common.emit(data, args.output, lambda d: text(common.printable(d), kind))
        return common.EXIT_OK

    return common.run_async(common.guard(work))
