"""``python -m sparkrun_testbed.hfhub``: serve the default repositories until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from sparkrun_testbed.hfhub.fixtures import TOKEN, bench_model, default_repos
from sparkrun_testbed.hfhub.hub import Hub


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrun_testbed.hfhub", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--print-url", action="store_true", help="print the endpoint URL on one line")
    parser.add_argument("--token", action="append", default=[], help=f"an accepted token (default {TOKEN})")
    parser.add_argument("--lfs-mib", type=float, default=4, help="size of the tiny model's LFS blob")
    parser.add_argument("--big", action="store_true", help="also serve sparkrun-test/big-model (36 MiB)")
    parser.add_argument(
        "--bench-shards", type=int, default=0, help="serve sparkrun-bench/model with N shards"
    )
    parser.add_argument("--bench-shard-mib", type=float, default=64, help="size of each bench shard")
    parser.add_argument("--lfs-redirect", action="store_true", help="302 LFS files to a CDN on 127.0.0.2")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    hub = Hub(
        default_repos(lfs_mib=args.lfs_mib, big=args.big),
        tokens=args.token or [TOKEN],
        host=args.host,
        port=args.port,
        lfs_redirect=args.lfs_redirect,
        verbose=args.verbose,
    )
    if args.bench_shards:
        hub.add_repo(bench_model(args.bench_shards, args.bench_shard_mib))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    url = hub.start()
    if args.print_url:
        print(url, flush=True)
    else:
        print(
            f"local Hub on {url} (repos: {', '.join(r.repo_id for r in hub.repos.values())})", file=sys.stderr
        )
    stop.wait()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
