"""GFD's labels from a sample, as valid label values (pure)."""

from __future__ import annotations

from sparkrun_operator.agent.labels import desired, label_value
from sparkrun_operator.api import telemetry
from sparkrun_operator.api.telemetry import GPUSample, NodeSample, NVMLState


def _sample(*gpus: GPUSample, available: bool = True, driver: str | None = "550.54.15") -> NodeSample:
    return NodeSample(
        node="n", time=0.0, nvml=NVMLState(available=available, driver_version=driver), gpus=list(gpus)
    )


def test_gfd_labels_of_a_sample() -> None:
    gpu = GPUSample(index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=81559 * 1024 * 1024)
    assert desired(_sample(gpu, gpu.model_copy(update={"index": 1}))) == {
        telemetry.GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3",
        telemetry.GPU_MEMORY_LABEL: "81559",
        telemetry.GPU_COUNT_LABEL: "2",
        telemetry.DRIVER_VERSION_LABEL: "550.54.15",
        telemetry.DRIVER_MAJOR_LABEL: "550",
        telemetry.DRIVER_MINOR_LABEL: "54",
        telemetry.DRIVER_REV_LABEL: "15",
    }


def test_nothing_without_gpus_and_only_what_is_known() -> None:
    assert desired(_sample(available=False)) == {}
    assert desired(_sample()) == {}
    assert desired(_sample(GPUSample(index=0), driver="535.1")) == {
        telemetry.GPU_COUNT_LABEL: "1",
        telemetry.DRIVER_VERSION_LABEL: "535.1",
        telemetry.DRIVER_MAJOR_LABEL: "535",
        telemetry.DRIVER_MINOR_LABEL: "1",
    }


def test_label_values_are_valid() -> None:
    assert label_value("NVIDIA GeForce RTX 4090 (rev a1)") == "NVIDIA-GeForce-RTX-4090--rev-a1"
    assert label_value("-._x_.-") == "x"
    assert label_value("ä" * 100) == ""
    long = label_value("A" * 300)
    assert len(long) == 63
