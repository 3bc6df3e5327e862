"""``sparkrun-k8s rollout history|undo|apply|unpin``: a workload's kept revisions, rollback and
drift applied on request (ADR 0046), on the same code as the daemon API's
``plugins.sparkrun-k8s.*`` operations (``ops/rollout.py``).

The verbs act with the user's own kubeconfig rights and write as field manager ``sparkrun-k8s``;
each write is a JSON patch that first tests ``metadata.generation``, so a spec change made
meanwhile is refused (exit 5) instead of overwritten (status writes are not changes). Exit
codes are ``cli/common.py``'s: 4 when the workload, cluster or revision does not exist, 5 when
the change is refused (no drift pending, a stale hash, the apiserver's 403/409/422).
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from sparkrun_operator.cli import common, complete
from sparkrun_operator.ops import rollout

#: Changes shown per revision in the text table (the rest are counted).
SHOWN_CHANGES = 3


EPILOG = """\
examples:
  sparkrun-k8s rollout history qwen -n team-a
  sparkrun-k8s rollout undo qwen --to-revision 2
  sparkrun-k8s rollout apply qwen                # apply the drift a pinned workload holds back
  sparkrun-k8s rollout unpin qwen

exit codes:
  0  done
  2  usage
  3  the cluster cannot be reached
  4  the workload, cluster or revision does not exist
  5  refused (no drift pending, a stale hash, forbidden, conflict, invalid)
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rollout",
        help="a workload's revisions: history, undo (roll back), apply pending drift, unpin",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, helptext, func in (
        ("history", "list the kept revisions (the current one marked), pins and pending drift", _history),
        ("undo", "roll back: serve a kept revision again (default: the previous one)", _undo),
        ("apply", "apply the pending drift (apply: OnRequest, or a rollback pin)", _apply),
        ("unpin", "remove a rollback pin (spec.rollout.revision): follow the spec again", _unpin),
    ):
        sub = verbs.add_parser(verb, help=helptext, description=helptext)
        name = sub.add_argument(
            "name", metavar="NAME", help="the InferenceWorkload (or, with --cluster, cluster)"
        )
        name.completer = complete.workload_names
        common.add_cluster_options(sub)
        common.add_output_option(sub)
        if verb == "undo":
            sub.add_argument("--to-revision", type=_positive, default=None, metavar="N", help="the revision")
        if verb == "apply":
            sub.add_argument("--cluster", action="store_true", help="NAME is an InferenceCluster")
            sub.add_argument(
                "--revision",
                default=None,
                metavar="HASH",
                help="the drift hash you reviewed (refused if stale)",
            )
        sub.set_defaults(func=func)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("a revision number is 1 or more")
    return number


def _run(
    args: argparse.Namespace, act: Callable[[Any, str], Awaitable[Any]], text: Callable[[Any], str]
) -> int:
    async def work() -> int:
        namespace = common.namespace_of(args)
        rest = await common.connect(args)
        try:
            data = common.dump(await act(rest, namespace))
        finally:
            await rest.close()
        common.emit(data, args.output, lambda d: text(common.printable(d)))
        return common.EXIT_OK

    return common.run_async(common.guard(work))


def _history(args: argparse.Namespace) -> int:
    return _run(args, lambda rest, ns: rollout.history(rest, ns, args.name), history_text)


def _undo(args: argparse.Namespace) -> int:
    async def act(rest: Any, namespace: str) -> Any:
        workload = await rollout.find_workload(rest, namespace, args.name)
        return await rollout.rollback(rest, workload, revision=args.to_revision)

    return _run(args, act, _pin_text)


def _unpin(args: argparse.Namespace) -> int:
    async def act(rest: Any, namespace: str) -> Any:
        workload = await rollout.find_workload(rest, namespace, args.name)
        return await rollout.rollback(rest, workload, clear=True)

    return _run(args, act, _pin_text)


