"""A fake NVML binding with the real one's interface (``pynvml`` of nvidia-ml-py).

The agent imports its NVML binding by name (``--nvml-module tests.agent.fakenvml``). This module
has the same function names and parameters as ``pynvml`` (``tests/agent/test_fakenvml.py``
compares them with ``inspect``), answers with ``pynvml``'s own ctypes structures and
friendly objects, and raises ``pynvml.NVMLError`` with NVML's real codes. Only what a real GPU
would answer is made up.

Configure it in-process with :func:`configure`, or for a subprocess through the environment
variable :data:`ENV` (JSON: ``{"init_error": 12, "driver": "550.54.15", "gpus": [{...}]}``, keys
of :class:`FakeGPU`), read at ``nvmlInit``.
"""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass, field, fields
from typing import Any

import pynvml
from pynvml import (
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_VALUE_TYPE_DOUBLE,
    NVML_VALUE_TYPE_SIGNED_INT,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVML_VALUE_TYPE_UNSIGNED_LONG,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    NVML_VOLATILE_ECC,
    NVMLError,
)

#: What the agent reads besides the functions: pynvml's own values, re-exported.
__all__ = [
    "NVML_CLOCK_MEM",
    "NVML_CLOCK_SM",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_PCIE_UTIL_RX_BYTES",
    "NVML_PCIE_UTIL_TX_BYTES",
    "NVML_SUCCESS",
    "NVML_TEMPERATURE_GPU",
    "NVML_VALUE_TYPE_DOUBLE",
    "NVML_VALUE_TYPE_SIGNED_INT",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG",
    "NVML_VALUE_TYPE_UNSIGNED_INT",
    "NVML_VALUE_TYPE_UNSIGNED_LONG",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG",
    "NVML_VOLATILE_ECC",
    "NVMLError",
]

#: The environment variable a subprocess reads its configuration from.
ENV = "SPARKRUN_FAKE_NVML"


