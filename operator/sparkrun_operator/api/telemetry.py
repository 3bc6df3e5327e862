"""What the GPU telemetry agent publishes, and the node labels it writes.

The agent (``sparkrun_operator.agent``, one pod per GPU node, an optional DaemonSet of the chart)
samples NVML and the host and answers ``GET /v1/sample`` with a :class:`NodeSample` (JSON, camelCase
on the wire like every resource). The shim's ``/v1/streams/monitor`` reads it from the agent pod on
each host; Prometheus reads ``/metrics`` (DCGM-exporter names). Every field an agent could not read
is ``None``: consumers show "unknown", never zero.

The node labels follow NVIDIA GPU feature discovery (GFD). The agent writes them only where GFD does
not run on the node (:data:`GFD_TIMESTAMP_LABEL` absent, or the label already carries the agent's
value); the operator reads them (placement, ``InferenceCluster`` status) whoever wrote them.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from sparkrun_operator.api.meta import KubeModel

#: GPU memory per GPU, MiB (GFD).
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
#: GPU product name, spaces as ``-`` (GFD).
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
#: GPUs on the node (GFD).
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
#: The kernel driver's version, in full (GFD's newer label, e.g. ``550.54.15``).
DRIVER_VERSION_LABEL: Final = "nvidia.com/cuda.driver-version.full"
#: The driver's major / minor / revision (GFD's older labels, still written by GFD).
DRIVER_MAJOR_LABEL: Final = "nvidia.com/cuda.driver.major"
DRIVER_MINOR_LABEL: Final = "nvidia.com/cuda.driver.minor"
DRIVER_REV_LABEL: Final = "nvidia.com/cuda.driver.rev"
#: Set by GFD on every node it labels: where present, the agent leaves the labels alone.
GFD_TIMESTAMP_LABEL: Final = "nvidia.com/gfd.timestamp"

#: The agent's pods: label selector the shim lists them by (in its own namespace) ...
AGENT_COMPONENT: Final = "gpu-agent"
AGENT_SELECTOR: Final = f"app.kubernetes.io/component={AGENT_COMPONENT}"
#: ... and the name of the container port that serves ``/v1/sample`` and ``/metrics``.
AGENT_PORT_NAME: Final = "telemetry"
#: The default port (DCGM exporter's).
AGENT_DEFAULT_PORT: Final = 9400
#: Where the agent answers a sample.
SAMPLE_PATH: Final = "/v1/sample"
#: The largest sample body a consumer reads.
SAMPLE_MAX_BYTES: Final = 1024 * 1024

_Text = Annotated[str, Field(max_length=256)]


class GPUProcess(KubeModel):
    """A process using a GPU (NVML's compute and graphics processes)."""

    pid: int = Field(ge=0, description="Process id on the host.")
    name: _Text | None = Field(default=None, description="Command name, when the host's /proc shows it.")
    used_memory_bytes: int | None = Field(default=None, ge=0, description="GPU memory it uses.")


class GPUSample(KubeModel):
    """One GPU."""

    index: int = Field(ge=0)
    uuid: _Text | None = None
    name: _Text | None = Field(default=None, description="Product name as NVML reports it.")
    utilization_percent: float | None = Field(default=None, ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    memory_total_bytes: int | None = Field(default=None, ge=0)
    temperature_celsius: float | None = None
    power_watts: float | None = Field(default=None, ge=0)
    ecc_single_bit_volatile: int | None = Field(default=None, ge=0)
    ecc_double_bit_volatile: int | None = Field(default=None, ge=0)
    sm_clock_mhz: int | None = Field(default=None, ge=0)
    memory_clock_mhz: int | None = Field(default=None, ge=0)
    pcie_tx_bytes_per_second: float | None = Field(default=None, ge=0)
    pcie_rx_bytes_per_second: float | None = Field(default=None, ge=0)
    nvlink_tx_bytes_per_second: float | None = Field(default=None, ge=0)
    nvlink_rx_bytes_per_second: float | None = Field(default=None, ge=0)
    processes: list[GPUProcess] = Field(default_factory=list, max_length=256)


class HostSample(KubeModel):
    """The host's CPU, memory and network (rates over the last sampling interval)."""

    cpu_percent: float | None = Field(default=None, ge=0)
    memory_used_bytes: int | None = Field(default=None, ge=0)
    memory_total_bytes: int | None = Field(default=None, ge=0)
    rx_bytes_per_second: float | None = Field(default=None, ge=0)
    tx_bytes_per_second: float | None = Field(default=None, ge=0)


class NVMLState(KubeModel):
    """Whether NVML could be read, and what it said about the driver."""

    available: bool = Field(description="NVML initialised and listed the GPUs.")
    error: _Text | None = Field(default=None, description="Why not (NVML's error), when not available.")
    driver_version: _Text | None = None
    cuda_driver_version: _Text | None = Field(default=None, description="e.g. 12.4")


class NodeSample(KubeModel):
    """``GET /v1/sample`` of the agent on ``node``."""

    node: _Text
    time: float = Field(description="Unix time of the sample.")
    nvml: NVMLState
    gpus: list[GPUSample] = Field(default_factory=list, max_length=64)
    host: HostSample = Field(default_factory=HostSample)
