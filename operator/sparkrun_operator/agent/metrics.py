"""A :class:`NodeSample` as Prometheus text, with DCGM exporter's names where they exist.

Each GPU series carries DCGM exporter's labels (``gpu``, ``UUID``, ``device``, ``modelName``,
``Hostname``) and its units (framebuffer in MiB, power in W, clocks in MHz), so dashboards made
for ``dcgm-exporter`` work unchanged. Everything is exposed as a gauge of the latest sample (the
ECC totals are counts since the driver loaded, as DCGM's). What DCGM has no name for is
``sparkrun_gpu_agent_*``. A field NVML could not read is left out (no series), never zero.
The mapping is documented in ``docs/telemetry.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from sparkrun_operator.api.telemetry import GPUSample, NodeSample

MIB: Final = 1024 * 1024

GPU_LABELS: Final = ("gpu", "UUID", "device", "modelName", "Hostname")

_Value = Callable[[GPUSample], float | None]


def _fb_free(gpu: GPUSample) -> float | None:
    if gpu.memory_total_bytes is None or gpu.memory_used_bytes is None:
        return None
    return max(gpu.memory_total_bytes - gpu.memory_used_bytes, 0) / MIB


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


#: (name, help, value) of each per-GPU series.
GPU_SERIES: Final[tuple[tuple[str, str, _Value], ...]] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.utilization_percent),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: _mib(g.memory_used_bytes)),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_celsius),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_watts),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.memory_clock_mhz),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        lambda g: g.ecc_single_bit_volatile,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g.ecc_double_bit_volatile,
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus (in bytes per second).",
        lambda g: g.pcie_tx_bytes_per_second,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus (in bytes per second).",
        lambda g: g.pcie_rx_bytes_per_second,
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, not including protocol headers (in bytes per second).",
        lambda g: g.nvlink_tx_bytes_per_second,
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, not including protocol headers (in bytes per second).",
        lambda g: g.nvlink_rx_bytes_per_second,
    ),
    (
        "sparkrun_gpu_agent_gpu_memory_total_bytes",
        "GPU memory in total (in bytes).",
        lambda g: None if g.memory_total_bytes is None else float(g.memory_total_bytes),
    ),
    ("sparkrun_gpu_agent_gpu_processes", "Processes using the GPU.", lambda g: float(len(g.processes))),
)


def _gpu_labels(sample: NodeSample, gpu: GPUSample) -> list[str]:
    return [str(gpu.index), gpu.uuid or "", f"nvidia{gpu.index}", gpu.name or "", sample.node]


class SampleCollector:
    """A collector of the latest sample (``None`` before the first one: no series)."""

    def __init__(self) -> None:
        self.sample: NodeSample | None = None

    def collect(self) -> Iterator[Metric]:
        sample = self.sample
        if sample is None:
            return
        yield from self._gpus(sample)
        yield from self._node(sample)

    def _gpus(self, sample: NodeSample) -> Iterator[Metric]:
        for name, help_text, value in GPU_SERIES:
            family = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
            for gpu in sample.gpus:
                reading = value(gpu)
                if reading is not None:
                    family.add_metric(_gpu_labels(sample, gpu), float(reading))
            yield family

    def _node(self, sample: NodeSample) -> Iterator[Metric]:
        labels = ("Hostname",)
        available = GaugeMetricFamily(
            "sparkrun_gpu_agent_nvml_available", "1 when NVML answered, else 0.", labels=labels
        )
        available.add_metric([sample.node], 1.0 if sample.nvml.available else 0.0)
        yield available
        count = GaugeMetricFamily("sparkrun_gpu_agent_gpus", "GPUs NVML listed.", labels=labels)
        count.add_metric([sample.node], float(len(sample.gpus)))
        yield count
        host = sample.host
        for name, help_text, reading in (
            ("sparkrun_gpu_agent_host_cpu_percent", "Host CPU busy (in %).", host.cpu_percent),
            ("sparkrun_gpu_agent_host_memory_used_bytes", "Host memory used.", host.memory_used_bytes),
            ("sparkrun_gpu_agent_host_memory_total_bytes", "Host memory.", host.memory_total_bytes),
            (
                "sparkrun_gpu_agent_host_network_receive_bytes_per_second",
                "Host network received, every interface but lo.",
                host.rx_bytes_per_second,
            ),
            (
                "sparkrun_gpu_agent_host_network_transmit_bytes_per_second",
                "Host network transmitted, every interface but lo.",
                host.tx_bytes_per_second,
            ),
        ):
            family = GaugeMetricFamily(name, help_text, labels=labels)
            if reading is not None:
                family.add_metric([sample.node], float(reading))
            yield family


class Exporter:
    """``/metrics``: the latest sample in a registry of its own."""

    def __init__(self) -> None:
        self.collector = SampleCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)

    def update(self, sample: NodeSample) -> None:
        self.collector.sample = sample

    def render(self) -> bytes:
        return generate_latest(self.registry)
