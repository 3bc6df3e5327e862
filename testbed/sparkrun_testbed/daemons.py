"""Start, inspect and stop the testbed's long-running components.

Each component runs in its own session (``start_new_session=True``), so it leads a process
group that nobody else shares: stopping it means signalling that group, which also reaches any
child it spawned. A :class:`Daemon` is plain data (pid, process start time, log path) so that a
different process (``sparkrun-k8s testbed down``) can stop what ``up`` started.

PIDs are recycled, so a daemon is only ever signalled after its recorded start time (field 22
of ``/proc/<pid>/stat``) has been checked against the live process: we never kill a stranger.
Linux-only, like the binaries it runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


@dataclass
class Daemon:
    """One started component. ``popen`` is set only in the process that started it."""

    name: str
    pid: int
    start_time: int
    log: Path
    argv: list[str]
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_time": self.start_time,
            "log": str(self.log),
            "argv": self.argv,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Daemon:
        return cls(
            name=data["name"],
            pid=int(data["pid"]),
            start_time=int(data["start_time"]),
            log=Path(data["log"]),
            argv=list(data["argv"]),
        )

    def running(self) -> bool:
        """True while the recorded process (same pid *and* start time) is alive and not a zombie."""
        if self.popen is not None and self.popen.poll() is not None:
            return False
        stat = _read_stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state not in "ZX"

    def exit_code(self) -> int | None:
        """The exit status if this process started it and it has exited, else None."""
        return None if self.popen is None else self.popen.poll()

    def group_pids(self, snapshot: Sequence[tuple[int, ProcStat]] | None = None) -> list[int]:
        """Live members of the daemon's process group (empty once it is fully gone).

        ``snapshot`` (from :func:`process_table`) saves a scan of /proc when asking for many
        daemons at once.
        """
        stats = _all_stats() if snapshot is None else snapshot
        if not self._owns_group(stats):
            return []
        return [pid for pid, stat in stats if stat.pgrp == self.pid and stat.state not in "ZX"]

    def rss_bytes(self, snapshot: Sequence[tuple[int, ProcStat]] | None = None) -> int:
        """Resident memory of every process in the daemon's group, in bytes."""
        return sum(_rss_bytes(pid) for pid in self.group_pids(snapshot))

    def stop(self, *, grace: float = 10.0) -> None:
        """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL it.

        Returns once no member of the group is left. Safe to call twice or on a daemon that has
        already exited.
        """
        if not self._owns_group():
            self._reap(final=True)
            return
        if self._signal(signal.SIGTERM) and not self._wait_gone(grace):
            self._signal(signal.SIGKILL)
            self._wait_gone(5.0)
        self._reap()

    def _owns_group(self, snapshot: Sequence[tuple[int, ProcStat]] | None = None) -> bool:
        # The leader may have exited while children it spawned live on in the group; a pid
        # that still names a process group cannot be reused for a new process, so an absent
        # leader with group members left means those members are ours.
        stat = _read_stat(self.pid)
        if stat is None or stat.state in "ZX":
            stats = _all_stats() if snapshot is None else snapshot
            return any(s.pgrp == self.pid and s.state not in "ZX" for _, s in stats)
        return stat.start_time == self.start_time

    def _signal(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._reap()
            if not self.group_pids():
                self._reap(final=True)
                return True
            time.sleep(0.05)
        return not self.group_pids()

    def _reap(self, *, final: bool = False) -> None:
        """Collect the exit status of a leader we started (no zombie, no ResourceWarning).

        ``final``: the group is known to be gone, so the leader has exited or is a zombie
        and waiting for it returns at once.
        """
        if self.popen is None:
            return
        if final:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5.0)
        else:
            self.popen.poll()


def start(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Daemon:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    stat = _read_stat(popen.pid)
    # NB: a process that exits before we read /proc still gets a record; running() is then False.
    start_time = stat.start_time if stat is not None else -1
    return Daemon(name=name, pid=popen.pid, start_time=start_time, log=log, argv=list(argv), popen=popen)


def stop_all(daemons: Sequence[Daemon], *, grace: float = 10.0) -> None:
    """Stop several daemons at once: SIGTERM every group, wait, then SIGKILL what is left.

    Returns once every group is gone; the total wait is about ``grace``, not one per daemon.
    """
    owned = [d for d in daemons if d._owns_group()]
    for d in owned:
        d._signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        for d in owned:
            d._reap()
        snapshot = process_table()
        if not any(d.group_pids(snapshot) for d in owned):
            break
        time.sleep(0.05)
    snapshot = process_table()
    for d in owned:
        if d.group_pids(snapshot):
            d._signal(signal.SIGKILL)
    for d in daemons:
        d._wait_gone(5.0)


def tail(path: Path, *, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class ProcStat:
    state: str
    pgrp: int
    start_time: int


def _read_stat(pid: int) -> ProcStat | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(state=fields[0], pgrp=int(fields[2]), start_time=int(fields[19]))


def process_table() -> list[tuple[int, ProcStat]]:
    """One scan of /proc, to pass as ``snapshot`` when querying several daemons."""
    return _all_stats()


def _all_stats() -> list[tuple[int, ProcStat]]:
    stats = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None:
                stats.append((int(entry.name), stat))
    return stats


def _rss_bytes(pid: int) -> int:
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0
