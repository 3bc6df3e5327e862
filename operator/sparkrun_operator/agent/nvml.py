"""The GPUs of this node, read through the NVML binding (``nvidia-ml-py``'s ``pynvml``).

The binding is imported by module name (``--nvml-module``, default ``pynvml``) so tests hand in a
fake with the same interface (``tests/agent/fakenvml.py``). Nothing here raises for want of NVML:

- the binding missing, or ``nvmlInit`` failing (no driver, no ``libnvidia-ml.so`` in the
  container: ``NVML Shared Library Not Found``, ``Driver Not Loaded``) gives
  ``NVMLState(available=False, error=...)`` and no GPUs; init is tried again every
  ``retry_seconds``;
- each field of each GPU is one guarded call: an ``NVMLError`` there (``Not Supported`` on a
  consumer card, ``GPU is lost``) leaves that field ``None`` and the rest of the sample stands.

NVLink throughput comes from ``nvmlDeviceGetFieldValues`` with the
``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` fields per link (cumulative KiB; the older
``nvmlDeviceGetNvLinkUtilizationCounter`` is deprecated and gone from current drivers), turned into
rates between two samples. PCIe throughput is NVML's own rate (KB/s over its 20 ms window).

Every call blocks (a driver call can take milliseconds per GPU): :class:`NVMLSampler.sample`
runs in a worker thread (:mod:`.run`).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

from sparkrun_operator.api.telemetry import GPUProcess, GPUSample, NVMLState

log = logging.getLogger("sparkrun.agent.nvml")

T = TypeVar("T")

#: Seconds between two attempts at ``nvmlInit`` while NVML is unavailable.
RETRY_SECONDS: Final = 60.0
#: NVLink links asked about per GPU (NVML's ``NVML_NVLINK_MAX_LINKS``; fewer on older parts).
NVLINK_LINKS: Final = 18
#: The longest text kept from NVML or ``/proc/<pid>/comm``.
MAX_TEXT: Final = 256
#: Processes reported per GPU (the sample model's bound).
MAX_PROCESSES: Final = 256
#: GPUs reported per node (the sample model's bound).
MAX_GPUS: Final = 64
#: Processes reported per node, shared among its GPUs: the sample stays far below what a
#: consumer reads (``SAMPLE_MAX_BYTES``).
MAX_NODE_PROCESSES: Final = 2048


#: Control characters (C0, DEL, C1), shown as ``?``: a process names itself (``prctl``), and a
#: tenant's process is on the GPU.
_CONTROLS: Final = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0)], "?")


def text(value: Any) -> str | None:
    """NVML's strings (``bytes`` in older bindings, ``str`` in newer) and ``/proc`` names: cut to
    :data:`MAX_TEXT`, control characters as ``?``."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value[: MAX_TEXT * 4].decode("utf-8", errors="replace")
    return str(value)[: MAX_TEXT * 4].strip().translate(_CONTROLS)[:MAX_TEXT] or None


def cuda_version(value: int) -> str:
    """``nvmlSystemGetCudaDriverVersion``'s integer (``12040``) as ``12.4``."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def process_name(proc_root: Path, pid: int) -> str | None:
    """``/proc/<pid>/comm`` under the host's /proc (hostPID), or ``None``."""
    try:
        with (proc_root / str(pid) / "comm").open("rb") as handle:
            return text(handle.read(MAX_TEXT))
    except OSError:
        return None


@dataclass
class _Counter:
    """The last reading of a cumulative counter, for rates."""

    value: float
    at: float


