"""Full garbage collections when the operator is quiet (ADR 0032).

A full (generation 2) collection stops the event loop while it scans every tracked object:
0.5-0.8 s at 1,000 workloads on the 2-core reference machine, and a pod's readiness that
arrives meanwhile waits it out. Measured there, the full collections that ran while 1,000
workloads started found almost nothing (what is garbage here is freed by reference counting or
in the young generations). So while :func:`collect_when_quiet` runs, Python's automatic full
collections are off, and this task runs one when one is due (``FULL_COLLECTION_EVERY`` young
collections since the last, as :mod:`sparkrun_operator.runner` sets for the other processes)
and no object has changed for ``quiet`` seconds (no poke of any daemon: no watch event needed
work), or, when the operator is never quiet, once it has been due for ``overdue`` seconds. The
young generations are collected as always.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Final

from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.runner import FULL_COLLECTION_EVERY

#: A threshold no count reaches: Python's automatic full collections do not run.
_NEVER: Final = 2**31 - 1


class _Automatic:
    """Python's automatic full collections, off while any collector of this process runs
    (tests run several operators in one process): the last one to end turns them back on."""

    def __init__(self) -> None:
        self.holders = 0
        self.threshold = FULL_COLLECTION_EVERY

    def off(self) -> None:
        young, middle, full = gc.get_threshold()
        if self.holders == 0:
            self.threshold = full
            gc.set_threshold(young, middle, _NEVER)
        self.holders += 1

    def on(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, self.threshold)


_AUTOMATIC: Final = _Automatic()


async def collect_when_quiet(
    triggers: Triggers,
    *,
    quiet: float = 2.0,
    overdue: float = 300.0,
    period: float = 0.5,
    every: int = FULL_COLLECTION_EVERY,
) -> None:
    """Until cancelled: run each due full collection at a quiet moment (module docstring)."""
    _AUTOMATIC.off()
    pokes, changed = triggers.pokes, time.monotonic()
    due_since: float | None = None
    try:
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            if triggers.pokes != pokes:
                pokes, changed = triggers.pokes, now
            if gc.get_count()[2] < every:
                due_since = None
                continue
            due_since = now if due_since is None else due_since
            if now - changed >= quiet or now - due_since >= overdue:
                gc.collect(2)
                due_since = None
    finally:
        _AUTOMATIC.on()
