"""Call the daemon API: what it is, its operations, run one, and its jobs.

The daemon API is the sparkrun daemon's HTTP API served over Kubernetes by the shim
(docs/daemon-api.md). By default these commands reach it through kube-apiserver (the aggregated
API daemon.sparkrun.dev) with your kubeconfig's credentials: a client certificate, an exec
plugin (cloud logins) or a token all work, and RBAC decides what you may do. --url talks to the
shim's own listener instead, with a bearer token from --token-file or $SPARKRUN_DAEMON_TOKEN
(never on the command line, where `ps` would show it).

commands:
  info (status)        the daemon: protocol, version, namespace, who you are to it
  ops                  the operations you may call (name, kind, scope)
  call NAME [ARGS]     run one operation; a job is followed to its end (--no-wait: not)
  jobs                 your jobs (all of them for an admin), newest first
  job ID               one job: state, result, error, pending prompt
  events ID [-f]       a job's events; -f follows them until the job ends
  cancel ID            ask a job to stop
  answer ID PROMPT V   answer a job's pending prompt (V "-": read it from standard input; a
                       secret prompt's answer is taken only so, never from the command line)

examples:
  sparkrun-k8s daemon info
  sparkrun-k8s daemon call workloads.list
  sparkrun-k8s daemon call cluster.create name=lab 'hosts=["node-1"]' --key create-lab-1
  sparkrun-k8s daemon call workloads.run --arg-file run.json --no-wait
  sparkrun-k8s daemon events -f JOB_ID
  (umask 077; kubectl -n sparkrun-system create token ci > ci.token)
  sparkrun-k8s daemon jobs --state running \\
    --url https://shim.example:8443 --ca-cert ca.pem --token-file ci.token

arguments of call: --arg JSON (or --data), --arg-file FILE (- for standard input), then any
KEY=VALUE pairs on top (VALUE is JSON when it parses as JSON, else a string).

output: -o text (for people), json or yaml (the daemon's JSON as it answered; `events -o json`
prints one JSON object per line).

exit codes: 0 done; 1 a job ended failed, cancelled or lost; 2 usage (a bad argument, a 400);
3 the daemon or the cluster cannot be reached, 401, a 5xx, or --timeout passed (the job goes
on); 4 not found (an operation, a job); 5 refused (403, 409, 422, 429 with its retry delay);
130 interrupted (a job being waited for goes on: its id is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from sparkrun_operator.cli import common
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import (
    TERMINAL,
    DaemonApi,
    add_daemon_options,
    daemon_transport,
    describe_error,
    is_job_ack,
    job_refusal,
)

#: The most bytes of an --arg-file or a prompt answer read from standard input.
MAX_INPUT_BYTES: Final = 1024 * 1024
#: Reconnects of ``events -f`` whose stream dropped before the job ended.
RECONNECTS: Final = 5
STATES: Final = ("queued", "running", "waiting_input", "succeeded", "failed", "cancelled", "lost")

Handler = Callable[[DaemonApi, argparse.Namespace], Any]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "daemon",
        help="call the daemon API (through the apiserver, or --url)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(
        name: str, helptext: str, handler: Handler, aliases: tuple[str, ...] = ()
    ) -> argparse.ArgumentParser:
        # NB: no abbreviations: `--token` must not be taken for --token-file (a token in argv)
        sub = verbs.add_parser(
            name, help=helptext, description=helptext, aliases=list(aliases), allow_abbrev=False
        )
        add_daemon_options(sub)
        common.add_output_option(sub)
        sub.set_defaults(func=lambda args: common.run_async(lambda: _run(handler, args)))
        parser_: argparse.ArgumentParser = sub
        return parser_

    verb("info", "the daemon: protocol, version, namespace, who you are to it", _info, ("status",))
    verb("ops", "the operations you may call", _ops)
    call = verb("call", "run one operation (a job is followed to its end)", _call)
    call.add_argument("name", metavar="NAME", help="the operation, e.g. workloads.list")
    call.add_argument("pairs", nargs="*", metavar="KEY=VALUE", help="arguments (VALUE: JSON, else a string)")
    call.add_argument(
        "--arg", "--data", dest="arg", default=None, metavar="JSON", help="arguments as a JSON object"
    )
    call.add_argument(
        "--arg-file", default=None, metavar="FILE", help="arguments from a JSON file (- for stdin)"
    )
    call.add_argument(
        "--key",
        "--idempotency-key",
        dest="key",
        default=None,
        help="Idempotency-Key: a retry answers the same job",
    )
    call.add_argument("--no-wait", action="store_true", help="print the job's id and return at once")
    call.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="seconds to wait for a job (then exit 3)"
    )
    jobs = verb("jobs", "your jobs (an admin's: everyone's), newest first", _jobs)
    jobs.add_argument("--state", choices=STATES, default=None, help="only jobs in this state")
    jobs.add_argument("--limit", type=int, default=50, help="at most this many (1-1000; default 50)")
    verb("job", "one job: state, result, error, pending prompt", _job).add_argument("job_id", metavar="ID")
    events = verb("events", "a job's events (-f: follow until it ends)", _events)
    events.add_argument("job_id", metavar="ID")
    events.add_argument("-f", "--follow", action="store_true", help="follow the events until the job ends")
    events.add_argument("--after", type=int, default=0, metavar="N", help="only events after number N")
    verb("cancel", "ask a job to stop", _cancel).add_argument("job_id", metavar="ID")
    answer = verb("answer", "answer a job's pending prompt", _answer)
    answer.add_argument("job_id", metavar="ID")
    answer.add_argument("prompt_id", metavar="PROMPT")
    answer.add_argument(
        "value",
        metavar="VALUE",
        help="JSON, else a string; - reads it from standard input (a secret prompt's answer: only so)",
    )


async def _run(handler: Handler, args: argparse.Namespace) -> int:
    async with daemon_transport(args) as api:
        result = await handler(api, args)
    return int(result or 0)


def _print(args: argparse.Namespace, data: Any, text: Callable[[Any], str]) -> None:
    common.emit(data, args.output, text)


# --- info and ops ------------------------------------------------------------------------------


async def _info(api: DaemonApi, args: argparse.Namespace) -> int:
    _print(args, await api.get("/v1/info"), info_text)
    return 0


def info_text(info: Any) -> str:
    if not isinstance(info, dict):
        return f"{common.printable(str(info))}\n"
    info = common.printable(info)
    runtime = info.get("runtime") if isinstance(info.get("runtime"), dict) else {}
    rows = [
        ("daemon", f"{info.get('name', 'sparkrun daemon')} {info.get('version', '')}".strip()),
        ("protocol", info.get("protocol")),
        ("profile", info.get("profile")),
        ("namespace", info.get("binding")),
        ("you", runtime.get("principal")),
        ("authenticated by", runtime.get("identity")),
        ("maintenance", "draining" if info.get("restart_required") else None),
    ]
    return "".join(f"{label + ':':<18}{value}\n" for label, value in rows if value not in (None, ""))


async def _ops(api: DaemonApi, args: argparse.Namespace) -> int:
    _print(args, await api.get("/v1/ops"), ops_text)
    return 0


def ops_text(ops: Any) -> str:
    rows = [op for op in ops if isinstance(op, dict)] if isinstance(ops, list) else []
    table = [("NAME", "KIND", "SCOPE", "DESCRIPTION")]
    for op in sorted(rows, key=lambda o: str(o.get("name"))):
        op = common.printable(op)
        description = str(op.get("description") or "")
        table.append((str(op.get("name")), str(op.get("kind")), str(op.get("scope")), _cut(description, 80)))
    return columns(table)


# --- call ----------------------------------------------------------------------------------------


def arguments_of(arg: str | None, arg_file_text: str | None, pairs: list[str]) -> dict[str, Any]:
    """The operation's arguments: ``--arg`` or the file's JSON object, then ``KEY=VALUE`` pairs."""
    base: Any = {}
    for source, text in (("--arg", arg), ("--arg-file", arg_file_text)):
        if text is None:
            continue
        try:
            base = json.loads(text)
        except ValueError as error:
            raise CliError(f"{source} is not JSON: {error}", common.EXIT_USAGE) from error
        if not isinstance(base, dict):
            raise CliError(f"{source} must be a JSON object", common.EXIT_USAGE)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CliError(f"{pair!r}: expected KEY=VALUE", common.EXIT_USAGE)
        base[key] = _value(raw)
    return dict(base)


def _value(raw: str) -> Any:
    """JSON when ``raw`` parses as JSON, else the string itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _read_input(path: str) -> str:
    """A file's text (``-``: standard input), at most :data:`MAX_INPUT_BYTES`."""
    return common.read_bounded(path, MAX_INPUT_BYTES).decode("utf-8", "replace")


