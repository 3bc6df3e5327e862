"""The NVML sampler against the fake binding: every field, fields NVML does not support, a GPU
lost mid-run, NVML missing (never a crash; init retried), NVLink rates between samples."""

from __future__ import annotations

import os
from pathlib import Path

import pynvml

from sparkrun_operator.agent.nvml import NVMLSampler, cuda_version
from tests.agent import fakenvml

FAKE = "tests.agent.fakenvml"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _h100(index: int, **changes: object) -> fakenvml.FakeGPU:
    return fakenvml.FakeGPU(uuid=f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000", **changes)  # type: ignore[arg-type]


def test_two_gpus_every_field(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("vllm\x1b[31m\n")
    fakenvml.configure(
        [
            _h100(0, compute=[(4242, 30 * 1024**3)], graphics=[(4242, 1024), (99, None)], nvlink_links=4),
            _h100(1, utilization=0, memory_used=0),
        ]
    )
    clock = Clock()
    sampler = NVMLSampler(FAKE, proc_root=tmp_path, clock=clock, process_names=True)
    state, gpus = sampler.sample()
    assert state.available
    assert state.error is None
    assert (state.driver_version, state.cuda_driver_version) == ("550.54.15", "12.4")
    assert [g.index for g in gpus] == [0, 1]
    first = gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.uuid == "GPU-00000000-aaaa-bbbb-cccc-000000000000"
    assert first.utilization_percent == 42.0
    assert (first.memory_used_bytes, first.memory_total_bytes) == (10 * 1024**3, 80 * 1024**3)
    assert (first.temperature_celsius, first.power_watts) == (51.0, 312.5)
    assert (first.ecc_single_bit_volatile, first.ecc_double_bit_volatile) == (0, 0)
    assert (first.sm_clock_mhz, first.memory_clock_mhz) == (1980, 2619)
    assert (first.pcie_tx_bytes_per_second, first.pcie_rx_bytes_per_second) == (2048 * 1024.0, 1024 * 1024.0)
    # NVLink: a rate needs two readings of the cumulative counters
    assert first.nvlink_tx_bytes_per_second is None
    assert [(p.pid, p.name, p.used_memory_bytes) for p in first.processes] == [
        (99, None, None),
        (4242, "vllm?[31m", 30 * 1024**3),  # a process names itself: no control characters
    ]
    assert gpus[1].utilization_percent == 0.0
    assert gpus[1].processes == []
    clock.now += 2.0
    _, gpus = sampler.sample()
    # 4 links each grew by 1024 KiB in 2 s
    assert gpus[0].nvlink_tx_bytes_per_second == 4 * 1024 * 1024 / 2.0
    assert gpus[0].nvlink_rx_bytes_per_second == 4 * 1024 * 1024 / 2.0
    assert gpus[1].nvlink_tx_bytes_per_second is None  # no NVLink on this one
    sampler.close()
    assert not fakenvml.STATE.initialised


def test_fields_nvml_does_not_support_are_none_and_the_rest_stands() -> None:
    fakenvml.configure(
        [
            _h100(
                0,
                ecc_sbe=None,
                ecc_dbe=None,
                power_mw=None,
                pcie_tx_kb=None,
                temperature=None,
                utilization=None,
            )
        ]
    )
    _, (gpu,) = NVMLSampler(FAKE).sample()
    assert gpu.ecc_single_bit_volatile is None
    assert gpu.ecc_double_bit_volatile is None
    assert gpu.power_watts is None
    assert gpu.temperature_celsius is None
    assert gpu.utilization_percent is None
    assert gpu.pcie_tx_bytes_per_second is None
    assert gpu.pcie_rx_bytes_per_second == 1024 * 1024.0
    assert gpu.memory_total_bytes == 80 * 1024**3
    assert gpu.sm_clock_mhz == 1980


def test_a_gpu_lost_mid_run_is_reported_without_its_readings() -> None:
    state = fakenvml.configure([_h100(0), _h100(1)])
    sampler = NVMLSampler(FAKE)
    _, gpus = sampler.sample()
    assert gpus[1].utilization_percent == 42.0
    state.gpus[1].lost = True
    nvml, gpus = sampler.sample()
    assert nvml.available
    assert gpus[0].utilization_percent == 42.0
    lost = gpus[1]
    assert lost.index == 1
    assert lost.uuid is None
    assert lost.utilization_percent is None
    assert lost.memory_total_bytes is None
    assert lost.processes == []


def test_no_library_reports_unavailable_and_retries_every_minute() -> None:
    state = fakenvml.configure(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    clock = Clock()
    sampler = NVMLSampler(FAKE, clock=clock)
    nvml, gpus = sampler.sample()
    assert not nvml.available
    assert gpus == []
    assert nvml.error == "nvmlInit: NVML Shared Library Not Found"
    assert sampler.sample()[0].error == nvml.error
    assert state.calls == ["nvmlInit"]  # not again within the minute
    clock.now += 61
    os.environ.pop(fakenvml.ENV, None)
    state.init_error = None
    state.gpus = [_h100(0)]
    nvml, gpus = sampler.sample()
    assert nvml.available
    assert len(gpus) == 1
    assert state.calls == ["nvmlInit", "nvmlInit"]


def test_driver_not_loaded_and_a_missing_binding() -> None:
    fakenvml.configure(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    nvml, _ = NVMLSampler(FAKE).sample()
    assert nvml.error == "nvmlInit: Driver Not Loaded"
    nvml, gpus = NVMLSampler("no_such_nvml_binding").sample()
    assert not nvml.available
    assert gpus == []
    assert nvml.error is not None
    assert "no_such_nvml_binding" in nvml.error


def test_the_driver_going_away_after_init_is_unavailable_then_recovers() -> None:
    state = fakenvml.configure([_h100(0)])
    clock = Clock()
    sampler = NVMLSampler(FAKE, clock=clock)
    assert sampler.sample()[0].available
    state.initialised = False  # as after a driver unload: every call is Uninitialized
    nvml, gpus = sampler.sample()
    assert not nvml.available
    assert gpus == []
    assert nvml.error == "nvmlDeviceGetCount: Uninitialized"
    clock.now += 61
    assert sampler.sample()[0].available


def test_cuda_version() -> None:
    assert cuda_version(12040) == "12.4"
    assert cuda_version(11080) == "11.8"


def test_processes_are_bounded_per_node(tmp_path: Path) -> None:
    busy = [(pid, 1024) for pid in range(1, 301)]
    fakenvml.configure([_h100(i, compute=busy) for i in range(40)])
    _, gpus = NVMLSampler(FAKE, proc_root=tmp_path).sample()
    assert [len(g.processes) for g in gpus] == [2048 // 40] * 40
    fakenvml.configure([_h100(0, compute=busy)])
    _, (gpu,) = NVMLSampler(FAKE, proc_root=tmp_path).sample()
    assert len(gpu.processes) == 256


def test_process_names_only_when_asked(tmp_path: Path) -> None:
    """By default a GPU's processes are pids and GPU memory: their names (a tenant's ``comm``)
    are not read, let alone reported."""
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("tenant-secret-job\n")
    fakenvml.configure([_h100(0, compute=[(4242, 1024)])])
    quiet = NVMLSampler(FAKE, proc_root=tmp_path)
    _, gpus = quiet.sample()
    quiet.close()
    assert [(p.pid, p.name, p.used_memory_bytes) for p in gpus[0].processes] == [(4242, None, 1024)]
    named = NVMLSampler(FAKE, proc_root=tmp_path, process_names=True)
    _, gpus = named.sample()
    named.close()
    assert [p.name for p in gpus[0].processes] == ["tenant-secret-job"]
