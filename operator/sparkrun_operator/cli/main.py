"""The ``sparkrun-k8s`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sparkrun_operator.cli import demo, gateway, shim, testbed, validate
from sparkrun_operator.cli import operator as operator_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkrun-k8s", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    testbed.register(subparsers)
    validate.register(subparsers)
    operator_cli.register(subparsers)
    shim.register(subparsers)
    gateway.register(subparsers)
    demo.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["gateway"]:
        # NB: the gateway owns its whole command line (options included), which argparse's
        # REMAINDER cannot pass through when the first one starts with a dash.
        return gateway.run_argv(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
