"""``sparkrun-k8s lease claim|renew|release|list|hold``: ownership leases of ephemeral workloads
(``spec.lease``, ADR 0049), on the same code as the daemon API's ``workloads.lease|release|leases``
(``ops/ownership.py``).

The verbs act with the user's own kubeconfig rights (Leases in the workload's namespace: the
chart's ``sparkrun-tenant`` role grants them) and write as field manager ``sparkrun-k8s``. The
holder is the identity the apiserver authenticated (a SelfSubjectReview), with ``#SESSION`` when
``--session`` is given, never a name the user picks. ``hold`` claims, then renews every third of
the TTL until Ctrl-C (exit 130; a renew that fails transiently, the apiserver unreachable or
failing, is retried within seconds, never the end) and leaves the lease to lapse, as a client
that exits does (with ``deleteOnExit`` the operator then deletes the workload). Ctrl-C (SIGINT)
ends it at once, a renew in flight abandoned, even when it was started with SIGINT ignored (what
``hold &`` in a shell script inherits). Exit codes are
``cli/common.py``'s: 4 when the workload does not exist, 5 when the claim is refused
(``lease_held``: another live holder; no ``spec.lease``; a squatted Lease name).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from sparkrun_operator.api.ownership import check_session
from sparkrun_operator.cli import common, complete
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops import ownership, rollout

_SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _printable(value: Any) -> str:
    return str(common.printable(value))


EPILOG = """\
examples:
  sparkrun-k8s lease claim qwen --session ci-1234 -n team-a
  sparkrun-k8s lease renew qwen --session ci-1234
  sparkrun-k8s lease hold qwen --session ci-1234 &      # renew until killed
  sparkrun-k8s lease list -n team-a -o json

exit codes:
  0  done
  2  usage
  3  the cluster cannot be reached
  4  the workload does not exist
  5  refused (another live holder, no spec.lease, forbidden)
  130 interrupted (hold: Ctrl-C)
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lease",
        help="ownership leases of ephemeral workloads: claim, renew, release, list, hold",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, helptext, func in (
        (
            "claim",
            "claim the workload's lease as yourself (refused while another live holder has it)",
            _claim,
        ),
        ("renew", "renew your claim (the same compare-and-swap as claim)", _claim),
        ("release", "drop your claim (destroys nothing; anyone may claim it at once)", _release),
        ("list", "the ephemeral workloads of the namespace, their owner and state", _list),
        ("hold", "claim, then renew every ttl/3 until Ctrl-C (exit 130)", _hold),
    ):
        sub = verbs.add_parser(verb, help=helptext, description=helptext)
        if verb != "list":
            name = sub.add_argument("name", metavar="NAME", help="the InferenceWorkload")
            name.completer = complete.workload_names
            sub.add_argument("--session", type=_session, default=None, help="a client session id")
        else:
            sub.add_argument(
                "--owned",
                choices=("true", "false"),
                default=None,
                help="false: orphans (no live owner); true: owned ones",
            )
        common.add_cluster_options(sub)
        common.add_output_option(sub)
        sub.set_defaults(func=func)


