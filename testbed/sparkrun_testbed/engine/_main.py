"""Process entry: parse, then run the leader or a worker."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from ._args import Knobs, ServeArgs, parse_args
from ._cluster import Rendezvous, fail_on_request, run_worker, stop_event
from ._http import serve_http
from ._offline import check as offline_check
from ._server import Engine

log = logging.getLogger("sparkrun.engine")


async def run_leader(args: ServeArgs, knobs: Knobs) -> int:
    """Rank 0: rendezvous, simulated load, then serve HTTP until a signal or a lost rank."""
    engine = Engine(args, knobs)
    rendezvous = Rendezvous(args, knobs)
    rdv_server = await rendezvous.start()
    http = await serve_http(engine.handle, args.host, args.port)
    log.info("serving %s as %s on http://%s:%d", args.model, ", ".join(args.names), args.host, args.port)
    stop = stop_event()

    async def load() -> None:
        await rendezvous.all_joined.wait()
        if knobs.load_seconds:
            log.info("loading weights (%.1fs simulated)", knobs.load_seconds)
            await asyncio.sleep(knobs.load_seconds)
        engine.loaded = True
        log.info("engine ready")

    async def fail() -> int:
        await rendezvous.all_joined.wait()
        return await fail_on_request(args, knobs)

    loader = asyncio.create_task(load())
    stopper = asyncio.create_task(stop.wait())
    failer = asyncio.create_task(fail())
    waitables: set[asyncio.Future[Any]] = {stopper, rendezvous.lost, failer}
    done, _ = await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
    loader.cancel()
    stopper.cancel()
    failer.cancel()
    http.close()
    if rdv_server is not None:
        rdv_server.close()
    if failer in done:
        return failer.result()
    if rendezvous.lost in done:
        log.error("%s; the leader exits", rendezvous.lost.result())
        return 1
    log.info("stopping on signal")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [engine-standin] %(message)s",
        stream=sys.stderr,
    )
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        knobs = Knobs.from_env()
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if args.ignored:
        log.warning("ignoring unsupported vllm serve argument(s): %s", " ".join(args.ignored))
    log.info(
        "model=%s revision=%s tp=%d pp=%d nnodes=%d node_rank=%d backend=%s sleep_mode=%s",
        args.model,
        args.revision,
        args.tensor_parallel_size,
        args.pipeline_parallel_size,
        args.nnodes,
        args.node_rank,
        args.distributed_executor_backend,
        args.enable_sleep_mode,
    )
    if problem := offline_check(args.model, args.revision):
        log.error("%s; refusing to start", problem)
        return 1
    if args.node_rank > 0 or args.headless:
        return asyncio.run(run_worker(args, knobs))
    return asyncio.run(run_leader(args, knobs))