async def _call(api: DaemonApi, args: argparse.Namespace) -> int:
    if args.arg is not None and args.arg_file is not None:
        raise CliError("--arg and --arg-file: one of them", common.EXIT_USAGE)
    text = await asyncio.to_thread(_read_input, args.arg_file) if args.arg_file else None
    arguments = arguments_of(args.arg, text, args.pairs)
    answer = await api.call(args.name, arguments, key=args.key, wait=not args.no_wait, timeout=args.timeout)
    if is_job_ack(answer) and args.no_wait:
        _print(args, answer, lambda a: f"job {common.printable(a['job_id'])} submitted ({args.name})\n")
        return 0
    _print(args, answer, result_text)
    return 0


def result_text(result: Any) -> str:
    """A result for people: strings as they are, anything else as indented JSON."""
    if isinstance(result, str):
        return f"{common.printable(result)}\n"
    return json.dumps(result, indent=2, sort_keys=True, default=str) + "\n"


# --- jobs ----------------------------------------------------------------------------------------


async def _jobs(api: DaemonApi, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 1000:
        raise CliError("--limit: 1 to 1000", common.EXIT_USAGE)
    rows = await api.get("/v1/jobs", {"state": args.state, "limit": args.limit})
    _print(args, rows, jobs_text)
    return 0


def jobs_text(rows: Any, now: float | None = None) -> str:
    jobs = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    if not jobs:
        return "no jobs\n"
    now = time.time() if now is None else now
    table = [("ID", "STATE", "OPERATION", "AGE", "PRINCIPAL")]
    for job in jobs:
        job = common.printable(job)
        table.append(
            (
                str(job.get("id")),
                str(job.get("state")),
                str(job.get("operation")),
                ago(job.get("created"), now),
                str(job.get("principal") or ""),
            )
        )
    return columns(table)


async def _job(api: DaemonApi, args: argparse.Namespace) -> int:
    _print(args, await api.job(args.job_id), job_text)
    return 0


def job_text(job: Any, now: float | None = None) -> str:
    if not isinstance(job, dict):
        return f"{common.printable(str(job))}\n"
    now = time.time() if now is None else now
    raw_error, raw_result = job.get("error"), job.get("result")
    job = common.printable(job)
    lines = [
        f"job:        {job.get('id')}",
        f"operation:  {job.get('operation')}",
        f"state:      {job.get('state')}",
        f"principal:  {job.get('principal')}",
        f"created:    {ago(job.get('created'), now)} ago",
    ]
    prompt = job.get("prompt")
    if isinstance(prompt, dict):
        lines.append(f"prompt:     {prompt.get('prompt_id')} ({prompt.get('kind')}): {prompt.get('message')}")
    if raw_error:
        lines.append(f"error:      {describe_error(raw_error, str(job.get('state')))}")
    if raw_result is not None:
        lines.append("result:")
        lines.extend("  " + line for line in result_text(raw_result).splitlines())
    return "\n".join(lines) + "\n"


async def _cancel(api: DaemonApi, args: argparse.Namespace) -> int:
    job = await api.delete("/v1/jobs/" + quote(args.job_id, safe=""))
    _print(args, job, lambda j: f"job {common.printable(args.job_id)}: cancel asked ({_state(j)})\n")
    return 0


def _state(job: Any) -> str:
    return str(common.printable(job.get("state"))) if isinstance(job, dict) else "?"


async def _answer(api: DaemonApi, args: argparse.Namespace) -> int:
    if args.value != "-":
        # NB: a secret on argv is in `ps` for every user of the machine, and in the shell's history
        prompt = (await api.job(args.job_id)).get("prompt")
        if isinstance(prompt, dict) and prompt.get("kind") == "secret":
            raise CliError(
                f"prompt {common.printable(args.prompt_id)} asks for a secret: its answer is read only "
                "from standard input (VALUE -), never from the command line, where ps and the shell's "
                "history keep it",
                common.EXIT_USAGE,
            )
    raw = (await asyncio.to_thread(_read_input, "-")).rstrip("\n") if args.value == "-" else args.value
    body = {"prompt_id": args.prompt_id, "value": _value(raw)}
    answer = await api.post(f"/v1/jobs/{quote(args.job_id, safe='')}/input", body)
    _print(
        args,
        answer if answer is not None else {},
        lambda _a: f"answered {common.printable(args.prompt_id)}\n",
    )
    return 0


# --- events --------------------------------------------------------------------------------------


async def _events(api: DaemonApi, args: argparse.Namespace) -> int:
    job = await api.job(args.job_id)
    last = int(job.get("seq") or 0)
    cursor = args.after
    if not args.follow and cursor >= last:
        return 0
    path = f"/v1/jobs/{quote(args.job_id, safe='')}/events"
    for _attempt in range(RECONNECTS + 1):
        ended = False
        async for event in api.stream(path, after=cursor):
            if isinstance(event.get("id"), int):
                cursor = event["id"]
            _emit_event(args.output, event)
            if event.get("type") == "gap":
                ended = True
                break
            if not args.follow and cursor >= last:
                return 0
        else:
            ended = True
        job = await api.job(args.job_id)
        if ended or job.get("state") in TERMINAL or not args.follow:
            break
    if args.follow and job.get("state") in TERMINAL and job.get("state") != "succeeded":
        raise job_refusal(job)
    return 0


def _emit_event(output: str, event: Mapping[str, Any]) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(event, sort_keys=True, default=str) + "\n")
    elif output == "yaml":
        import yaml

        sys.stdout.write("---\n" + yaml.safe_dump(dict(event), sort_keys=True))
    else:
        sys.stdout.write(event_text(event))
    sys.stdout.flush()


