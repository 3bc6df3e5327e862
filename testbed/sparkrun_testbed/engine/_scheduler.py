"""Admission of requests to the batch, as vLLM's scheduler does: a running slot and KV-cache room.

A request runs when fewer than ``--max-num-seqs`` requests run and its prompt fits in the KV
cache beside the tokens of those running (or nothing runs: one request always fits); otherwise it
waits, first come first served, and counts in ``vllm:num_requests_waiting``. The KV cache holds
``SPARKRUN_ENGINE_KV_CACHE_TOKENS`` tokens, by default ``--max-num-seqs`` x ``--max-model-len``
(then no request ever waits for KV room, only for a slot, since a request holds at most
``--max-model-len`` tokens); ``vllm:kv_cache_usage_perc`` is the tokens of running requests
(prompt and generated so far) over it, at most 1. Unlike vLLM the stand-in never preempts a
running request when its generated tokens overflow the cache. A waiting request whose client
disconnects leaves the queue (within :data:`GONE_POLL_SECONDS`) and counts as aborted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from ._metrics import Stats

#: How often a waiting request checks that its client is still there.
GONE_POLL_SECONDS = 0.1


class Scheduler:
    """Running slots and KV-cache room, accounted in ``stats`` (``running``, ``waiting``,
    ``running_tokens``)."""

    def __init__(self, stats: Stats, *, max_num_seqs: int, kv_cache_tokens: int) -> None:
        self.stats = stats
        self.max_num_seqs = max_num_seqs
        self.kv_cache_tokens = kv_cache_tokens
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def kv_cache_usage(self) -> float:
        """The share of the KV cache the running requests hold (0-1)."""
        return min(1.0, self.stats.running_tokens / self.kv_cache_tokens)

    def _fits(self, tokens: int) -> bool:
        s = self.stats
        if s.running >= self.max_num_seqs:
            return False
        return s.running == 0 or s.running_tokens + tokens <= self.kv_cache_tokens

    def _admit(self, tokens: int) -> None:
        self.stats.running += 1
        self.stats.running_tokens += tokens

    def _admit_waiting(self) -> None:
        """Admit waiting requests in arrival order while the first of them fits."""
        while self._queue and self._fits(self._queue[0][0]):
            tokens, admitted = self._queue.popleft()
            self.stats.waiting -= 1
            self._admit(tokens)
            admitted.set_result(None)

    async def enter(self, tokens: int, gone: Callable[[], bool]) -> bool:
        """Wait until a request of ``tokens`` prompt tokens runs (it then holds a slot and its
        tokens: True), or its client is ``gone`` while it waits (it leaves the queue, as vLLM
        aborts a request whose client disconnected: False)."""
        if not self._queue and self._fits(tokens):
            self._admit(tokens)
            return True
        admitted = asyncio.get_running_loop().create_future()
        entry = (tokens, admitted)
        self._queue.append(entry)
        self.stats.waiting += 1
        try:
            while not admitted.done():
                await asyncio.wait([admitted], timeout=GONE_POLL_SECONDS)
                if not admitted.done() and gone():
                    self._drop(entry)
                    return False
            return True
        except asyncio.CancelledError:
            if admitted.done() and not admitted.cancelled():
                self.leave(tokens)  # admitted, but cancelled before it could run
            else:
                self._drop(entry)
            raise

    def _drop(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        self._queue.remove(entry)
        self.stats.waiting -= 1
        self._admit_waiting()  # NB: the head may have changed

    def leave(self, tokens: int) -> None:
        """A running request ends, holding ``tokens`` (its prompt and what it generated)."""
        self.stats.running -= 1
        self.stats.running_tokens -= tokens
        self._admit_waiting()
