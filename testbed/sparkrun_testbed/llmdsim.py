"""llm-d-inference-sim: a second, independent OpenAI-compatible upstream (Go, from llm-d).

``hack/llmd-sim-bin.sh`` builds it from the pinned wrapper module ``hack/llmd-sim/`` into
``<cache>/llmd-sim-<key>/bin``; the binary comes from env ``SPARKRUN_LLMD_SIM_BIN`` (a path to
the executable) when set, else from ``hack/llmd-sim-bin.sh --print``. :class:`Sim` runs one on
loopback with the simulated ("dummy") tokenizer: without ``--force-dummy-tokenizer`` the
simulator asks the Hugging Face hub whether the model name exists, which must never happen here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .binaries import GoTool

BIN_ENV = "SPARKRUN_LLMD_SIM_BIN"
NAME = "llm-d-inference-sim"
VERSION = "v0.10.2"
_SCRIPT = Path("hack") / "llmd-sim-bin.sh"


_TOOL = GoTool(NAME, BIN_ENV, _SCRIPT)


def locate(repo: Path | None = None) -> Path:
    """The configured binary's path (it may not be built yet: check ``os.access(path, X_OK)``)."""
    return _TOOL.locate(repo)


def build(repo: Path | None = None) -> Path:
    """Run ``hack/llmd-sim-bin.sh`` (a cold build takes minutes); its log goes to stderr."""
    return _TOOL.build(repo)


@dataclass
class Options:
    """The simulator's flags that the tests and the benchmark use (``--help`` lists the rest)."""

    model: str = "sim-model"
    mode: str = "random"  # "echo": answers the prompt (chat: the last message); "random": sentences
    time_to_first_token: str = "0ms"
    inter_token_latency: str = "0ms"
    max_num_seqs: int = 256  # requests processed at once; the rest wait in its queue
    max_model_len: int = 8192
    #: The simulator's random seed (tool-call choices, random answers): fixed, so that a run's
    #: answers are the same on every machine (unset, it seeds from the clock).
    seed: int = 26
    extra: tuple[str, ...] = ()

    def args(self, port: int) -> list[str]:
        return [
            *("--port", str(port), "--model", self.model, "--mode", self.mode),
            *("--time-to-first-token", self.time_to_first_token),
            *("--inter-token-latency", self.inter_token_latency),
            *("--max-num-seqs", str(self.max_num_seqs), "--max-model-len", str(self.max_model_len)),
            "--force-dummy-tokenizer",
            *("--seed", str(self.seed)),
            *self.extra,
        ]


@dataclass
class Sim:
    """One simulator process on 127.0.0.1, its output in ``log_path``."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    options: Options = field(default_factory=Options)

    @classmethod
    def start(cls, binary: Path, port: int, log_path: Path, options: Options | None = None) -> Sim:
        options = options or Options()
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [str(binary), *options.args(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        sim = cls(proc, port, log_path, options)
        try:
            sim.wait_ready()
        except BaseException:
            sim.stop()
            raise
        return sim

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{NAME} exited {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{NAME} not healthy after {timeout}s:\n{self.log()[-4000:]}")

    def stop(self, grace: float = 5) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(grace)