def _apply(args: argparse.Namespace) -> int:
    async def act(rest: Any, namespace: str) -> Any:
        if args.cluster:
            cluster = await rollout.find_cluster(rest, args.name)
            return await rollout.apply_cluster_drift(rest, cluster, revision=args.revision)
        workload = await rollout.find_workload(rest, namespace, args.name)
        return await rollout.apply_drift(rest, workload, revision=args.revision)

    return _run(args, act, _apply_text)


def _pin_text(data: dict[str, Any]) -> str:
    what = f"InferenceWorkload {data['namespace']}/{data['workload']}"
    before = f"revision {data['before']}" if data.get("before") else "the spec"
    if data.get("revision") is None:
        done = (
            f"{what}: follows the spec (was pinned to {before})" if data["changed"] else f"{what}: not pinned"
        )
    elif not data["changed"]:
        done = f"{what}: already pinned to revision {data['revision']}"
    else:
        done = (
            f"{what}: rolled back to revision {data['revision']} (was: {before}); the operator serves it "
            f"as a new revision (sparkrun-k8s rollout history {data['workload']})"
        )
    return done + "\n"


def _apply_text(data: dict[str, Any]) -> str:
    what = (
        f"InferenceCluster {data['cluster']}"
        if "cluster" in data
        else f"InferenceWorkload {data['workload']}"
    )
    verb = "approved" if data["changed"] else "already approved"
    lines = [f"{what}: {verb} drift {data['approved']}"]
    if data.get("unpinned"):
        lines.append(f"  rollback pin to revision {data['unpinned']} removed")
    for change in data.get("changes") or ():
        lines.append(
            f"  {change['field']} ({change['source']}): {change.get('before')} -> {change.get('after')}"
        )
    for item in data.get("items") or ():
        lines.append(f"  {item['field']}: {item.get('applied')} -> {item.get('desired')}")
    return "\n".join(lines) + "\n"


def _when(value: str | None) -> str:
    return value.replace("T", " ")[:16] if value else ""


def history_text(data: dict[str, Any]) -> str:
    """The history as a table a person reads at a glance: the current revision marked ``*``."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("", "REVISION", "HASH", "CAUSE", "SERVED FROM", "UNTIL", "CHANGES"):
        table.add_column(column, overflow="fold")
    for entry in data.get("revisions") or ():
        cause = entry["cause"] + (f" of {entry['rollback_of']}" if entry.get("rollback_of") else "")
        changes = [f"{c['field']} ({c['source']})" for c in entry.get("changes") or ()]
        shown = ", ".join(changes[:SHOWN_CHANGES]) + (
            f", +{len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else ""
        )
        table.add_row(
            "*" if entry.get("current") else "",
            str(entry["number"]),
            entry["hash"],
            cause,
            _when(entry.get("served_from")),
            "serving" if entry.get("current") else _when(entry.get("served_until")),
            shown,
        )
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(100, shutil.get_terminal_size().columns),
        force_terminal=sys.stdout.isatty(),
        markup=False,  # NB: values are JSON ("[...]") and names, never markup
        highlight=False,
    )
    console.print(f"InferenceWorkload {data['namespace']}/{data['workload']} (apply: {data['apply']})")
    if data.get("revisions"):
        console.print(table)
    else:
        console.print("no revisions kept yet")
    if data.get("pinned"):
        console.print(f"pinned to revision {data['pinned']} (sparkrun-k8s rollout unpin {data['workload']})")
    drift = data.get("drift")
    if drift:
        pending = drift.get("revision") or "unresolved"
        console.print(f"drift pending: {pending} ({drift['reason']}, since {_when(drift.get('since'))})")
        for change in drift.get("changes") or ():
            console.print(
                f"  {change['field']} ({change['source']}): {change.get('before')} -> {change.get('after')}"
            )
        if drift.get("more"):
            console.print(f"  +{drift['more']} more")
    return buffer.getvalue()
