"""Multi-node membership: the leader's rendezvous and the headless workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
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
    done, _ = await asyncio.wait({beat, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for task in (beat, stopper):
        task.cancel()
    writer.close()
    if stopper in done:
        log.info("rank %d stopping on signal", args.node_rank)
        return 0
    log.error("leader went away; rank %d exits", args.node_rank)
    return 1


def stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
