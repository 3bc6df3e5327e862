"""Ctrl-C counted, for a command that must clean up after the first and report after the second
(``sparkrun-k8s run``): :class:`Interrupts` replaces asyncio's own SIGINT handling (which cancels
the main task once, then raises ``KeyboardInterrupt`` wherever the loop is) while installed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupts:
    """SIGINT, counted: each one cancels what :meth:`guard` runs at the time (run's wait, then its
    clean-up). Work outside :meth:`guard` (run's create) is never cancelled: the caller reads
    :attr:`count` once it returns."""

    def __init__(self) -> None:
        self.count = 0
        self.task: asyncio.Future[Any] | None = None
        self.installed = False

    def install(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self.hit)
            self.installed = True
        except (NotImplementedError, RuntimeError):  # not the main thread: Ctrl-C as asyncio does it
            self.installed = False

    def uninstall(self) -> None:
        if self.installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
            self.installed = False

    def hit(self) -> None:
        self.count += 1
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def guard(self, work: Coroutine[Any, Any, T]) -> T | None:
        """``work``'s result; ``None`` when a Ctrl-C cancelled it."""
        seen = self.count
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        self.task = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.count > seen and task.cancelled() and not (current and current.cancelling()):
                return None
            raise
        finally:
            self.task = None
