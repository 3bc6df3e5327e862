"""Multi-node membership: the leader's rendezvous and the headless workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ._args import Knobs, ServeArgs

log = logging.getLogger("sparkrun.engine")


class ClusterLost(Exception):
    """A rank of a multi-node group went away; the process must exit non-zero."""


def frame(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


class Rendezvous:
    """The leader's side of multi-node membership (the stand-in for torch.distributed's store)."""

    def __init__(self, args: ServeArgs, knobs: Knobs) -> None:
        self.args = args
        self.knobs = knobs
        self.joined: dict[int, asyncio.StreamWriter] = {}
        self.all_joined = asyncio.Event()
        self.lost: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if args.nnodes == 1:
            self.all_joined.set()

    async def start(self) -> asyncio.Server | None:
        if self.args.nnodes == 1:
            return None
        log.info(
            "waiting for %d worker rank(s) on %s:%d",
            self.args.nnodes - 1,
            self.knobs.master_bind,
            self.args.master_port,
        )
        return await asyncio.start_server(
            self._on_worker, self.knobs.master_bind, self.args.master_port, reuse_address=True
        )

    async def _on_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rank = -1
        try:
            hello = json.loads(await asyncio.wait_for(reader.readline(), 10))
            rank = int(hello.get("rank", -1))
            problem = None
            if hello.get("nnodes") != self.args.nnodes:
                problem = f"worker expects --nnodes {hello.get('nnodes')}, leader has {self.args.nnodes}"
            elif not 1 <= rank < self.args.nnodes:
                problem = f"rank {rank} is out of range"
            elif rank in self.joined:
                problem = f"rank {rank} already joined"
            if problem:
                log.error("refusing a worker: %s", problem)
                writer.write(frame({"ok": False, "error": problem}))
                await writer.drain()
                rank = -1
                return
            self.joined[rank] = writer
            writer.write(frame({"ok": True}))
            await writer.drain()
            log.info("rank %d joined (%d/%d)", rank, len(self.joined) + 1, self.args.nnodes)
            if len(self.joined) == self.args.nnodes - 1:
                self.all_joined.set()
            await heartbeat(reader, writer, self.knobs.heartbeat_seconds)
            if rank == self.knobs.fail_rank:
                # NB: a rank failing on request is noticed as a collective notices a dead peer,
                # by a timeout (five beats), not at once: its failure is the group's first
                await asyncio.sleep(self.knobs.heartbeat_seconds * 5)
        except (TimeoutError, OSError, ValueError, AttributeError):
            pass
        finally:
            if rank in self.joined and self.joined[rank] is writer:
                del self.joined[rank]
                if not self.lost.done():
                    self.lost.set_result(f"worker rank {rank} went away")
            writer.close()


async def heartbeat(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, every: float) -> None:
    """Exchange pings until the peer is gone (EOF, error or five missed beats); then return."""

    async def beat() -> None:
        while True:
            writer.write(b'{"ping":1}\n')
            await writer.drain()
            await asyncio.sleep(every)

    sender = asyncio.create_task(beat())
    try:
        while True:
            line = await asyncio.wait_for(reader.readline(), every * 5)
            if not line:
                return
    except (TimeoutError, OSError):
        return
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await sender


async def run_worker(args: ServeArgs, knobs: Knobs) -> int:
    """A headless rank: join the leader, then live exactly as long as the leader does."""
    deadline = time.monotonic() + knobs.join_timeout
    while True:
        try:
            reader, writer = await asyncio.open_connection(args.master_addr, args.master_port)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                log.error("leader %s:%d unreachable: %s", args.master_addr, args.master_port, exc)
                return 1
            await asyncio.sleep(0.2)
    writer.write(frame({"rank": args.node_rank, "nnodes": args.nnodes}))
    await writer.drain()
    try:
        reply = json.loads(await asyncio.wait_for(reader.readline(), 30) or b"{}")
    except (TimeoutError, OSError, ValueError):
        reply = {}
    if not reply.get("ok"):
        log.error("leader refused rank %d: %s", args.node_rank, reply.get("error", "no answer"))
        return 1
    log.info("rank %d joined leader %s:%d", args.node_rank, args.master_addr, args.master_port)
    stop = stop_event()
    beat = asyncio.create_task(heartbeat(reader, writer, knobs.heartbeat_seconds))
    stopper = asyncio.create_task(stop.wait())
    failer = asyncio.create_task(fail_on_request(args, knobs))
    done, _ = await asyncio.wait({beat, stopper, failer}, return_when=asyncio.FIRST_COMPLETED)
    for task in (beat, stopper, failer):
        task.cancel()
    writer.close()
    if failer in done:
        return failer.result()
    if stopper in done:
        log.info("rank %d stopping on signal", args.node_rank)
        return 0
    log.error("leader went away; rank %d exits", args.node_rank)
    return 1


async def fail_on_request(args: ServeArgs, knobs: Knobs) -> int:
    """With ``SPARKRUN_ENGINE_FAIL_RANK`` naming this rank: wait ``SPARKRUN_ENGINE_FAIL_AFTER``,
    print ``SPARKRUN_ENGINE_FAIL_MESSAGE`` (one line of the log, as a crash's last words), and
    return ``SPARKRUN_ENGINE_FAIL_CODE`` for the process to exit with; otherwise never return."""
    if knobs.fail_rank != args.node_rank:
        await asyncio.Event().wait()
    await asyncio.sleep(knobs.fail_after)
    if knobs.fail_times and knobs.fail_ledger and not await asyncio.to_thread(_count_failure, knobs):
        log.info("rank %d failed %d times on request: it fails no more", args.node_rank, knobs.fail_times)
        await asyncio.Event().wait()
    if knobs.fail_message:
        print(knobs.fail_message, file=sys.stderr, flush=True)
    log.error("rank %d fails on request (exit status %d)", args.node_rank, knobs.fail_code)
    return knobs.fail_code


def _count_failure(knobs: Knobs) -> bool:
    """Whether the ledger allows one more failure (and then it records it)."""
    ledger = Path(knobs.fail_ledger)
    try:
        with ledger.open("rb") as f:
            failed = f.read(1 << 16).count(b"\n")
    except FileNotFoundError:
        failed = 0
    if failed >= knobs.fail_times:
        return False
    with ledger.open("a") as f:
        f.write("failed\n")
    return True


def stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
