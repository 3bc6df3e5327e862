"""``sparkrun-k8s gateway ...``: run the inference gateway (see ``docs/gateway.md``).

Every argument after ``gateway`` goes to the gateway's own command line
(``python -m sparkrun_operator.gateway``): ``--routes FILE`` for a static routing file, or
``--kubernetes`` to route from InferenceWorkloads on the cluster.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gateway",
        help="run the OpenAI/Anthropic/Ollama inference gateway",
        description=__doc__,
        add_help=False,
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="gateway arguments (--help for the list)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_argv(list(args.args))


def run_argv(argv: list[str]) -> int:
    """Run the gateway with its own command line ``argv``."""
    from sparkrun_operator.gateway.server import main

    return main(argv)