@dataclass
class NVMLSampler:
    """Reads every GPU through the binding named ``module`` (blocking calls)."""

    module: str = "pynvml"
    proc_root: Path = Path("/proc")
    retry_seconds: float = RETRY_SECONDS
    clock: Callable[[], float] = time.monotonic
    #: Report each GPU process's name (``/proc/<pid>/comm``): off by default, since a sample goes
    #: to whoever may reach the agent and names every tenant's processes on the node (pids and
    #: GPU memory are reported either way).
    process_names: bool = False
    _nvml: ModuleType | None = field(default=None, init=False)
    _initialised: bool = field(default=False, init=False)
    _error: str | None = field(default=None, init=False)
    _next_try: float = field(default=0.0, init=False)
    _nvlink: dict[tuple[int, str], _Counter] = field(default_factory=dict, init=False)
    #: ``sample`` and ``close`` may run in two worker threads at shutdown: NVML is not re-entered.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def sample(self) -> tuple[NVMLState, list[GPUSample]]:
        """NVML's state and every GPU (none when NVML is unavailable)."""
        with self._lock:
            return self._sample()

    def close(self) -> None:
        """``nvmlShutdown`` when initialised."""
        with self._lock:
            self._shutdown()

    def _sample(self) -> tuple[NVMLState, list[GPUSample]]:
        if not self._initialised and not self._init():
            return NVMLState(available=False, error=self._error), []
        nvml = self._nvml
        assert nvml is not None
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as error:  # the driver went away: start over later
            self._lost(f"nvmlDeviceGetCount: {error}")
            return NVMLState(available=False, error=self._error), []
        state = NVMLState(
            available=True,
            driver_version=self._guard(lambda: text(nvml.nvmlSystemGetDriverVersion())),
            cuda_driver_version=self._guard(lambda: cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))),
        )
        listed = min(count, MAX_GPUS)
        per_gpu = min(MAX_PROCESSES, MAX_NODE_PROCESSES // max(listed, 1))
        gpus = [self._gpu(index, per_gpu) for index in range(listed)]
        return state, gpus

    def _shutdown(self) -> None:
        if self._initialised and self._nvml is not None:
            self._guard(self._nvml.nvmlShutdown)
        self._initialised = False

    def _init(self) -> bool:
        now = self.clock()
        if now < self._next_try:
            return False
        self._next_try = now + self.retry_seconds
        try:
            self._nvml = self._nvml or importlib.import_module(self.module)
        except ImportError as error:
            self._error = f"cannot import the NVML binding {self.module!r}: {error}"[:MAX_TEXT]
            return False
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as error:
            self._error = f"nvmlInit: {error}"[:MAX_TEXT]
            log.debug("NVML unavailable (%s); trying again in %.0f s", self._error, self.retry_seconds)
            return False
        self._initialised, self._error = True, None
        return True

    def _lost(self, error: str) -> None:
        self._error = error[:MAX_TEXT]
        self._shutdown()
        self._next_try = self.clock() + self.retry_seconds
        self._nvlink.clear()

    def _guard(self, call: Callable[[], T]) -> T | None:
        """``call()``, or ``None`` when NVML refuses it (not supported, GPU lost, ...)."""
        assert self._nvml is not None
        try:
            return call()
        except self._nvml.NVMLError as error:
            log.debug("NVML: %s", error)
            return None

    def _gpu(self, index: int, max_processes: int) -> GPUSample:
        nvml, guard = self._nvml, self._guard
        assert nvml is not None
        handle = guard(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return GPUSample(index=index)
        memory = guard(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power = guard(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        tx = guard(lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES))
        rx = guard(lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES))
        nvlink_tx, nvlink_rx = self._nvlink_rates(index, handle)
        return GPUSample(
            index=index,
            uuid=guard(lambda: text(nvml.nvmlDeviceGetUUID(handle))),
            name=guard(lambda: text(nvml.nvmlDeviceGetName(handle))),
            utilization_percent=guard(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            temperature_celsius=guard(
                lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
            ),
            power_watts=None if power is None else int(power) / 1000.0,
            ecc_single_bit_volatile=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_double_bit_volatile=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            sm_clock_mhz=guard(lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
            memory_clock_mhz=guard(lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))),
            pcie_tx_bytes_per_second=None if tx is None else int(tx) * 1024.0,
            pcie_rx_bytes_per_second=None if rx is None else int(rx) * 1024.0,
            nvlink_tx_bytes_per_second=nvlink_tx,
            nvlink_rx_bytes_per_second=nvlink_rx,
            processes=self._processes(handle)[:max_processes],
        )

    def _ecc(self, handle: Any, kind: int) -> int | None:
        nvml = self._nvml
        assert nvml is not None
        return self._guard(
            lambda: int(nvml.nvmlDeviceGetTotalEccErrors(handle, kind, nvml.NVML_VOLATILE_ECC))
        )

    def _processes(self, handle: Any) -> list[GPUProcess]:
        nvml = self._nvml
        assert nvml is not None
        used: dict[int, int | None] = {}
        queries: tuple[Callable[[Any], Any], ...] = (
            nvml.nvmlDeviceGetComputeRunningProcesses,
            nvml.nvmlDeviceGetGraphicsRunningProcesses,
        )
        for query in queries:
            for info in self._list(query, handle):
                pid, memory = int(info.pid), info.usedGpuMemory
                memory = None if memory is None else int(memory)
                known = used.get(pid)
                used[pid] = memory if known is None else max(known, memory or 0)
        return [
            GPUProcess(
                pid=pid,
                name=process_name(self.proc_root, pid) if self.process_names else None,
                used_memory_bytes=memory,
            )
            for pid, memory in sorted(used.items())[:MAX_PROCESSES]
        ]

    def _list(self, query: Callable[[Any], Any], handle: Any) -> list[Any]:
        return self._guard(lambda: list(query(handle))) or []

    def _nvlink_rates(self, index: int, handle: Any) -> tuple[float | None, float | None]:
        """Bytes per second over NVLink since the last sample (``None`` on the first one, or
        where NVML has no NVLink for this GPU)."""
        nvml = self._nvml
        assert nvml is not None
        fields = [
            (field_id, link)
            for field_id in (
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            )
            for link in range(NVLINK_LINKS)
        ]
        values = self._guard(lambda: list(nvml.nvmlDeviceGetFieldValues(handle, fields)))
        now = self.clock()
        rates: list[float | None] = []
        for direction, field_id in (
            ("tx", nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
            ("rx", nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
        ):
            total = _sum_field(nvml, values or [], field_id)
            rates.append(self._rate((index, direction), total, now))
        return rates[0], rates[1]

    def _rate(self, key: tuple[int, str], kib: float | None, now: float) -> float | None:
        if kib is None:
            self._nvlink.pop(key, None)
            return None
        last, self._nvlink[key] = self._nvlink.get(key), _Counter(kib, now)
        if last is None or now <= last.at or kib < last.value:
            return None
        return (kib - last.value) * 1024.0 / (now - last.at)


def _sum_field(nvml: ModuleType, values: list[Any], field_id: int) -> float | None:
    """The sum of the values of ``field_id`` NVML answered (``None`` when it answered none)."""
    answered = [v for v in values if v.fieldId == field_id and v.nvmlReturn == nvml.NVML_SUCCESS]
    if not answered:
        return None
    return float(sum(field_value(nvml, v) for v in answered))


def field_value(nvml: ModuleType, value: Any) -> float:
    """A ``c_nvmlFieldValue_t``'s value by its ``valueType``."""
    member = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(value.valueType, "ullVal")
    return float(getattr(value.value, member))
