"""Helpers shared by benchmarks: processes on loopback, a lean streaming client, statistics."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).parent / "results"
_TOKEN = re.compile(rb'"(?:content|text)":\s*"[^"]')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A child process with its output in a log file; stopped with :meth:`stop`.

    With ``group``, it leads a session (and process group) of its own and :meth:`stop` signals the
    whole group: a supervisor's workers (nginx's) outlive a master that died first, and would keep
    its port.
    """

    def __init__(
        self, cmd: Sequence[str], log: Path, env: dict[str, str] | None = None, group: bool = False
    ) -> None:
        self.log = log
        self.group = group
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            list(cmd),
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=group,
        )

    def wait_http(self, url: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise RuntimeError(f"{self.proc.args} exited {self.proc.returncode}: {tail}")
            try:
                if httpx.get(url, timeout=2).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{url} not up after {timeout}s: {self.log.read_text()[-2000:]}")

    def cpu_seconds(self, children: bool = False) -> float:
        """User+system CPU time the process used so far (Linux /proc); with ``children``, plus
        that of its live child processes (a supervisor's workers)."""
        pids = [self.proc.pid]
        if children:
            pids += [c for c, parent in _parents().items() if parent == self.proc.pid]
        return sum(_cpu_of(pid) for pid in pids)

    def run_queue_seconds(self, children: bool = False) -> float:
        """Seconds the process's threads spent runnable but waiting for a CPU so far (Linux
        ``/proc/PID/task/TID/schedstat``); with ``children``, plus its live child processes'."""
        pids = [self.proc.pid]
        if children:
            pids += [c for c, parent in _parents().items() if parent == self.proc.pid]
        total = 0
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
                try:
                    total += int(task.read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        return total / 1e9

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; with ``group``, to every process of the group, and
        SIGKILL to whatever of it is left once the leader is gone."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        if self.group:
            self._signal(signal.SIGKILL)
        self._out.close()

    def _signal(self, sig: signal.Signals) -> None:
        try:
            if self.group:  # the session's group id is the leader's pid
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:  # nothing of it is left
            pass


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu_of(pid: int) -> float:
    try:
        fields = _stat(pid)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _parents() -> dict[int, int]:
    """Every live process's parent pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue
    return found


@dataclass
class Sample:
    ttft: float
    total: float
    tokens: int


class StreamClient:
    """A keep-alive HTTP/1.1 client for SSE completions, as cheap as Python allows.

    Cheaper than httpx so that the load generator (which shares the CPUs) distorts less.
    """

    def __init__(self, host: str, port: int, path: str, headers: dict[str, str] | None = None) -> None:
        self.host, self.port, self.path = host, port, path
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def request(self, body: bytes) -> Sample:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        reader, writer = self.reader, self.writer
        assert reader is not None
        head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{self.headers}\r\n"
        ).encode()
        start = time.perf_counter()
        writer.write(head + body)
        status_head = await reader.readuntil(b"\r\n\r\n")
        status = int(status_head[9:12])
        lower = status_head.lower()
        ttft = 0.0
        tokens = 0
        if b"transfer-encoding: chunked" in lower:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                data = await reader.readexactly(size + 2)
                found = len(_TOKEN.findall(data))
                if found and not tokens:
                    ttft = time.perf_counter() - start
                tokens += found
        else:
            match = re.search(rb"content-length: (\d+)", lower)
            await reader.readexactly(int(match.group(1)) if match else 0)
        if b"connection: close" in lower:
            await self.close()
        if status != 200:
            raise RuntimeError(f"HTTP {status}")
        return Sample(ttft, time.perf_counter() - start, tokens)


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def environment(extra_packages: Sequence[str] = ()) -> dict[str, Any]:
    versions = {}
    for name in ("httpx", "uvicorn", "httptools", "uvloop", *extra_packages):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
        commit = git.stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "commit": commit,
        "load_average": os.getloadavg(),
    }


def write_json(name: str, payload: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``payload`` to ``path`` (default: a new ``bench/results/<name>-<time>.json``)."""
    RESULTS.mkdir(exist_ok=True)
    if path is None:
        path = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
