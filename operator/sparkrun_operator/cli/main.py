# PYTHON_ARGCOMPLETE_OK (argcomplete's shell hook completes console scripts whose module says so)
"""The ``sparkrun-k8s`` command.

Each subcommand lives in its own module with a ``register(subparsers)`` function. Only the
module of the command being run is imported (the others pull in Kubernetes clients, kopf or
uvicorn, which take seconds to import), so ``sparkrun-k8s --help`` and every command start fast.

``demo`` and ``testbed`` need the testbed, a distribution of its own (``testbed/`` in the checkout,
import package ``sparkrun_testbed``) that the product's wheel and image do not contain: without it
they say what to install and exit 2. This lazy loading is the only way the product reaches the
testbed (import-linter contract in ``pyproject.toml``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: command -> (module, one-line help shown by ``sparkrun-k8s --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("sparkrun_operator.cli.demo", "run the main flow end to end on a local testbed"),
    "testbed": ("sparkrun_testbed.cli", "run a local Kubernetes control plane with fake GPU nodes"),
    "operator": ("sparkrun_operator.cli.operator", "run the operator (kopf controllers)"),
    "shim": ("sparkrun_operator.cli.shim", "the daemon-compatible API (serve it, or call it)"),
    "gateway": ("sparkrun_operator.cli.gateway", "run the OpenAI/Anthropic/Ollama inference gateway"),
    "validate": ("sparkrun_operator.cli.validate", "check sparkrun.dev manifests offline"),
    "upgrade": ("sparkrun_operator.cli.upgrade", "check that a new chart's CRDs accept every stored object"),
    "rollout": ("sparkrun_operator.cli.rollout", "a workload's revisions: history, undo, apply drift, unpin"),
    "lease": ("sparkrun_operator.cli.lease", "ownership leases of ephemeral workloads: claim, renew, hold"),
    "status": ("sparkrun_operator.cli.status", "workloads, clusters, caches and benchmarks at a glance"),
    "describe": ("sparkrun_operator.cli.describe", "one object in full: spec, startup, conditions, events"),
    "logs": ("sparkrun_operator.cli.logs", "a workload's logs, every rank, prefixed by replica and role"),
    "run": ("sparkrun_operator.cli.run", "serve a model or recipe and watch it start until Ready"),
    "stop": ("sparkrun_operator.cli.stop", "stop a workload (the daemon API's workloads.stop)"),
    "sleep": ("sparkrun_operator.cli.sleep", "put a workload to sleep (the daemon API's workloads.sleep)"),
    "wake": ("sparkrun_operator.cli.wake", "wake a sleeping workload (the daemon API's workloads.wake)"),
    "cache": ("sparkrun_operator.cli.cache", "model caches: ls, pin, prune, inspect"),
    "bench": ("sparkrun_operator.cli.bench", "benchmarks: run, show, compare"),
    "daemon": ("sparkrun_operator.cli.daemon", "call the daemon API (through the apiserver, or --url)"),
    "agent": (
        "sparkrun_operator.cli.agent",
        "run the GPU telemetry agent (NVML samples, metrics, node labels)",
    ),
}

#: the testbed's import package; ``demo`` and ``testbed`` fail without it
TESTBED_PACKAGE = "sparkrun_testbed"
TESTBED_MISSING = (
    "sparkrun-k8s {command}: the testbed is not installed (it is a distribution of its own,\n"
    "sparkrun-testbed, in the testbed/ directory of the sparkrun-operator checkout).\n"
    "Install it there with `make venv`, or `pip install -e ./testbed` in this environment.\n"
)


class MissingTestbed(Exception):
    """A command needs ``sparkrun_testbed``, which is not installed."""

    def __init__(self, command: str) -> None:
        super().__init__(TESTBED_MISSING.format(command=command))
        self.command = command


def _load(command: str) -> ModuleType:
    """The module of ``command``; :class:`MissingTestbed` if it needs the absent testbed."""
    try:
        return importlib.import_module(COMMANDS[command][0])
    except ModuleNotFoundError as error:
        if error.name != TESTBED_PACKAGE:
            raise
        raise MissingTestbed(command) from error


#: ``sparkrun-k8s --help`` lists the commands in these groups (every command of :data:`COMMANDS`
#: in exactly one: tests/unit/test_cli_completion.py).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("start the product", ("demo", "testbed", "operator", "shim", "gateway", "agent")),
    ("look at what runs", ("status", "describe", "logs")),
    ("change what runs", ("run", "stop", "sleep", "wake", "rollout", "lease", "cache", "bench", "daemon")),
    ("check manifests and upgrades", ("validate", "upgrade")),
)

EPILOG = """\
Run `sparkrun-k8s COMMAND --help` for a command's options, examples and exit status.