def event_text(event: Mapping[str, Any]) -> str:
    """``  7 feedback   startup: pulling`` (the event's number, type and what it says)."""
    kind = str(event.get("type", ""))
    rest = {k: v for k, v in event.items() if k not in ("id", "type", "time")}
    if kind == "state":
        what = str(rest.get("state", ""))
    elif isinstance(rest.get("message"), str):
        what = str(rest["message"])
    elif kind == "error":
        what = describe_error(rest, "failed")
    else:
        what = json.dumps(rest, sort_keys=True, default=str)
    number = str(common.printable(str(event.get("id", ""))))[:20]
    kind = _cut(str(common.printable(kind)), 40)
    return f"{number:>4} {kind:<9} {_cut(str(common.printable(what)), 160)}\n"


# --- text helpers --------------------------------------------------------------------------------


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def columns(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns (two spaces between), the last one unpadded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip() + "\n"
        for row in rows
    )


def ago(epoch: Any, now: float) -> str:
    """``5s``, ``3m``, ``2h``, ``4d`` since ``epoch`` seconds (``?`` when not a number)."""
    if not isinstance(epoch, int | float) or isinstance(epoch, bool):
        return "?"
    try:
        seconds = max(0, int(now - epoch))
    except (OverflowError, ValueError):  # NB: a server's Infinity, NaN or 400-digit number
        return "?"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