@dataclass
class FakeGPU:
    """One GPU's answers; ``None`` is NVML's ``Not Supported`` for that field."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 80 * 1024**3
    memory_used: int = 10 * 1024**3
    utilization: int | None = 42
    temperature: int | None = 51
    power_mw: int | None = 312_500
    ecc_sbe: int | None = 0
    ecc_dbe: int | None = 0
    sm_clock: int | None = 1980
    mem_clock: int | None = 2619
    pcie_tx_kb: int | None = 2048
    pcie_rx_kb: int | None = 1024
    #: NVLink links that answer, and the KiB each adds per call of nvmlDeviceGetFieldValues.
    nvlink_links: int = 0
    nvlink_kib_per_call: int = 1024
    #: (pid, used bytes or None) of compute processes, then of graphics processes.
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    #: Every call about this GPU fails with NVML_ERROR_GPU_IS_LOST.
    lost: bool = False
    _nvlink_kib: int = 0


@dataclass
class _State:
    gpus: list[FakeGPU] = field(default_factory=list)
    init_error: int | None = None
    driver: str = "550.54.15"
    cuda: int = 12040
    initialised: bool = False
    #: nvmlDeviceGetCount raises what no NVML binding should (a broken binding: not NVMLError).
    broken: bool = False
    calls: list[str] = field(default_factory=list)


STATE = _State()


def configure(
    gpus: list[FakeGPU] | None = None, *, init_error: int | None = None, driver: str = "550.54.15"
) -> _State:
    """Reset the fake to these GPUs (``init_error``: the code ``nvmlInit`` fails with)."""
    global STATE
    STATE = _State(gpus=list(gpus or []), init_error=init_error, driver=driver)
    return STATE


def _from_environment() -> None:
    raw = os.environ.get(ENV)
    if not raw:
        return
    data = json.loads(raw)
    names = {f.name for f in fields(FakeGPU)}
    gpus = [FakeGPU(**{k: v for k, v in gpu.items() if k in names}) for gpu in data.get("gpus", [])]
    configure(gpus, init_error=data.get("init_error"), driver=data.get("driver", "550.54.15"))


def _gpu(handle: Any) -> FakeGPU:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    index = ctypes.cast(handle, ctypes.c_void_p).value
    if index is None or not 1 <= index <= len(STATE.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = STATE.gpus[index - 1]
    if gpu.lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return gpu


def _supported(value: int | None) -> int:
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def nvmlInit() -> None:
    _from_environment()
    STATE.calls.append("nvmlInit")
    if STATE.init_error is not None:
        raise NVMLError(STATE.init_error)
    STATE.initialised = True


def nvmlShutdown() -> None:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    STATE.initialised = False


def nvmlSystemGetDriverVersion() -> str:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return STATE.driver


def nvmlSystemGetCudaDriverVersion() -> int:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return STATE.cuda


def nvmlDeviceGetCount() -> int:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if STATE.broken:
        raise RuntimeError("a binding that broke its interface")
    return len(STATE.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    if not STATE.initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if not 0 <= index < len(STATE.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if STATE.gpus[index].lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    # NB: an opaque c_nvmlDevice_t as the real binding returns; its address is index + 1
    return ctypes.cast(ctypes.c_void_p(index + 1), pynvml.c_nvmlDevice_t)


def nvmlDeviceGetName(handle: Any) -> str:
    return _gpu(handle).name


def nvmlDeviceGetUUID(handle: Any) -> str:
    return _gpu(handle).uuid


def nvmlDeviceGetUtilizationRates(handle: Any) -> Any:
    gpu = _gpu(handle)
    return pynvml.c_nvmlUtilization_t(gpu=_supported(gpu.utilization), memory=0)


def nvmlDeviceGetMemoryInfo(handle: Any, version: Any = None) -> Any:
    gpu = _gpu(handle)
    free = gpu.memory_total - gpu.memory_used
    return pynvml.c_nvmlMemory_t(total=gpu.memory_total, free=free, used=gpu.memory_used)


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _supported(_gpu(handle).temperature)


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    return _supported(_gpu(handle).power_mw)


def nvmlDeviceGetTotalEccErrors(handle: Any, errorType: int, counterType: int) -> int:
    gpu = _gpu(handle)
    if counterType != NVML_VOLATILE_ECC:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED:
        return _supported(gpu.ecc_sbe)
    if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
        return _supported(gpu.ecc_dbe)
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetClockInfo(handle: Any, type: int) -> int:
    gpu = _gpu(handle)
    clocks = {NVML_CLOCK_SM: gpu.sm_clock, NVML_CLOCK_MEM: gpu.mem_clock}
    if type not in clocks:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _supported(clocks[type])


def nvmlDeviceGetPcieThroughput(device: Any, counter: int) -> int:
    gpu = _gpu(device)
    if counter == NVML_PCIE_UTIL_TX_BYTES:
        return _supported(gpu.pcie_tx_kb)
    if counter == NVML_PCIE_UTIL_RX_BYTES:
        return _supported(gpu.pcie_rx_kb)
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetFieldValues(handle: Any, fieldIds: list[Any]) -> Any:
    gpu = _gpu(handle)
    gpu._nvlink_kib += gpu.nvlink_kib_per_call
    values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
    for value, asked in zip(values, fieldIds, strict=True):
        field_id, scope = asked if isinstance(asked, tuple) else (asked, 0)
        value.fieldId, value.scopeId = field_id, scope
        value.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        nvlink = field_id in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        if nvlink and scope < gpu.nvlink_links:
            value.nvmlReturn = NVML_SUCCESS
            value.value.ullVal = gpu._nvlink_kib
        else:
            value.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
    return values


def _processes(entries: list[tuple[int, int | None]]) -> list[Any]:
    found = []
    for pid, used in entries:
        info = pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_t(pid=pid, usedGpuMemory=used or 0))
        if used is None:  # as the binding does for NVML_VALUE_NOT_AVAILABLE
            info.usedGpuMemory = None
        found.append(info)
    return found


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:
    return _processes(_gpu(handle).compute)


def nvmlDeviceGetGraphicsRunningProcesses(handle: Any) -> list[Any]:
    return _processes(_gpu(handle).graphics)
