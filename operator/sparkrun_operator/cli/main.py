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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that command is fully registered (others are stubs)."""
    parser = argparse.ArgumentParser(prog="sparkrun-k8s", description="Run vLLM inference on Kubernetes.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, summary) in COMMANDS.items():
        if only is None or name == only:
            _load(name).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _completion_parser() -> argparse.ArgumentParser:
    """The parser for completing ``COMP_LINE``: its command in full, the rest as names."""
    words = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT") or 0) or None].split()[1:]
    command = next((w for w in words if w in COMMANDS), "")
    try:
        return build_parser(only=command)
    except MissingTestbed:
        return build_parser(only="")


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
