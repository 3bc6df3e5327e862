"""A real terminal for CLI tests: a tmux server of the test's own, typed into with ``send-keys``
and read with ``capture-pane``, as a person at a terminal types and reads.

``Terminal.start(command)`` runs ``command`` (a shell line) in a new detached session of a private
tmux server (its own socket under the test's tmp dir, so parallel tests never share one);
:meth:`Terminal.wait_for` polls the screen (bounded) until a text appears; :meth:`Terminal.keys`
types (``"C-c"`` is Ctrl-C); :meth:`Terminal.screen` is what is visible now, :meth:`Terminal.history`
everything printed so far. The server is killed at the end.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.conftest import Require


class Terminal:
    """One tmux session on a private server."""

    def __init__(self, socket: Path, *, width: int = 160, height: int = 48) -> None:
        self.socket = socket
        self.width = width
        self.height = height
        self.session = "t"
        self.started = False

    def _tmux(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            ["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, timeout=20, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def start(self, command: str, *, env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        """Run ``command`` (a shell line) in the terminal; the pane stays open after it exits,
        printing ``[exit N]`` so tests read the exit code from the screen."""
        # NB: the tmux server inherits the test process's environment, whose COLUMNS/LINES (if
        # any) are not the pane's: programs that trust them (rich) would draw at the wrong width
        sized = {"COLUMNS": str(self.width), "LINES": str(self.height), **(env or {})}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sized.items())
        line = f'{command}; echo "[exit $?]"; sleep 3600'
        shell = (
            f"env {exports} bash --norc --noprofile -c {shlex.quote(line)}"
            if exports
            else (f"bash --norc --noprofile -c {shlex.quote(line)}")
        )
        args = ["new-session", "-d", "-s", self.session, "-x", str(self.width), "-y", str(self.height)]
        if cwd:
            args += ["-c", cwd]
        self._tmux(*args, shell)
        self._tmux("set-option", "-t", self.session, "history-limit", "20000")
        # NB: a detached session may still take another size (a client's, or tmux's default of
        # 80x24 on some versions): fix the window's size to what the test asked for
        self._tmux("set-option", "-g", "window-size", "manual")
        self._tmux("resize-window", "-t", self.session, "-x", str(self.width), "-y", str(self.height))
        self.started = True

    def keys(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names: ``"C-c"``, ``"Enter"``, or literal text)."""
        self._tmux("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        """What the terminal shows now."""
        return self._tmux("capture-pane", "-p", "-t", self.session)

    def history(self) -> str:
        """Everything printed so far (scrollback and screen)."""
        return self._tmux("capture-pane", "-p", "-S", "-", "-t", self.session)

    def wait_for(self, text: str, *, timeout: float = 60.0, whole: bool = False) -> str:
        """Poll the screen (``whole``: the scrollback too) every 0.2 s until ``text`` shows; the
        screen then. AssertionError with the last screen after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.history() if whole else self.screen()
            if text in seen:
                return seen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} did not show within {timeout} s; the terminal shows:\n{seen}")

    def exit_code(self, *, timeout: float = 60.0) -> int:
        """The command's exit code, once it printed ``[exit N]``."""
        seen = self.wait_for("[exit ", timeout=timeout, whole=True)
        tail = seen[seen.rindex("[exit ") + len("[exit ") :]
        return int(tail.split("]", 1)[0])

    def kill(self) -> None:
        if self.started:
            self._tmux("kill-server", check=False)
            self.started = False


@pytest.fixture
def terminal(require: Require) -> Iterator[Terminal]:
    """A fresh terminal (tmux must be installed: under CI=true its absence fails the test)."""
    require(shutil.which("tmux") is not None, "tmux is not installed (Debian package tmux)")
    # NB: a short socket path (sun_path is 108 bytes); tmp_path can be longer
    socket = Path(f"/tmp/sparkrun-tmux-{os.getpid()}-{time.monotonic_ns()}")
    term = Terminal(socket)
    try:
        yield term
    finally:
        term.kill()
        socket.unlink(missing_ok=True)
