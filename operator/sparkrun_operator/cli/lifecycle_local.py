"""``stop``, ``sleep`` and ``wake`` in this process: the daemon operations' own executors
(``ops/executors/workloads/lifecycle.py``) run with the user's kubeconfig rights on the workload
in ``-n`` (else the context's namespace), as ``rollout`` and ``lease`` run the ops layer's code
(ADR 0047). See :mod:`~sparkrun_operator.cli.lifecycle` for why the manager and the recipe the
executor checks are the workload's own.

The executor's progress (``ctx.feedback``) is printed on stderr for ``-o text``, one line each
(phase changes; startup stages the workload had not reached when the command began). The
executor's client notes each write that returned (:class:`Writes`), so ``--no-wait`` returns
after the first (stop: the delete; sleep: the state; wake: the state, or the replicas back from
the idle zero) and ``--timeout`` can say whether the change was made. An executor's typed
refusal is exit 1 with its type, as the daemon job's would be (``Conflict``: no sleep mode,
nothing to wake); the apiserver's refusals keep their codes (403: exit 5).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from sparkrun_operator.cli import common
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops import errors as ops_errors

Executor = Callable[[Any, dict[str, Any]], Awaitable[Any]]


class _Written(Exception):
    """``--no-wait``: the change is made; the executor's wait is not wanted."""


def _executor(operation: str) -> Executor:
    from sparkrun_operator.ops.executors.workloads import lifecycle

    found: dict[str, Executor] = {
        "workloads.stop": lifecycle.stop,
        "workloads.sleep": lifecycle.sleep,
        "workloads.wake": lifecycle.wake,
    }
    return found[operation]


def refusal(error: ops_errors.DaemonError) -> CliError:
    """The exit code of an executor's typed error (module docstring)."""
    if isinstance(error, ops_errors.NotFound):
        return CliError(error.detail, common.EXIT_NOT_FOUND)
    if isinstance(error, ops_errors.Invalid):
        return CliError(error.detail, common.EXIT_USAGE)
    if isinstance(error, ops_errors.OperationTimeout):
        return CliError(f"{error.detail} (it goes on)", common.EXIT_UNREACHABLE)
    if isinstance(error, ops_errors.Forbidden | ops_errors.PreconditionFailed):
        return CliError(f"{error.error_type}: {error.detail}", common.EXIT_REFUSED)
    return CliError(f"{error.error_type}: {error.detail}", common.EXIT_NO)


class Progress:
    """The executor's feedback events, printed (``show``) as progress lines."""

    def __init__(self, known_stages: set[str], *, show: bool) -> None:
        self.known = known_stages
        self.show = show
        self.started = time.monotonic()

    async def __call__(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind != "feedback" or not self.show:
            return
        if data.get("activity") == "startup" and data.get("stage") in self.known:
            return  # NB: a stage reached before this command (a wake replays the whole timeline)
        elapsed = time.monotonic() - self.started
        sys.stderr.write(f"  {elapsed:5.1f}s  {common.printable(str(data.get('message', '')))}\n")


class Writes:
    """The executor's client: the one :class:`~sparkrun_operator.k8s.client.Kube`, noting each
    write that returned (``written``); with ``detach`` (``--no-wait``) the first one ends the
    executor (:class:`_Written`), its wait not wanted."""

    def __init__(self, rest: Kube, *, detach: bool) -> None:
        self._rest = rest
        self.detach = detach
        self.written = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rest, name)

    def _wrote(self) -> None:
        self.written = True
        if self.detach:
            raise _Written

    async def merge_patch(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self._rest.merge_patch(*args, **kwargs)
        self._wrote()
        return answer

    async def delete(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self._rest.delete(*args, **kwargs)
        self._wrote()
        return answer

    async def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        answer = await self._rest.request(method, *args, **kwargs)
        if method.upper() not in ("GET", "HEAD"):
            self._wrote()
        return answer


def arguments_of(workload: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The executor's arguments: the workload by name, pinned to the recipe and revision it
    serves now (the executor reads it again and refuses a change made meanwhile)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    return {
        "workload_id": name,
        "recipe": (spec.get("recipe") or {}).get("name"),
        "recipe_revision": status.get("recipeRevision") or "",
    }


async def act(operation: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``operation``'s executor on NAME; the report ``cli/lifecycle.py`` prints."""
    namespace = common.namespace_of(args)
    rest = await common.connect(args)
    try:
        return await _act(rest, namespace, operation, args)
    except ops_errors.DaemonError as error:
        raise refusal(error) from error
    finally:
        await rest.close()


async def _act(rest: Kube, namespace: str, operation: str, args: argparse.Namespace) -> dict[str, Any]:
    from sparkrun_operator.ops import rollout
    from sparkrun_operator.ops.invocation import OperationContext
    from sparkrun_operator.ops.settings import Settings

    workload = await rollout.find_workload(rest, namespace, args.name)
    metadata, status = workload.get("metadata") or {}, workload.get("status") or {}
    name = str(metadata.get("name"))
    known = {str(event.get("stage")) for event in status.get("startup") or ()}
    progress = Progress(known, show=args.output == "text")
    writes = Writes(rest, detach=getattr(args, "no_wait", False))
    ctx = OperationContext(
        rest=cast(Kube, writes),  # NB: the same client, its writes noted
        settings=Settings(namespace=namespace),
        principal=common.FIELD_MANAGER,
        manager=str((workload.get("spec") or {}).get("manager") or ""),
        operation=operation,
        emit=progress,
    )
    report: dict[str, Any] = {
        "workload": name,
        "namespace": namespace,
        "workload_id": status.get("workloadId"),
        "operation": operation,
    }
    try:
        async with asyncio.timeout(args.timeout):
            result = await _executor(operation)(ctx, arguments_of(workload, name))
    except _Written:
        return {**report, "state": "requested"}
    except TimeoutError:
        raise CliError(
            f"{operation} {name}: not done after {args.timeout:g} s; {_made(writes)} "
            f"(sparkrun-k8s status -n {namespace})",
            common.EXIT_UNREACHABLE,
        ) from None
    except asyncio.CancelledError:  # NB: Ctrl-C; run_async then says "interrupted" (exit 130)
        sys.stderr.write(f"{operation} {name}: {_made(writes)} (sparkrun-k8s status -n {namespace})\n")
        raise
    return {
        **report,
        "state": result.get("state") if isinstance(result, dict) else None,
        "seconds": round(time.monotonic() - progress.started, 1),
        "result": result,
    }


def _made(writes: Writes) -> str:
    return "the change is made and goes on" if writes.written else "the change is not made"
