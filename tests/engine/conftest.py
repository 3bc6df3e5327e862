"""Fixtures that run the vLLM stand-in as a real subprocess on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import pytest


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EngineProc:
    """One stand-in process."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> int | None:
        """The status of ``/health``, or ``None`` when nothing answers."""
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code
        except httpx.TransportError:
            return None

    def wait_healthy(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"engine exited {self.proc.returncode}:\n{self.log()}")
            if self.health() == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"engine not healthy after {timeout}s:\n{self.log()}")

    def wait_listening(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"engine exited {self.proc.returncode}:\n{self.log()}")
            if self.health() is not None:
                return
            time.sleep(0.05)
        raise AssertionError(f"engine not listening after {timeout}s:\n{self.log()}")

    def wait_exit(self, timeout: float = 20) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"engine still running after {timeout}s:\n{self.log()}") from None


class StartEngine(Protocol):
    def __call__(
        self, *args: str, env: dict[str, str] | None = None, port: int | None = None, wait: bool = True
    ) -> EngineProc: ...


class Launcher:
    """Starts stand-ins and terminates whatever is still running at :meth:`close`."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[EngineProc] = []

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, port: int | None = None, wait: bool = True
    ) -> EngineProc:
        """``launcher("org/model", "--served-model-name", "m", env={...})``.

        Adds ``--host 127.0.0.1 --port <free>``; waits for a healthy ``/health`` unless
        ``wait=False``.
        """
        port = free_port() if port is None else port
        log_path = self.log_dir / f"engine-{len(self.procs)}-{port}.log"
        full_env = {
            **os.environ,
            "SPARKRUN_ENGINE_MASTER_BIND": "127.0.0.1",
            "SPARKRUN_ENGINE_HEARTBEAT_SECONDS": "0.2",
            **(env or {}),
        }
        cmd = [sys.executable, "-m", "sparkrun_testbed.engine", "serve", *args]
        cmd += ["--host", "127.0.0.1", "--port", str(port)]
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(cmd, env=full_env, stdout=log_file, stderr=subprocess.STDOUT)
        engine = EngineProc(proc, port, log_path)
        self.procs.append(engine)
        if wait:
            engine.wait_healthy()
        return engine

    def close(self) -> None:
        for engine in self.procs:
            if engine.proc.poll() is None:
                engine.proc.send_signal(signal.SIGTERM)
        for engine in self.procs:
            try:
                engine.proc.wait(10)
            except subprocess.TimeoutExpired:
                engine.proc.kill()
                engine.proc.wait()


@pytest.fixture
def start_engine(tmp_path: Path) -> Iterator[StartEngine]:
    """Start stand-ins for one test (see :class:`Launcher`)."""
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.close()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProc]:
    """One chat stand-in shared by a module: served as ``m`` and ``m-alias``, sleep mode on."""
    launcher = Launcher(tmp_path_factory.mktemp("engine"))
    yield launcher(
        "org/model",
        "--served-model-name",
        "m",
        "m-alias",
        "--enable-sleep-mode",
        "--max-model-len",
        "512",
        "--some-future-flag",
        "7",
    )
    launcher.close()
