"""What ``stop``, ``sleep`` and ``wake`` share: one workload's runtime state, changed on one path
and followed to its end.

By default a verb runs the daemon operation's own executor (``workloads.stop`` / ``.sleep`` /
``.wake`` in ``ops/executors/workloads/lifecycle.py``: the enableSleepMode refusal, the wake from
the idle policy's zero, the waits) in this process, with the user's kubeconfig rights, on the
workload in ``-n`` (else the context's namespace), as ``rollout`` and ``lease`` run theirs: the
caller acts as kubectl would (writes as field manager ``sparkrun-k8s``; the apiserver's RBAC
decides), so the operation's manager is the workload's own ``spec.manager`` (the daemon's
manager rule protects the daemon's shared identity, not a user's own rights) and the recipe and
revision it pins are the workload's. Its progress (phase changes, new startup stages) goes to
stderr as lines for ``-o text``. NAME is the workload's name or its workload id
(``status.workloadId``) in that namespace.

``--daemon`` (implied by ``--url``) submits the operation to the daemon API instead, through
:mod:`~sparkrun_operator.cli.daemonapi` (through kube-apiserver, or ``--url``): the daemon acts in
its own namespace (the shim's), on workloads whose ``spec.manager`` is the caller's and that
serve a recipe, as a DaemonJob (``sparkrun-k8s daemon jobs``; ``--key`` its Idempotency-Key).
NAME is then a row of ``workloads.list``, whose recipe and revision the operation pins.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.cli import common, complete
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import (
    DaemonApi,
    add_daemon_options,
    daemon_transport,
    is_job_ack,
    job_refusal,
)

#: The most workloads listed to find NAME (the daemon's own ``workloads.list`` has no name filter).
LIST_LIMIT: Final = 10_000
#: Seconds between the listings of a name the first did not find (:func:`resolve`), and how many.
RELIST_SECONDS: Final = 0.5
RELIST_TRIES: Final = 6

EXIT_CODES: Final = """exit codes: 0 done; 1 the operation refused or failed (its typed error is printed:
e.g. the workload was not started with sleep mode, its start failed; --daemon: the job failed,
e.g. the workload is another manager's); 2 usage; 3 the cluster or the daemon cannot be reached, or
--timeout passed (the change goes on); 4 no such workload; 5 refused (403: you may not change
workloads there; 409, 429); 130 interrupted (--daemon: the job goes on, its id is printed).
"""


@dataclass(frozen=True)
class Verb:
    """One lifecycle verb: its daemon operation and how its outcome reads."""

    name: str
    operation: str
    done: str  # "stopped", "sleeping (level 1)", "awake, Ready"


def add_options(parser: argparse.ArgumentParser, *, waits: bool = True) -> None:
    name = parser.add_argument("name", metavar="NAME", help="the workload's name or workload id")
    name.completer = complete_workloads  # type: ignore[attr-defined]  # NB: argcomplete's protocol
    add_daemon_options(parser, chosen_by="--daemon")
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="the workload's namespace (default: the context's, else 'default'); not with --daemon",
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="through the daemon API (its namespace and manager rule, a DaemonJob); implied by --url",
    )
    common.add_output_option(parser)
    parser.add_argument("--key", default=None, help="--daemon: the job's Idempotency-Key (a retry: that job)")
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="seconds to wait (then exit 3; it goes on)"
    )
    if waits:
        parser.add_argument(
            "--no-wait", action="store_true", help="return once the change is made (--daemon: submitted)"
        )


def via_daemon(args: argparse.Namespace) -> bool:
    """Whether ``args`` choose the daemon API (``--daemon`` or ``--url``); exit 2 for options of
    the other path."""
    if getattr(args, "daemon", False) or getattr(args, "url", None):
        if getattr(args, "namespace", None):
            raise CliError(
                "-n goes without --daemon/--url: the daemon API acts in its own namespace (the shim's)",
                common.EXIT_USAGE,
            )
        return True
    if getattr(args, "key", None):
        raise CliError("--key (the daemon job's Idempotency-Key) goes with --daemon", common.EXIT_USAGE)
    if getattr(args, "token_file", None) or getattr(args, "ca_cert", None):
        raise CliError("--token-file and --ca-cert go with --url", common.EXIT_USAGE)
    return False


def _metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    found = row.get("metadata")
    return found if isinstance(found, dict) else {}


def complete_workloads(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """NAME on TAB: the namespace's InferenceWorkloads (``cli/complete.py``), or with ``--daemon``
    / ``--url`` the rows of the daemon's ``workloads.list`` through the transport the line
    chooses (the daemon's namespace is not the client's to list); both bounded by
    :func:`complete.bounded`, nothing without a cluster."""
    if getattr(parsed_args, "daemon", False) or getattr(parsed_args, "url", None):
        return complete.bounded(lambda: _daemon_names(parsed_args), prefix)
    return complete.workload_names(prefix, parsed_args)


async def _daemon_names(args: argparse.Namespace) -> list[str]:
    async with daemon_transport(args) as api:
        rows = await api.call("workloads.list", {"limit": LIST_LIMIT})
    return [str(_metadata(row).get("name") or "") for row in rows if isinstance(row, dict)]


def find_row(rows: Any, name: str) -> dict[str, Any]:
    """The ``workloads.list`` row whose workload id or name is ``name`` (exit 4 if none)."""
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, dict):
            continue
        metadata = _metadata(row)
        if name in (row.get("workload_id"), metadata.get("name")):
            return row
    raise CliError(
        f"no workload {common.printable(name)} in the daemon API's namespace "
        "(sparkrun-k8s daemon call workloads.list lists them)",
        common.EXIT_NOT_FOUND,
    )


async def resolve(api: DaemonApi, name: str) -> dict[str, Any]:
    """The listed workload ``name`` names. NB: ``workloads.list`` answers from the shim's watch
    cache and is a cacheable query (the shim keeps an answer 2 s, keyed by its arguments): a
    workload created a moment ago may be missing from it, so a miss lists again, with other
    arguments each time (a fresh answer), for up to :data:`RELIST_TRIES` x :data:`RELIST_SECONDS`."""
    for attempt in range(RELIST_TRIES + 1):
        if attempt:
            await asyncio.sleep(RELIST_SECONDS)
        try:
            return find_row(await api.call("workloads.list", {"limit": LIST_LIMIT + attempt}), name)
        except CliError as error:
            if error.code != common.EXIT_NOT_FOUND or attempt == RELIST_TRIES:
                raise
    raise AssertionError("unreachable")


def arguments_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The operation's arguments for a listed workload (exit 5 when it names no recipe: the
    daemon's lifecycle operations pin a recipe and its revision)."""
    metadata = _metadata(row)
    recipe = row.get("recipe")
    if not isinstance(recipe, str) or not recipe:
        raise CliError(
            f"workload {common.printable(str(metadata.get('name') or row.get('workload_id')))} serves no "
            "recipe: the daemon's lifecycle operations address a workload by its recipe (change a "
            "model-only workload's spec.state, or delete it, with kubectl)",
            common.EXIT_REFUSED,
        )
    return {
        "workload_id": str(row.get("workload_id")),
        "recipe": recipe,
        "recipe_revision": str(metadata.get("recipe_revision") or ""),
    }


def outcome_text(verb: Verb, report: Mapping[str, Any]) -> str:
    """``qwen-chat: sleeping (level 1) in 2.1 s`` (``report``: what :func:`act` prints as JSON)."""
    name = common.printable(str(report.get("workload")))
    if report.get("job_id") and report.get("state") == "submitted":
        return f"{name}: {verb.operation} submitted as job {common.printable(str(report['job_id']))}\n"
    if report.get("state") == "requested":
        namespace = common.printable(str(report.get("namespace")))
        return f"{name}: {verb.name} requested, not waiting (sparkrun-k8s status -n {namespace})\n"
    return f"{name}: {verb.done} in {report.get('seconds', 0):.1f} s\n"


async def act(verb: Verb, args: argparse.Namespace) -> int:
    """Resolve NAME, change its state on the path ``args`` choose, wait, print the outcome."""
    if via_daemon(args):
        async with daemon_transport(args) as api:
            row = await resolve(api, args.name)
            report = await _run(api, verb, row, args)
    else:
        from sparkrun_operator.cli import lifecycle_local

        report = await lifecycle_local.act(verb.operation, args)
    common.emit(report, args.output, lambda r: outcome_text(verb, r))
    return common.EXIT_OK


async def _run(
    api: DaemonApi, verb: Verb, row: Mapping[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    metadata = _metadata(row)
    report: dict[str, Any] = {
        "workload": metadata.get("name") or row.get("workload_id"),
        "workload_id": row.get("workload_id"),
        "operation": verb.operation,
    }
    started = time.monotonic()
    answer = await api.submit(verb.operation, arguments_of(row), key=args.key)
    if not is_job_ack(answer):
        raise CliError(f"{verb.operation} answered without a job: {answer!r:.200}", common.EXIT_UNREACHABLE)
    report["job_id"] = answer["job_id"]
    if getattr(args, "no_wait", False):
        return {**report, "state": "submitted"}
    job = await api.wait(str(answer["job_id"]), timeout=args.timeout)
    if job.get("state") != "succeeded":
        raise job_refusal(job)
    result = job.get("result")
    return {
        **report,
        "state": result.get("state") if isinstance(result, dict) else None,
        "seconds": round(time.monotonic() - started, 1),
        "result": result,
    }


def register_verb(subparsers: Any, verb: Verb, doc: str, helptext: str, *, waits: bool = True) -> None:
    """Add ``verb`` to the top-level parser (``doc``: the module's man page)."""
    parser = subparsers.add_parser(
        verb.name,
        help=helptext,
        description=doc + "\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # NB: `--token` must not be taken for --token-file (a token in argv)
    )
    add_options(parser, waits=waits)
    parser.set_defaults(func=lambda args: common.run_async(lambda: act(verb, args)))