shell completion (commands, options, workload and cache names):
  eval "$(register-python-argcomplete sparkrun-k8s)"                # bash, zsh
  register-python-argcomplete --shell fish sparkrun-k8s | source    # fish

exit codes (every command):
  0 done, 1 the answer is no, 2 usage, 3 cluster unreachable or credentials refused,
  4 not found, 5 refused by the cluster (forbidden, conflict, invalid), 130 interrupted
"""


def _overview() -> str:
    """The grouped list of commands with their one-line summaries."""
    width = max(map(len, COMMANDS))
    lines = ["Run vLLM inference on Kubernetes: the operator, its daemon API and gateway, and the CLI", ""]
    for title, names in GROUPS:
        lines.append(f"{title}:")
        lines += [f"  {name:<{width}}  {COMMANDS[name][1]}" for name in names if name in COMMANDS]
        lines.append("")
    others = [name for name in COMMANDS if not any(name in names for _title, names in GROUPS)]
    if others:
        lines += ["other commands:", *(f"  {n:<{width}}  {COMMANDS[n][1]}" for n in others), ""]
    return "\n".join(lines).rstrip()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that command is fully registered (others are stubs)."""
    parser = _Parser(
        prog="sparkrun-k8s",
        usage="sparkrun-k8s [-h] COMMAND ...",
        description=_overview(),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # NB: the commands are listed by group in the description; argparse's own flat list of them
    # is suppressed (the choices still parse and complete).
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", help=argparse.SUPPRESS, prog="sparkrun-k8s"
    )
    for name, (_module, summary) in COMMANDS.items():
        if only is None or name == only:
            _load(name).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


class _ManPage(argparse.RawDescriptionHelpFormatter):
    """A verb's help as written (its module docstring), without the docstrings' ````literal````
    marks: help is read by people, not by Sphinx."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(text.replace("``", ""), width, indent)


class _ManPageWrapped(argparse.HelpFormatter):
    """The same for a parser whose text argparse re-wraps."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(text.replace("``", ""), width, indent)


class _Parser(argparse.ArgumentParser):
    """The command's parser: its help formatted by :class:`_ManPage` (or its wrapping twin),
    however a verb's module asked for it. ``add_subparsers`` makes its children of the parent's
    class, so every verb's and sub-verb's parser is one of these."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.formatter_class is argparse.RawDescriptionHelpFormatter:
            self.formatter_class = _ManPage
        elif self.formatter_class is argparse.HelpFormatter:
            self.formatter_class = _ManPageWrapped


def _completion_parser() -> argparse.ArgumentParser:
    """The parser for completing ``COMP_LINE``: its command in full, the rest as names. A
    command whose module cannot be imported (the testbed absent) completes as a name only."""
    words = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT") or 0) or None].split()[1:]
    command = next((w for w in words if w in COMMANDS), "")
    if command == "gateway":
        return _gateway_completion_parser()
    try:
        return build_parser(only=command)
    except (MissingTestbed, ImportError):
        return build_parser(only="")


def _gateway_completion_parser() -> argparse.ArgumentParser:
    """``gateway`` parses its own command line (:func:`main`): complete its own options."""
    from sparkrun_operator.gateway.server import _parser as gateway_parser

    parser = argparse.ArgumentParser(prog="sparkrun-k8s")
    subparsers = parser.add_subparsers(dest="command")
    subparsers.add_parser("gateway", parents=[gateway_parser()], add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if argv[:1] == ["gateway"]:
        # NB: the gateway owns its whole command line (options included), which argparse's
        # REMAINDER cannot pass through when the first one starts with a dash.
        from sparkrun_operator.cli import gateway

        return gateway.run_argv(argv[1:])
    if "_ARGCOMPLETE" in os.environ:
        # NB: argcomplete runs the program once per TAB with the line in the environment, and
        # exits. Only the command on the line is registered fully (the others are names), so a
        # TAB stays fast and works without the testbed.
        import argcomplete

        argcomplete.autocomplete(_completion_parser())
    try:
        parser = build_parser(only=command if command in COMMANDS else "")
    except MissingTestbed as error:
        sys.stderr.write(str(error))
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
