"""``nc`` for process-node pods: the port check init containers use, nothing more.

    nc -z [-v] [-w SECONDS] HOST PORT [PORT...]

Exits 0 if a TCP connection to every port succeeds, else 1 (as netcat does); ``-v`` prints
one line per port to stderr. Other netcat modes exit 2 with a message, rather than pretending.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nc", add_help=False)
    parser.add_argument("-z", action="store_true")
    parser.add_argument("-v", action="store_true")
    parser.add_argument("-w", type=float, default=5.0)
    parser.add_argument("host")
    parser.add_argument("ports", nargs="+")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit:
        print("nc (testbed shim): only `nc -z [-v] [-w SECONDS] HOST PORT...` is supported", file=sys.stderr)
        return 2
    if not args.z:
        print("nc (testbed shim): only port checks (-z) are supported", file=sys.stderr)
        return 2
    ok = True
    for port in args.ports:
        try:
            with socket.create_connection((args.host, int(port)), timeout=args.w):
                pass
        except (OSError, ValueError) as e:
            ok = False
            if args.v:
                print(f"nc: connect to {args.host} port {port} (tcp) failed: {e}", file=sys.stderr)
        else:
            if args.v:
                print(f"Connection to {args.host} {port} port [tcp/*] succeeded!", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
