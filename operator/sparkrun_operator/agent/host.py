"""The host's CPU, memory and network, from ``/proc``.

``/proc/stat`` and ``/proc/meminfo`` describe the host in any container (they are not
namespaced); the network is per network namespace, so the host's is read from PID 1's
``/proc/1/net/dev``, which the agent sees because its pod shares the host's PID namespace
(``hostPID``). Rates are over the time between two samples: the first sample has none. Every
read is bounded (:data:`MAX_READ`) and a file that cannot be read leaves its fields ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sparkrun_operator.api.telemetry import HostSample

#: The most bytes read of one /proc file.
MAX_READ: Final = 256 * 1024


def read(path: Path) -> str | None:
    """At most :data:`MAX_READ` bytes of ``path`` as text, or ``None``."""
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_READ).decode("ascii", errors="replace")
    except OSError:
        return None


def cpu_times(stat: str) -> tuple[int, int] | None:
    """``(busy, total)`` jiffies of the ``cpu`` line of ``/proc/stat`` (idle and iowait are not busy)."""
    for line in stat.splitlines():
        parts = line.split()
        if parts[:1] == ["cpu"] and len(parts) >= 5 and all(p.isdigit() for p in parts[1:]):
            values = [int(p) for p in parts[1:9]]  # user .. steal; guest is inside user
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return sum(values) - idle, sum(values)
    return None


def memory(meminfo: str) -> tuple[int, int] | None:
    """``(used, total)`` bytes from ``/proc/meminfo`` (used: total less ``MemAvailable``)."""
    found: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name in ("MemTotal", "MemAvailable") and parts and parts[0].isdigit():
            found[name] = int(parts[0]) * 1024
    if len(found) < 2:
        return None
    return max(found["MemTotal"] - found["MemAvailable"], 0), found["MemTotal"]


def net_bytes(netdev: str) -> tuple[int, int] | None:
    """``(received, transmitted)`` bytes over every interface but loopback (``/proc/<pid>/net/dev``)."""
    rx = tx = 0
    seen = False
    for line in netdev.splitlines()[2:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if name.strip() == "lo" or len(parts) < 9 or not (parts[0].isdigit() and parts[8].isdigit()):
            continue
        rx, tx, seen = rx + int(parts[0]), tx + int(parts[8]), True
    return (rx, tx) if seen else None


@dataclass
class HostSampler:
    """Samples the host under ``proc_root``; the network of PID ``net_pid``'s namespace."""

    proc_root: Path = Path("/proc")
    net_pid: str = "1"
    clock: Callable[[], float] = time.monotonic
    _cpu: tuple[int, int] | None = field(default=None, init=False)
    _net: tuple[int, int, float] | None = field(default=None, init=False)

    def sample(self) -> HostSample:
        """The host now (blocking file reads: call it off the event loop)."""
        stat = read(self.proc_root / "stat")
        meminfo = read(self.proc_root / "meminfo")
        netdev = read(self.proc_root / self.net_pid / "net" / "dev")
        used_total = memory(meminfo) if meminfo is not None else None
        rx, tx = self._net_rates(net_bytes(netdev) if netdev is not None else None)
        return HostSample(
            cpu_percent=self._cpu_percent(cpu_times(stat) if stat is not None else None),
            memory_used_bytes=used_total[0] if used_total else None,
            memory_total_bytes=used_total[1] if used_total else None,
            rx_bytes_per_second=rx,
            tx_bytes_per_second=tx,
        )

    def _cpu_percent(self, now: tuple[int, int] | None) -> float | None:
        last, self._cpu = self._cpu, now
        if now is None or last is None or now[1] <= last[1] or now[0] < last[0]:
            return None
        return min(100.0 * (now[0] - last[0]) / (now[1] - last[1]), 100.0)

    def _net_rates(self, now: tuple[int, int] | None) -> tuple[float | None, float | None]:
        at = self.clock()
        last, self._net = self._net, (None if now is None else (now[0], now[1], at))
        if now is None or last is None or at <= last[2] or now[0] < last[0] or now[1] < last[1]:
            return None, None
        return (now[0] - last[0]) / (at - last[2]), (now[1] - last[1]) / (at - last[2])
