"""The event loop and garbage collector the long-running processes (operator, daemon API) run
with (ADR 0032).

- ``uvloop`` when it is installed (a dependency on Linux), else asyncio's own loop: the operator
  handles every watch event of every workload, pod and JobSet on one loop, and uvloop's
  transports and scheduling cost less CPU per event. kopf's own CLI makes the same choice. The
  gateway runs on uvloop through uvicorn's setting.
- :func:`tune_gc`: a full (generation 2) collection stops the loop for as long as it takes to
  scan every tracked object, which grows with what the process watches (0.5 s on average at
  1,000 workloads on the 2-core reference machine, 27 of them while they started, and they
  found almost nothing: what is garbage here is freed by reference counting or in the young
  generations). So what exists before the loop starts (modules, classes: about 110,000 objects)
  is frozen out of every collection, and a full collection runs at most once per
  :data:`FULL_COLLECTION_EVERY` young (generation 1) collections instead of Python's 10.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Generation 1 collections between two full ones (Python's default: 10).
FULL_COLLECTION_EVERY = 100


def tune_gc() -> None:
    """Freeze every object that exists now out of the collector's scans, and run a full
    collection at most once per :data:`FULL_COLLECTION_EVERY` generation 1 collections (young
    generations unchanged). Called once, before the loop starts."""
    gc.collect()  # NB: what startup left as garbage is freed, not frozen
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or ``None`` (asyncio's default) when uvloop is missing."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh loop of :func:`loop_factory` (as ``asyncio.run``),
    the collector tuned by :func:`tune_gc` first."""
    tune_gc()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def serve_until_signalled(serve: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    """Run ``serve(stop)`` with :func:`run` until it returns; SIGINT and SIGTERM set ``stop``
    (a server's graceful end: the shim, the GPU agent)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(stop)

    run(main())
