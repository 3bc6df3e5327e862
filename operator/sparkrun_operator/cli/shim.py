"""``sparkrun-k8s shim``: serve the daemon-compatible API, or call it.

- ``sparkrun-k8s shim serve --namespace sparkrun-system --tls-cert tls.crt --tls-key tls.key``
  runs the shim (``--insecure-plaintext`` for development without TLS, ``--aggregated-port`` to
  also serve the aggregated API ``v1alpha1.daemon.sparkrun.dev``);
- ``sparkrun-k8s shim call NAME [--arg JSON] --url URL [--token-file PATH] [--ca-cert PEM]`` runs
  one operation through :class:`sparkrun_operator.client.Client` and prints its result as JSON
  (waiting for jobs); the bearer token comes from ``--token-file`` or ``$SPARKRUN_DAEMON_TOKEN``,
  never from the command line (``ps`` shows argv). ``sparkrun-k8s daemon call`` is the fuller
  verb (through the apiserver by default, typed errors, exit codes).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from sparkrun_operator import runner
from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.cli.daemonapi import check_url, read_token
from sparkrun_operator.client import Client, DaemonError
from sparkrun_operator.shim.listener import Limits
from sparkrun_operator.shim.server import ServeOptions, serve

EPILOG = """\
examples:
  sparkrun-k8s shim serve --namespace sparkrun-system
  sparkrun-k8s shim call workloads.list --url https://localhost:8443 --ca-cert ca.pem \\
      --token-file ~/.sparkrun/token

exit codes:
  0  done
  1  the operation failed (its typed error is printed)
  2  usage (a bad --arg, an unreadable token file)
  3  the shim cannot be reached, or a job outlived --timeout
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``shim`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "shim",
        help="the daemon-compatible API (serve it, or call it)",
        description="The daemon-compatible API (docs/daemon-api.md): `serve` runs it (the chart's shim\n"
        "Deployment); `call` runs one operation on a shim's own listener (--url; the token from\n"
        "--token-file or $SPARKRUN_DAEMON_TOKEN). `sparkrun-k8s daemon` does more, through the\n"
        "apiserver by default.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="shim_command", metavar="SUBCOMMAND", required=True)

    run = commands.add_parser("serve", help="serve the daemon API until interrupted")
    run.add_argument("-n", "--namespace", default=os.environ.get("POD_NAMESPACE", "sparkrun-system"))
    run.add_argument(
        "--watch-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="count only these namespaces' pods (and --namespace's) in GPU occupancy, one list each, "
        "so no cluster-wide pod list is needed (repeatable; default: every namespace)",
    )
    run.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    run.add_argument("--context", default=None)
    run.add_argument("--host", default="0.0.0.0")
    run.add_argument("--port", type=int, default=8443)
    run.add_argument("--tls-cert", default=os.environ.get("SPARKRUN_SHIM_TLS_CERT"))
    run.add_argument("--tls-key", default=os.environ.get("SPARKRUN_SHIM_TLS_KEY"))
    run.add_argument(
        "--insecure-plaintext",
        action="store_true",
        help="serve without TLS (bearer tokens in clear text: development only)",
    )
    run.add_argument("--aggregated-port", type=int, default=None, help="also serve the aggregated API here")
    run.add_argument(
        "--aggregated-host", default=None, help="address of the aggregated API (default: --host)"
    )
    run.add_argument(
        "--allow-request-trust",
        action="store_true",
        help="accept per-request trust: true (recipe hooks); off by default for TCP",
    )
    run.add_argument(
        "--token-audience",
        action="append",
        default=[],
        metavar="AUDIENCE",
        help="accept only bearer tokens issued for this audience (repeatable; default: the apiserver's)",
    )
    run.add_argument("--head-timeout", type=float, default=10.0, help="seconds for a request head (408)")
    run.add_argument("--max-head-bytes", type=int, default=32 * 1024, help="largest request head (431)")
    run.add_argument("--max-active-jobs", type=int, default=32, help="unfinished jobs per principal (429)")
    run.add_argument(
        "--max-streams-per-principal", type=int, default=16, help="concurrent SSE streams per principal (429)"
    )
    run.add_argument(
        "--name-prefixes",
        type=namepolicy.flag,
        default=NamePolicy(),
        metavar="JSON",
        help="the operator's and gateway's name policy (the chart's tenancy.names.prefixes): proxy.models "
        "lists only the names the gateway routes (default {}: every name)",
    )
    run.set_defaults(func=_serve)

    # NB: no abbreviations: `--token` must not be taken for --token-file (a token in argv)
    call = commands.add_parser("call", help="run one operation and print its result", allow_abbrev=False)
    call.add_argument("name", help="operation, e.g. workloads.list")
    call.add_argument("--arg", default="{}", help="JSON object of arguments")
    call.add_argument("--url", required=True)
    call.add_argument("--token-file", metavar="PATH", help="bearer token (default: $SPARKRUN_DAEMON_TOKEN)")
    call.add_argument("--ca-cert", default=None)
    call.add_argument("--key", default=None, help="Idempotency-Key")
    call.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait for a job (then exit 3; it goes on)"
    )
    call.set_defaults(func=_call)


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = ServeOptions(
        namespace=args.namespace,
        watch_namespaces=tuple(args.watch_namespace),
        kubeconfig=args.kubeconfig,
        context=args.context,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure_plaintext=args.insecure_plaintext,
        aggregated_port=args.aggregated_port,
        aggregated_host=args.aggregated_host,
        allow_request_trust=args.allow_request_trust,
        token_audiences=tuple(args.token_audience),
        limits=Limits(head_timeout=args.head_timeout, max_head_bytes=args.max_head_bytes),
        max_active_jobs=args.max_active_jobs,
        max_streams_per_principal=args.max_streams_per_principal,
        name_policy=args.name_prefixes,
    )

    try:
        runner.serve_until_signalled(lambda stop: serve(options, stop=stop))
    except ValueError as error:
        print(f"sparkrun-k8s shim serve: {error}", file=sys.stderr)
        return 2
    return 0


def _call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.arg)
    except ValueError as error:
        print(f"--arg is not JSON: {error}", file=sys.stderr)
        return 2
    try:
        url = check_url(args.url)  # NB: https, or http to loopback: the token never in clear text
        token = read_token(args.token_file)
    except CliError as error:
        print(f"sparkrun-k8s shim call: {error}", file=sys.stderr)
        return error.code
    with Client(url, token, ca_cert=args.ca_cert) as client:
        try:
            result = client.call(args.name, arguments, key=args.key, timeout=args.timeout)
        except DaemonError as error:
            print(json.dumps(error.body, indent=2), file=sys.stderr)
            return 1
        except TimeoutError as error:  # NB: --timeout passed; the job goes on (its id is named)
            print(f"sparkrun-k8s shim call: {error}", file=sys.stderr)
            return 3
    print(json.dumps(result, indent=2))
    return 0
