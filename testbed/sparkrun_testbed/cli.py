"""``sparkrun-k8s testbed up|down|status|env``: a local, real Kubernetes control plane.

Each testbed lives in ``<run-root>/<name>`` (default ``.run/testbed/default`` in the checkout),
so ``down``, ``status`` and ``env`` work from any shell. Exit codes: 0 success, 1 failure
(start failed, or ``status`` found a component down), 2 binaries missing or bad usage.

The product's ``sparkrun-k8s`` command line imports this module only when ``testbed`` runs and
calls :func:`register`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkrun_testbed import binaries, kueue_run, plane
from sparkrun_testbed.topology import NodePool, Topology

_DEFAULT_NAME = "default"
_EPILOG = """\
examples:
  sparkrun-k8s testbed up                  # then: eval "$(sparkrun-k8s testbed env)"
  sparkrun-k8s testbed status
  sparkrun-k8s testbed down

exit codes:
  0  done
  1  the start failed, no testbed runs there, or status found a component down
  2  the binaries are missing (make testbed-bin), or bad usage
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``testbed`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "testbed",
        help="run a local Kubernetes control plane with fake GPU nodes",
        description=__doc__.split("\n\nThe product", 1)[0],
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="testbed_command", metavar="SUBCOMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default=_DEFAULT_NAME, help="testbed name (default: %(default)s)")
        p.add_argument("--run-root", type=Path, default=None, help="directory holding testbeds' run dirs")

    up = commands.add_parser("up", help="start a testbed and wait until it is ready")
    common(up)
    up.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (default: %(default)s)")
    up.add_argument(
        "--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default: %(default)s)"
    )
    up.add_argument("--gpu-product", default=NodePool.gpu_product, help="nvidia.com/gpu.product label")
    up.add_argument(
        "--process-nodes",
        type=int,
        default=0,
        help="nodes proc-0.. whose pods run as local processes (docs/testbed.md; default: %(default)s)",
    )
    up.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=None,
        help="directory of CRD YAML to install (repeatable; default: the checkout's crds/)",
    )
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    up.add_argument(
        "--kueue",
        action="store_true",
        help="also run Kueue (make kueue-bin; needs root; docs/testbed.md)",
    )
    up.set_defaults(func=_up)

    down = commands.add_parser("down", help="stop a testbed; nothing it started keeps running")
    common(down)
    down.add_argument("--all", action="store_true", help="stop every testbed under the run root")
    down.set_defaults(func=_down)

    status = commands.add_parser("status", help="show components, health and memory")
    common(status)
    status.set_defaults(func=_status)

    env = commands.add_parser("env", help="print `export KUBECONFIG=...` for a shell to eval")
    common(env)
    env.set_defaults(func=_env)


def _run_dir(args: argparse.Namespace) -> Path:
    root: Path = args.run_root or plane.default_run_root()
    return root / str(args.name)


def _up(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        bins = binaries.locate().check()
    except binaries.BinariesMissing as e:
        err.print(f"[red]{e}[/red]")
        return 2
    pools = [NodePool(count=args.nodes, gpus=args.gpus_per_node, gpu_product=args.gpu_product)]
    if args.process_nodes:
        pools.append(
            NodePool(
                prefix="proc",
                count=args.process_nodes,
                gpus=args.gpus_per_node,
                gpu_product=args.gpu_product,
                process=True,
            )
        )
    topology = Topology(pools=tuple(pools))
    options = plane.Options(
        topology=topology,
        crd_dirs=tuple(args.crds) if args.crds else plane.default_crd_dirs(),
        timeout=args.timeout,
    )
    run_dir = _run_dir(args)
    err.print(f"starting testbed [bold]{args.name}[/bold] in {run_dir} ...")
    try:
        testbed = plane.Testbed.start(run_dir, bins, options, name=args.name)
    except plane.AlreadyRunning as e:
        err.print(f"[yellow]{e}[/yellow]")
        return 1
    except plane.StartError as e:
        err.print("[red]testbed failed to start[/red]")
        # NB: plain write: rich would re-wrap the log tail and read brackets in it as markup.
        sys.stderr.write(f"{e}\n")
        return 1
    err.print(f"[green]ready in {testbed.state.ready_seconds:.1f} s[/green]")
    if args.kueue:
        try:
            kueue_run.start(testbed)
        except (binaries.BinariesMissing, kueue_run.KueueError) as e:
            err.print("[red]Kueue failed to start[/red] (the testbed stays up; `testbed down` stops it)")
            sys.stderr.write(f"{e}\n")
            return 1
        err.print("[green]Kueue is running[/green]")
    _print_status(testbed)
    print(f"export KUBECONFIG={testbed.kubeconfig}")
    return 0


def _down(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    if args.all:
        root: Path = args.run_root or plane.default_run_root()
        run_dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    else:
        run_dirs = [_run_dir(args)]
    for run_dir in run_dirs:
        testbed = plane.Testbed.attach(run_dir)
        if testbed is None:
            err.print(f"no testbed in {run_dir}")
            continue
        testbed.stop()
        err.print(f"stopped testbed {testbed.name} ({run_dir})")
    return 0


def _status(args: argparse.Namespace) -> int:
    testbed = plane.Testbed.attach(_run_dir(args))
    if testbed is None:
        Console(stderr=True).print(f"no testbed in {_run_dir(args)}")
        return 1
    return 0 if _print_status(testbed) else 1


def _env(args: argparse.Namespace) -> int:
    testbed = plane.Testbed.attach(_run_dir(args))
    if testbed is None or not testbed.running():
        Console(stderr=True).print(f"no running testbed in {_run_dir(args)}; start one with `testbed up`")
        return 1
    for key, value in testbed.env().items():
        print(f"export {key}={value}")
    return 0


def _print_status(testbed: plane.Testbed) -> bool:
    """Print the component table to stderr; True if every component runs and is healthy."""
    rows = testbed.status()
    table = Table(title=f"testbed {testbed.name} ({testbed.state.phase}) - {testbed.server}")
    for column in ("component", "pid", "state", "health", "RSS MiB", "endpoint", "log"):
        table.add_column(column, justify="right" if column in ("pid", "RSS MiB") else "left")
    total = 0
    for row in rows:
        health = {True: "[green]ok[/green]", False: "[red]failing[/red]", None: "-"}[row.healthy]
        state = "[green]running[/green]" if row.running else "[red]stopped[/red]"
        table.add_row(
            row.name, str(row.pid), state, health, f"{row.rss_bytes / 2**20:.0f}", row.endpoint, str(row.log)
        )
        total += row.rss_bytes
    table.add_section()
    table.add_row("total", "", "", "", f"{total / 2**20:.0f}", f"KUBECONFIG={testbed.kubeconfig}", "")
    Console(stderr=True, width=200).print(table)
    return bool(rows) and all(row.running and row.healthy for row in rows)
