"""The agent's process: sample every ``interval`` seconds, serve the endpoints, label the node.

Each round samples NVML and the host in a worker thread (driver calls and /proc reads block),
keeps the result for ``/v1/sample`` and ``/metrics``, then (with a node name and a cluster)
publishes the node labels. Nothing in a round stops the agent: NVML missing is a sample that
says so, an apiserver error is logged and retried next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from sparkrun_operator.agent.host import HostSampler
from sparkrun_operator.agent.labels import Publisher
from sparkrun_operator.agent.metrics import Exporter
from sparkrun_operator.agent.nvml import NVMLSampler
from sparkrun_operator.agent.server import app
from sparkrun_operator.api.telemetry import AGENT_DEFAULT_PORT, NodeSample
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.render import keys

log = logging.getLogger("sparkrun.agent")

#: Rounds a sample may be late before ``/healthz`` says the loop stalled (at least 2 s more than one).
STALE_ROUNDS = 3


@dataclass
class AgentOptions:
    """How to run the agent (the ``sparkrun-k8s agent`` flags)."""

    node: str = ""
    host: str = "0.0.0.0"
    port: int = AGENT_DEFAULT_PORT
    interval: float = 5.0
    nvml_module: str = "pynvml"
    proc_root: Path = Path("/proc")
    net_pid: str = "1"
    #: Write the GFD node labels (needs ``node`` and a cluster).
    labels: bool = True
    #: Report the names (``comm``) of the processes on each GPU (``--process-names``).
    process_names: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    nvml_retry_seconds: float = 60.0
    #: Serve on this already-listening socket instead of host:port (tests).
    sock: socket.socket | None = None


@dataclass
class Agent:
    """The samplers, the latest sample and its exporter (the server's :class:`~.server.Source`)."""

    options: AgentOptions
    clock: Callable[[], float] = time.monotonic
    gpus: NVMLSampler = field(init=False)
    host: HostSampler = field(init=False)
    exporter: Exporter = field(default_factory=Exporter, init=False)
    latest: NodeSample | None = field(default=None, init=False)
    sampled_at: float | None = field(default=None, init=False)

    @property
    def node(self) -> str:
        """The node the samples name: ``--node``, else this host's name."""
        return self.options.node or socket.gethostname()

    def __post_init__(self) -> None:
        o = self.options
        self.gpus = NVMLSampler(
            o.nvml_module, o.proc_root, o.nvml_retry_seconds, process_names=o.process_names
        )
        self.host = HostSampler(o.proc_root, o.net_pid)

    def take(self) -> NodeSample:
        """One sample (blocking: run it in a thread)."""
        state, gpus = self.gpus.sample()
        if self.latest is None or self.latest.nvml.available != state.available:
            if state.available:
                log.info(
                    "NVML: %d GPU(s), driver %s, CUDA %s",
                    len(gpus),
                    state.driver_version,
                    state.cuda_driver_version,
                )
            else:
                log.warning("NVML unavailable: %s (GPUs reported unavailable; trying again)", state.error)
        sample = NodeSample(
            node=self.node,
            time=time.time(),
            nvml=state,
            gpus=gpus,
            host=self.host.sample(),
        )
        self.latest, self.sampled_at = sample, self.clock()
        self.exporter.update(sample)
        return sample

    def metrics(self) -> bytes:
        return self.exporter.render()

    def fresh(self, now: float) -> bool:
        return self.sampled_at is not None and now - self.sampled_at <= max(
            STALE_ROUNDS * self.options.interval, self.options.interval + 2
        )


async def _rounds(agent: Agent, publisher: Publisher | None, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            sample: NodeSample | None = await asyncio.to_thread(agent.take)
        except Exception:  # NB: a binding that breaks its own interface; /healthz goes stale
            log.exception("sampling failed")
            sample = None
        if publisher is not None and sample is not None:
            try:
                await publisher.publish(sample)
            except (errors.KubeError, LookupError) as error:
                log.warning("node labels of %s not written: %s", publisher.node, error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), agent.options.interval)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to whoever runs :func:`serve`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


async def serve(
    options: AgentOptions, *, stop: asyncio.Event | None = None, ready: asyncio.Event | None = None
) -> None:
    """Run the agent until ``stop`` is set."""
    stop = stop or asyncio.Event()
    agent = Agent(options)
    kube: Kube | None = None
    if options.labels and options.node:
        kube = await Kube.connect(
            field_manager=keys.GPU_AGENT_MANAGER, kubeconfig=options.kubeconfig, context=options.context
        )
    elif options.labels:
        log.warning("no node name (--node or $NODE_NAME): node labels are not written")
    publisher = Publisher(kube, options.node) if kube is not None else None
    config = uvicorn.Config(
        app(agent),
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    server = _Server(config)
    sockets = [options.sock] if options.sock is not None else None
    serving = asyncio.create_task(server.serve(sockets=sockets))
    sampling = asyncio.create_task(_rounds(agent, publisher, stop))
    stopping = asyncio.create_task(stop.wait())
    try:
        while not server.started:
            if serving.done():
                break
            await asyncio.sleep(0.05)  # NB: uvicorn has no event for "listening"
        if server.started:
            where = f"port {options.port}" if options.sock is None else "the given socket"
            log.info("serving /v1/sample, /metrics and /healthz on %s (node %s)", where, agent.node)
        if ready is not None:
            ready.set()
        await asyncio.wait({serving, sampling, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        stopping.cancel()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        await asyncio.to_thread(agent.gpus.close)
        if kube is not None:
            await kube.close()
