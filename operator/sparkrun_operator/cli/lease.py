"""``sparkrun-k8s lease claim|renew|release|list|hold``: ownership leases of ephemeral workloads
(``spec.lease``, ADR 0049), on the same code as the daemon API's ``workloads.lease|release|leases``
(``ops/ownership.py``).

The verbs act with the user's own kubeconfig rights (Leases in the workload's namespace: the
chart's ``sparkrun-tenant`` role grants them) and write as field manager ``sparkrun-k8s``. The
holder is the identity the apiserver authenticated (a SelfSubjectReview), with ``#SESSION`` when
``--session`` is given, never a name the user picks. ``hold`` claims, then renews every third of
the TTL until Ctrl-C (exit 130; a renew that fails transiently, the apiserver unreachable or
failing, is retried within seconds, never the end) and leaves the lease to lapse, as a client
that exits does (with ``deleteOnExit`` the operator then deletes the workload). Exit codes are
``cli/common.py``'s: 4 when the workload does not exist, 5 when the claim is refused
(``lease_held``: another live holder; no ``spec.lease``; a squatted Lease name).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from sparkrun_operator.api.ownership import HELD, check_session, lease_name
from sparkrun_operator.cli import common
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import LEASES
from sparkrun_operator.ops import kube, ownership, rollout
from sparkrun_operator.ops.errors import DaemonError, Invalid, NotFound
from sparkrun_operator.render import keys

_SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
#: Control characters a terminal would act on, shown as ``?`` in text output (tenants' text).
_CONTROLS = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0)], "?")


def _printable(value: Any) -> str:
    return str(value).translate(_CONTROLS)


def _guard(work: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[int]]:
    """The ops layer's refusals as exit codes: not found 4, a bad argument 2, refused 5."""

    async def guarded() -> int:
        try:
            return await work()
        except NotFound as error:
            raise common.CliError(error.detail, common.EXIT_NOT_FOUND) from error
        except Invalid as error:
            raise common.CliError(error.detail, common.EXIT_USAGE) from error
        except DaemonError as error:
            raise common.CliError(error.detail, common.EXIT_REFUSED) from error

    return guarded


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lease",
        help="ownership leases of ephemeral workloads: claim, renew, release, list, hold",
        description=__doc__,
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
            sub.add_argument("name", metavar="NAME", help="the InferenceWorkload")
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

    return common.run_async(_guard(work))


def _dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


async def _claim_once(rest: Kube, namespace: str, name: str, session: str | None) -> Any:
    workload = await rollout.find_workload(rest, namespace, name)
    who = await principal(rest)
    now = dt.datetime.now(dt.UTC)
    return await ownership.claim(rest, workload, principal=who, session=session, ttl_seconds=None, now=now)


def _claim(args: argparse.Namespace) -> int:
    return _run(args, lambda rest, ns: _with_dump(_claim_once(rest, ns, args.name, args.session)))


async def _with_dump(result: Awaitable[Any]) -> dict[str, Any]:
    return _dump(await result)


def _release(args: argparse.Namespace) -> int:
    async def act(rest: Kube, namespace: str) -> dict[str, Any]:
        workload = await rollout.find_workload(rest, namespace, args.name)
        who = await principal(rest)
        now = dt.datetime.now(dt.UTC)
        return _dump(await ownership.release(rest, workload, principal=who, session=args.session, now=now))

    return _run(args, act)


def _list(args: argparse.Namespace) -> int:
    owned = None if args.owned is None else args.owned == "true"

    async def act(rest: Kube, namespace: str) -> dict[str, Any]:
        workloads = await rest.list(kube.WORKLOADS, namespace)
        found = await rest.list(LEASES, namespace, label_selector=keys.LABEL_OWNERSHIP)
        by_name = {str((x.get("metadata") or {}).get("name") or ""): x for x in found}
        entries = []
        for workload in sorted(workloads, key=lambda w: str(w["metadata"]["name"])):
            if ownership.spec_of(workload) is None:
                continue
            entry = ownership.info(workload, by_name.get(lease_name(str(workload["metadata"]["name"]))))
            if owned is None or (entry.state == HELD) == owned:
                entries.append(_dump(entry))
        return {"leases": entries}

    return _run(args, act)


#: Seconds between the tries of a renew that failed transiently (at most; a sixth of the TTL).
RETRY_SECONDS = 5.0


def _transient(error: errors.KubeError) -> bool:
    """A failure a retry may get past: the apiserver unreachable or failing (5xx, transport)."""
    return isinstance(error, errors.KubeUnavailable) or error.status == 0 or error.status >= 500


def _hold(args: argparse.Namespace) -> int:
    async def work() -> int:
        namespace = common.namespace_of(args)
        rest = await common.connect(args)
        try:
            wait = RETRY_SECONDS
            while True:
                try:
                    result = await _claim_once(rest, namespace, args.name, args.session)
                except errors.KubeError as error:
                    if not _transient(error):
                        raise
                    # NB: two more renews fit before the lease could lapse: one failure must not
                    # end the hold (with deleteOnExit the workload would go a TTL later)
                    sys.stderr.write(f"renew failed, retrying in {wait:.0f}s: {error}\n")
                    await asyncio.sleep(wait)
                    continue
                common.emit(_dump(result), args.output, _renewed)
                wait = min(RETRY_SECONDS, max(1.0, result.ttl_seconds / 6))
                await asyncio.sleep(max(1.0, result.ttl_seconds / 3))
        finally:
            await rest.close()

    return common.run_async(_guard(work))
