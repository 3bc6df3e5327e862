"""The fake NVML has the real binding's interface: every function and value it offers exists in
``pynvml`` with the same parameters and value, and its answers are ``pynvml``'s own types."""

from __future__ import annotations

import ctypes.util
import inspect

import pynvml
import pytest

from tests.agent import fakenvml


def _public(module: object, prefix: str) -> dict[str, object]:
    return {name: getattr(module, name) for name in dir(module) if name.startswith(prefix)}


def test_every_function_is_the_real_bindings_with_its_parameters() -> None:
    functions = _public(fakenvml, "nvml")
    assert len(functions) >= 18
    for name, fake in functions.items():
        real = getattr(pynvml, name, None)
        assert real is not None, f"pynvml has no {name}"
        fake_params = [p.name for p in inspect.signature(fake).parameters.values()]  # type: ignore[arg-type]
        real_params = [p.name for p in inspect.signature(real).parameters.values()]
        assert fake_params == real_params, name


def test_every_constant_and_the_error_are_the_real_ones() -> None:
    constants = _public(fakenvml, "NVML_")
    assert constants
    for name, value in constants.items():
        assert getattr(pynvml, name) == value, name
    assert fakenvml.NVMLError is pynvml.NVMLError


def test_answers_are_the_bindings_types_and_errors_its_codes() -> None:
    fakenvml.configure([fakenvml.FakeGPU(ecc_sbe=None, compute=[(7, 1024)]), fakenvml.FakeGPU(lost=True)])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fakenvml.nvmlDeviceGetCount()
    fakenvml.nvmlInit()
    handle = fakenvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, pynvml.c_nvmlDevice_t)
    assert isinstance(fakenvml.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
    assert isinstance(fakenvml.nvmlDeviceGetUtilizationRates(handle), pynvml.c_nvmlUtilization_t)
    values = fakenvml.nvmlDeviceGetFieldValues(handle, [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0)])
    assert isinstance(values[0], pynvml.c_nvmlFieldValue_t)
    assert values[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    (process,) = fakenvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert isinstance(process, pynvml.nvmlFriendlyObject)
    assert (process.pid, process.usedGpuMemory) == (7, 1024)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fakenvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        )
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fakenvml.nvmlDeviceGetHandleByIndex(1)
    fakenvml.configure(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        fakenvml.nvmlInit()


def test_the_real_binding_without_a_driver_fails_as_the_fake_does() -> None:
    # NB: on a machine with the driver, hack/gpu-agent-check.sh runs the real path instead
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("libnvidia-ml is installed here: hack/gpu-agent-check.sh covers this machine")
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlInit()
    assert caught.value.value in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
