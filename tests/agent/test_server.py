"""The agent served on loopback with the fake NVML: ``/v1/sample`` is a NodeSample, ``/metrics``
parses with Prometheus' own parser and carries DCGM exporter's names and labels, ``/healthz``."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkrun_operator.agent.run import AgentOptions, serve
from sparkrun_operator.api.telemetry import SAMPLE_MAX_BYTES, SAMPLE_PATH, NodeSample
from sparkrun_operator.cli import main
from tests.agent import fakenvml


@contextlib.asynccontextmanager
async def _agent(**options: object) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    stop, ready = asyncio.Event(), asyncio.Event()
    opts = AgentOptions(
        node="gpu-node-7", nvml_module="tests.agent.fakenvml", labels=False, interval=0.2, sock=sock
    )
    for key, value in options.items():
        setattr(opts, key, value)
    task = asyncio.create_task(serve(opts, stop=stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        sock.close()


async def _sample(
    client: httpx.AsyncClient, url: str, ready: Callable[[NodeSample], bool] = lambda _: True
) -> NodeSample:
    for _ in range(100):
        answer = await client.get(url + SAMPLE_PATH)
        if answer.status_code == 200:
            assert len(answer.content) <= SAMPLE_MAX_BYTES
            sample = NodeSample.model_validate(answer.json())
            if ready(sample):
                return sample
        await asyncio.sleep(0.1)
    raise AssertionError(f"no sample from {url}")


async def test_sample_metrics_and_health_with_two_gpus() -> None:
    fakenvml.configure(
        [
            fakenvml.FakeGPU(uuid="GPU-aaaa", compute=[(1, 2 * 1024**3)], nvlink_links=2),
            fakenvml.FakeGPU(uuid="GPU-bbbb", ecc_sbe=None, ecc_dbe=None),
        ]
    )
    async with _agent() as url, httpx.AsyncClient(timeout=5) as client:
        sample = await _sample(client, url, lambda s: s.gpus[0].nvlink_tx_bytes_per_second is not None)
        assert sample.node == "gpu-node-7"
        assert sample.nvml.available
        assert [g.uuid for g in sample.gpus] == ["GPU-aaaa", "GPU-bbbb"]
        assert sample.host.memory_total_bytes
        assert (await client.get(url + "/healthz")).status_code == 200
        answer = await client.get(url + "/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge"
    assert [s.labels for s in util.samples] == [
        {
            "gpu": "0",
            "UUID": "GPU-aaaa",
            "device": "nvidia0",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "gpu-node-7",
        },
        {
            "gpu": "1",
            "UUID": "GPU-bbbb",
            "device": "nvidia1",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "gpu-node-7",
        },
    ]
    values = {(f.name, s.labels.get("gpu")): s.value for f in families.values() for s in f.samples}
    assert values["DCGM_FI_DEV_GPU_UTIL", "0"] == 42.0
    assert values["DCGM_FI_DEV_FB_USED", "0"] == 10 * 1024.0  # MiB, as DCGM
    assert values["DCGM_FI_DEV_FB_FREE", "0"] == 70 * 1024.0
    assert values["DCGM_FI_DEV_POWER_USAGE", "0"] == 312.5  # W
    assert values["DCGM_FI_DEV_SM_CLOCK", "0"] == 1980.0
    assert values["DCGM_FI_DEV_GPU_TEMP", "1"] == 51.0
    assert values["DCGM_FI_PROF_PCIE_TX_BYTES", "0"] == 2048 * 1024.0
    assert values["DCGM_FI_PROF_NVLINK_TX_BYTES", "0"] > 0
    assert values["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "0"] == 0.0
    assert ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "1") not in values  # not supported: no series, never 0
    assert ("DCGM_FI_PROF_NVLINK_TX_BYTES", "1") not in values
    assert values["sparkrun_gpu_agent_gpu_processes", "0"] == 1.0
    assert values["sparkrun_gpu_agent_nvml_available", None] == 1.0
    assert values["sparkrun_gpu_agent_gpus", None] == 2.0
    assert values["sparkrun_gpu_agent_host_memory_total_bytes", None] > 0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
async def test_without_nvml_it_serves_gpus_unavailable(code: int) -> None:
    fakenvml.configure(init_error=code)
    async with _agent() as url, httpx.AsyncClient(timeout=5) as client:
        sample = await _sample(client, url)
        assert not sample.nvml.available
        assert sample.gpus == []
        assert sample.nvml.error == f"nvmlInit: {pynvml.NVMLError(code)}"
        assert (await client.get(url + "/healthz")).status_code == 200
        metrics = (await client.get(url + "/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    assert families["sparkrun_gpu_agent_nvml_available"].samples[0].value == 0.0
    assert families["DCGM_FI_DEV_GPU_UTIL"].samples == []


async def test_the_real_binding_on_this_machine_never_crashes() -> None:
    async with _agent(nvml_module="pynvml") as url, httpx.AsyncClient(timeout=5) as client:
        sample = await _sample(client, url)
    # NB: no driver here (the GPU path runs in hack/gpu-agent-check.sh); either way a sample came back
    assert sample.nvml.available == bool(sample.gpus) or sample.nvml.available


async def test_a_broken_binding_never_stops_the_agent_and_health_tells() -> None:
    state = fakenvml.configure([fakenvml.FakeGPU()])
    async with _agent() as url, httpx.AsyncClient(timeout=5) as client:
        await _sample(client, url)
        state.broken = True

        async def health() -> int:
            return (await client.get(url + "/healthz")).status_code

        for _ in range(100):
            if await health() == 503:
                break
            await asyncio.sleep(0.1)
        assert await health() == 503  # samples stopped: the liveness probe restarts the pod
        assert (await client.get(url + "/metrics")).status_code == 200
        state.broken = False
        for _ in range(100):
            if await health() == 200:
                break
            await asyncio.sleep(0.1)
        assert await health() == 200


@pytest.mark.parametrize("flag", [False, True])
async def test_process_names_are_opt_in(flag: bool, tmp_path: Path) -> None:
    """``/v1/sample`` names the GPU's processes only with ``--process-names`` (the chart's
    ``gpuAgent.processNames``); pids and GPU memory always."""
    argv = ["agent", "--no-labels", *(["--process-names"] if flag else [])]
    args = main.build_parser().parse_args(argv)
    assert args.process_names is flag
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("other-tenant\n")
    fakenvml.configure([fakenvml.FakeGPU(uuid="GPU-aaaa", compute=[(4242, 2 * 1024**3)])])
    async with (
        _agent(proc_root=tmp_path, process_names=args.process_names) as url,
        httpx.AsyncClient(timeout=5) as client,
    ):
        sample = await _sample(client, url)
        raw = (await client.get(url + SAMPLE_PATH)).text
    [process] = sample.gpus[0].processes
    assert (process.pid, process.used_memory_bytes) == (4242, 2 * 1024**3)
    assert process.name == ("other-tenant" if flag else None)
    assert ("other-tenant" in raw) is flag
