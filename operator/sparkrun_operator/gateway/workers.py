"""Several gateway processes on one port (``--workers N``): a supervisor and its workers.

One Python event loop relays at most a core's worth of SSE events (decision 0028). With
``--workers N`` the process started becomes a supervisor that starts N copies of the same
command line (``--workers 1``, plus the worker's index in ``SPARKRUN_GATEWAY_WORKER``); each
binds its own listening socket on the same port with ``SO_REUSEPORT``, so the kernel spreads new
connections over the workers (by a hash of the connection's addresses).

- **Routing state is per worker**: each worker runs its own routing source — its own poll of
  the routing file, or with ``--kubernetes`` its own informers (InferenceWorkloads,
  EndpointSlices, and key Secrets with ``--secret-keys``): N workers hold N list+watch streams
  of each kind, which bounds the apiserver load at N times one gateway's. Balancing state
  (outstanding requests, ejections) is per worker as well: each worker balances the
  connections the kernel gave it.
- **Metrics aggregate**: the workers write their samples to a shared directory
  (``prometheus_client``'s multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``, a fresh temporary
  directory per supervisor, removed on exit), and ``/metrics`` on any worker renders the sum
  over all of them (``in_flight`` sums the live workers).
- **Lifecycle**: SIGTERM/SIGINT to the supervisor are passed on to every worker, which drain
  like a single gateway does. When a worker exits on its own, the supervisor stops the others and
  exits non-zero, so that the pod restarts as a whole (no half-served port).
- ``/healthz`` names the worker that answered (``"worker": i``), which is how a test tells that
  every worker serves.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

log = logging.getLogger("sparkrun.gateway")

WORKER_ENV = "SPARKRUN_GATEWAY_WORKER"
"""Set in each worker's environment to its index (0..N-1)."""
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def worker_index() -> int | None:
    """This process's worker index, or ``None`` when it is not one of several workers."""
    raw = os.environ.get(WORKER_ENV)
    return int(raw) if raw is not None and raw.isdigit() else None


def supervise(argv: Sequence[str], workers: int) -> int:
    """Run ``workers`` copies of the gateway command ``argv`` until signalled; the exit status."""
    metrics_dir = tempfile.mkdtemp(prefix="sparkrun-gateway-metrics-")
    command = [sys.executable, "-m", "sparkrun_operator.gateway", *argv, "--workers", "1"]
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(workers):
            env = {**os.environ, WORKER_ENV: str(index), METRICS_DIR_ENV: metrics_dir}
            procs.append(subprocess.Popen(command, env=env))
        log.info("gateway supervisor: %d workers (pids %s)", workers, [p.pid for p in procs])
        status = _wait_first(procs)
        failed = not stopping
        if failed:
            log.error("gateway worker exited (status %s); stopping the others", status)
            stop(signal.SIGTERM, None)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return 1 if failed else 0
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _wait_first(procs: Sequence[subprocess.Popen[bytes]]) -> int:
    """Until any worker exits; its exit status."""
    while True:
        for proc in procs:
            status = proc.poll()
            if status is not None:
                return status
        time.sleep(0.2)
