"""What every ``sparkrun-k8s`` verb shares (ADR 0047): cluster options, ``--output``, exit
codes, and running a coroutine on the one Kubernetes client.

A verb module has ``register(subparsers)`` and does its work in ``async def`` functions run by
:func:`run_async` (ADR 0014: ``asyncio.run`` at the edge, the async client everywhere). It writes
as field manager :data:`FIELD_MANAGER`. Exit codes are documented in ``docs/cli.md``:

==== ====================================================================================
0    done
1    it ran and the answer is no (``upgrade --check`` found objects the new chart rejects)
2    usage: bad arguments (argparse), a file that cannot be read
3    the cluster cannot be reached, or the credentials are refused (401)
4    an object named does not exist
5    the cluster refused the change (403 forbidden, 409 conflict, 422 invalid)
130  interrupted (Ctrl-C)
==== ====================================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TextIO

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.errors import DaemonError, Invalid, NotFound

EXIT_OK: Final = 0
EXIT_NO: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_NOT_FOUND: Final = 4
EXIT_REFUSED: Final = 5
EXIT_INTERRUPTED: Final = 130

#: The field manager of every write the CLI makes.
FIELD_MANAGER: Final = "sparkrun-k8s"

#: Unicode's bidirectional formatting characters: they reorder the rest of a line on screen.
_BIDI: Final = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
#: Control characters (C0, DEL, C1) a terminal would act on, and :data:`_BIDI`: shown as ``?`` in
#: text output (values come from tenants' specs, Recipes and Leases; JSON and YAML output escape
#: C0 and C1 instead).
_CONTROLS: Final = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0), *_BIDI], "?")

Output = Literal["text", "json", "yaml"]
OUTPUTS: Final = ("text", "json", "yaml")


class CliError(Exception):
    """A failure the CLI reports in one line and exits with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def add_cluster_options(parser: argparse.ArgumentParser, *, namespaced: bool = True) -> None:
    """``--kubeconfig``, ``--context`` and (``namespaced``) ``-n/--namespace``."""
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    if namespaced:
        parser.add_argument(
            "-n", "--namespace", default=None, help="namespace (default: the context's, else 'default')"
        )


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """``-o/--output text|json|yaml``."""
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default="text", help="text for people, json or yaml for scripts"
    )


def emit(data: Any, output: str, text: Callable[[Any], str], *, stream: TextIO | None = None) -> None:
    """Print ``data`` as ``output``: JSON and YAML as is (keys sorted), text through ``text``."""
    out = stream or sys.stdout
    if output == "json":
        out.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    elif output == "yaml":
        import yaml

        out.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=True))
    else:
        out.write(text(data))


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (``default`` when it names none or cannot be read)."""
    from kubernetes_asyncio.config import kube_config

    try:
        _contexts, active = kube_config.list_kube_config_contexts(config_file=kubeconfig)
        contexts = {c["name"]: c for c in _contexts}
        chosen = contexts.get(context) if context else active
    except Exception:  # no kubeconfig: the connect error says it better
        return "default"
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def namespace_of(args: argparse.Namespace) -> str:
    """``-n`` when given, else the kubeconfig context's namespace."""
    given = getattr(args, "namespace", None)
    return str(given) if given else current_namespace(args.kubeconfig, args.context)


async def connect(args: argparse.Namespace) -> Kube:
    """The one Kubernetes client for ``args`` (kubeconfig and context), writing as the CLI."""
    try:
        return await Kube.connect(
            field_manager=FIELD_MANAGER, kubeconfig=args.kubeconfig, context=args.context
        )
    except errors.KubeError as error:
        raise CliError(str(error), EXIT_UNREACHABLE) from error


def exit_code_of(error: errors.KubeError) -> int:
    """The exit code for an apiserver error."""
    if isinstance(error, errors.KubeNotFound):
        return EXIT_NOT_FOUND
    refused = errors.KubeConflict | errors.KubeInvalid | errors.KubeForbidden | errors.KubeBadRequest
    if isinstance(error, refused):
        return EXIT_REFUSED
    if error.status == 401 or isinstance(error, errors.KubeUnavailable) or error.status == 0:
        return EXIT_UNREACHABLE
    return EXIT_REFUSED


def printable(value: Any) -> Any:
    """``value`` with every string's control characters replaced (for the text output)."""
    if isinstance(value, str):
        return value.translate(_CONTROLS)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def dump(model: Any) -> dict[str, Any]:
    """A result model as the verbs print it (the daemon API's JSON: aliases, no nulls)."""
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def guard(work: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[int]]:
    """The ops layer's refusals (``ops/errors.py``) as exit codes: not found 4, a bad argument 2,
    refused 5."""

    async def guarded() -> int:
        try:
            return await work()
        except NotFound as error:
            raise CliError(error.detail, EXIT_NOT_FOUND) from error
        except Invalid as error:
            raise CliError(error.detail, EXIT_USAGE) from error
        except DaemonError as error:
            raise CliError(error.detail, EXIT_REFUSED) from error

    return guarded


def run_async(work: Callable[[], Awaitable[int]]) -> int:
    """Run ``work()`` with ``asyncio.run``; a :class:`CliError` or apiserver error is one line on
    stderr and its exit code, Ctrl-C is 130, also when the command was started with SIGINT
    ignored (what ``cmd &`` in a script, or ``nohup``, hands down): a verb that waits is always
    ended by Ctrl-C, as ``lease hold`` is."""
    hear_ctrl_c()
    try:
        return asyncio.run(_guarded(work))
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except CliError as error:  # NB: messages quote servers and tenants: printable, as all text
        sys.stderr.write(f"error: {printable(str(error))}\n")
        return error.code
    except errors.KubeError as error:
        sys.stderr.write(f"error: {printable(str(error))}\n")
        return exit_code_of(error)


def hear_ctrl_c() -> None:
    """SIGINT raises KeyboardInterrupt again when this process inherited it ignored (Python then
    leaves it ignored); only from the main thread, where handlers can be set."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def read_bounded(path: str, limit: int, *, what: str | None = None) -> bytes:
    """The file at ``path`` (``-``: standard input), at most ``limit`` bytes; exit 2 (usage)
    when it cannot be read or holds more. ``what`` names it in the message (default: ``path``).
    Blocking: call it through ``asyncio.to_thread`` on the loop."""
    label = what or path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                raw = handle.read(limit + 1)
    except OSError as error:
        raise CliError(f"{label}: {error.strerror}", EXIT_USAGE) from error
    if len(raw) > limit:
        raise CliError(f"{label}: larger than {limit} bytes", EXIT_USAGE)
    return raw


def run_with_kube(args: argparse.Namespace, act: Callable[[Kube, str], Awaitable[int]]) -> int:
    """A verb's whole run: ``act(kube, namespace)`` with the one client for ``args`` (closed
    after) and the namespace on the line, its refusals as exit codes (:func:`guard`,
    :func:`run_async`)."""

    async def work() -> int:
        namespace = namespace_of(args)
        kube = await connect(args)
        try:
            return await act(kube, namespace)
        finally:
            await kube.close()

    return run_async(guard(work))


async def _guarded(work: Callable[[], Awaitable[int]]) -> int:
    return await work()