def _session(value: str) -> str:
    try:
        checked = check_session(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    assert checked is not None
    return checked


async def principal(rest: Kube) -> str:
    """Who the apiserver says this kubeconfig is (a SelfSubjectReview)."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = await rest.request("POST", _SELF_REVIEW, body=review)
    name = str(((answer.get("status") or {}).get("userInfo") or {}).get("username") or "")
    if not name:
        raise common.CliError(
            "the apiserver did not say who you are (SelfSubjectReview)", common.EXIT_REFUSED
        )
    return name


def _text(data: Any) -> str:
    entries = data.get("leases", [data]) if isinstance(data, dict) else []
    if not entries:
        return "no ephemeral workloads\n"
    rows = [("WORKLOAD", "STATE", "OWNER", "TTL", "ON EXIT", "RENEWED")]
    for e in entries:
        on_exit = "delete" if e.get("delete_on_exit") else "orphan"
        rows.append(
            (
                _printable(e.get("workload", "")),
                _printable(e.get("state", "")),
                _printable(e.get("owner") or "-"),
                f"{e.get('ttl_seconds', '')}s",
                on_exit,
                _printable(e.get("renewed") or "-"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


def _renewed(data: Any) -> str:
    workload, owner = _printable(data.get("workload")), _printable(data.get("owner"))
    return f"{workload}: held by {owner}, renewed {_printable(data.get('renewed'))}\n"


def _run(args: argparse.Namespace, act: Callable[[Kube, str], Awaitable[Any]]) -> int:
    async def work() -> int:
        namespace = common.namespace_of(args)
        rest = await common.connect(args)
        try:
            data = await act(rest, namespace)
        finally:
            await rest.close()
        common.emit(data, args.output, _text)
        return common.EXIT_OK

    return common.run_async(common.guard(work))


async def _claim_once(rest: Kube, namespace: str, name: str, session: str | None, who: str) -> Any:
    """One claim (or renew) of ``name``'s lease for ``who``: the workload is read each time (its
    ``spec.lease``, UID and the operator's verdict decide)."""
    workload = await rollout.find_workload(rest, namespace, name)
    now = dt.datetime.now(dt.UTC)
    return await ownership.claim(rest, workload, principal=who, session=session, ttl_seconds=None, now=now)


def _claim(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> dict[str, Any]:
        who = await principal(rest)
        return common.dump(await _claim_once(rest, namespace, args.name, args.session, who))

    return _run(args, act)


def _release(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> dict[str, Any]:
        workload = await rollout.find_workload(rest, namespace, args.name)
        who = await principal(rest)
        now = dt.datetime.now(dt.UTC)
        released = await ownership.release(rest, workload, principal=who, session=args.session, now=now)
        return common.dump(released)

    return _run(args, act)


def _list(args: argparse.Namespace) -> int:
    owned = None if args.owned is None else args.owned == "true"

    async def act(rest: Kube, namespace: str) -> dict[str, Any]:
        return common.dump(await ownership.listing(rest, namespace, owned))

    return _run(args, act)


#: Seconds between the tries of a renew that failed transiently (at most; a sixth of the TTL).
RETRY_SECONDS = 5.0


def _transient(error: errors.KubeError) -> bool:
    """A failure a retry may get past: the apiserver unreachable or failing (5xx, transport)."""
    return isinstance(error, errors.KubeUnavailable) or error.status == 0 or error.status >= 500


def _interruptible() -> None:
    """Let SIGINT end ``hold`` even when the process started with it ignored.

    A command a non-interactive shell starts in the background (``hold &`` in a script, a CI
    step's background job) inherits SIGINT ignored; Python keeps it so, and ``asyncio.run``
    then installs no handler: ``kill -INT`` would never end the hold (and, with
    ``deleteOnExit``, never let the workload go). ``hold`` runs until interrupted, so it takes
    SIGINT back (as Go's ``signal.Notify`` does for ``kubectl port-forward``)."""
    if threading.current_thread() is not threading.main_thread():
        return  # NB: signal handlers belong to the main thread (a caller embedding the CLI)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _hold(args: argparse.Namespace) -> int:
    async def work() -> int:
        namespace = common.namespace_of(args)
        rest = await common.connect(args)
        try:
            who = await principal(rest)  # NB: once: who holds does not change between renews
            wait = RETRY_SECONDS
            while True:
                try:
                    result = await _claim_once(rest, namespace, args.name, args.session, who)
                except errors.KubeError as error:
                    if not _transient(error):
                        raise
                    # NB: two more renews fit before the lease could lapse: one failure must not
                    # end the hold (with deleteOnExit the workload would go a TTL later)
                    sys.stderr.write(f"renew failed, retrying in {wait:.0f}s: {error}\n")
                    await asyncio.sleep(wait)
                    continue
                common.emit(common.dump(result), args.output, _renewed)
                wait = min(RETRY_SECONDS, max(1.0, result.ttl_seconds / 6))
                await asyncio.sleep(max(1.0, result.ttl_seconds / 3))
        finally:
            await rest.close()

    _interruptible()
    return common.run_async(common.guard(work))
