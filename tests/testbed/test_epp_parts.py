"""The endpoint picker's testbed parts that need no control plane: where the binary and its CRDs
are, the process runtime's image rule for the picker, and the engine stand-in's info gauges that
the picker reads (the picker itself runs in ``test_epp_picker.py``)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
import yaml

from sparkrun_operator.plan import enginemetrics
from sparkrun_testbed import epp, process_images
from sparkrun_testbed.binaries import BinariesMissing
from sparkrun_testbed.engine import Engine, Knobs, parse_args
from tests.gobinary import go_binary

PICKER = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"


def _fake_picker(root: Path) -> Path:
    """A cache-shaped directory with an executable ``bin/epp`` and the share files."""
    binary = root / "bin" / "epp"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    (root / "share" / "inferencepool").mkdir(parents=True)
    (root / "share" / "inferencepool" / "inference.networking.k8s.io_inferencepools.yaml").write_text("{}\n")
    (root / "share" / "gateway-api").mkdir(parents=True)
    for kind in ("gatewayclasses", "gateways", "httproutes"):
        (root / "share" / "gateway-api" / f"gateway.networking.k8s.io_{kind}.yaml").write_text("{}\n")
    return binary


def test_the_picker_image_runs_the_built_binary_with_the_pods_args(tmp_path: Path) -> None:
    binary = _fake_picker(tmp_path / "cache")
    rules = process_images.load_rules(picker=binary)
    path = process_images.pod_path(tmp_path / "shims")
    for image in (PICKER, "mirror.example.com/gateway-api-inference-extension/epp@sha256:00"):
        launch = process_images.resolve({"image": image, "args": ["--pool-name", "w"]}, rules, path=path)
        assert isinstance(launch, process_images.Launch), launch
        assert launch.argv == (str(binary), "--pool-name", "w")
    # Without a built picker, the image stays unmapped and says how to get one.
    refused = process_images.resolve({"image": PICKER}, process_images.DEFAULT_RULES, path=path)
    assert isinstance(refused, process_images.Refusal)
    assert refused.reason == process_images.IMAGE_NOT_MAPPED
    assert "hack/epp-bin.sh" in refused.message
    assert process_images.picker_rule(tmp_path / "absent") is None
    # Other images keep their rules; user rules still come first.
    user = tmp_path / "images.yaml"
    user.write_text("images:\n- image: '*/gateway-api-inference-extension/*'\n  entrypoint: [echo]\n")
    both = process_images.load_rules(user, picker=binary)
    first = process_images.resolve({"image": PICKER}, both, path=path)
    assert isinstance(first, process_images.Launch)
    assert Path(first.argv[0]).name == "echo"


def test_locate_honours_the_env_and_finds_the_crds_beside_the_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _fake_picker(tmp_path / "cache")
    monkeypatch.setenv(epp.BIN_ENV, str(binary))
    assert epp.locate() == binary.resolve()
    assert epp.inferencepool_crd(binary).name == "inference.networking.k8s.io_inferencepools.yaml"
    assert [p.name.split("_")[1] for p in epp.gateway_api_crds(binary)] == [
        "gatewayclasses.yaml",
        "gateways.yaml",
        "httproutes.yaml",
    ]
    with pytest.raises(BinariesMissing, match=r"hack/epp-bin\.sh"):
        epp.inferencepool_crd(tmp_path / "elsewhere" / "bin" / "epp")


def test_the_built_crds_are_the_pinned_apis() -> None:
    """When the picker is built (always under CI), its share dir holds the v1 InferencePool CRD and
    Gateway API's standard HTTPRoute/Gateway/GatewayClass."""
    binary = go_binary(epp.locate, epp.build, "hack/epp-bin.sh")
    pool = yaml.safe_load(epp.inferencepool_crd(binary).read_text())
    assert pool["spec"]["group"] == "inference.networking.k8s.io"
    assert [v["name"] for v in pool["spec"]["versions"]] == ["v1"]
    ref = pool["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"selector", "targetPorts", "endpointPickerRef"} <= set(ref["required"])
    kinds = [yaml.safe_load(p.read_text())["spec"]["names"]["kind"] for p in epp.gateway_api_crds(binary)]
    assert kinds == ["GatewayClass", "Gateway", "HTTPRoute"]


VENDORED_CRD = Path(__file__).resolve().parents[2] / "helm/sparkrun-operator/files/inferencepool-crd.yaml"


def test_the_charts_vendored_crd_is_the_pinned_modules_file() -> None:
    """The chart's ``files/inferencepool-crd.yaml`` (``inferencePool.installCRD``) is, below its
    comment header, byte for byte the pinned module's CRD (the copy ``hack/epp-bin.sh`` takes
    from the module cache), and the header names the module, version and path it came from."""
    binary = go_binary(epp.locate, epp.build, "hack/epp-bin.sh")
    vendored = VENDORED_CRD.read_bytes()
    lines = vendored.splitlines(keepends=True)
    header = [ln for ln in lines if ln.startswith(b"#")]
    body = b"".join(lines[len(header) :])
    assert lines[: len(header)] == header, "the header is one block of comments at the top"
    assert body == epp.inferencepool_crd(binary).read_bytes()
    text = b"".join(header).decode()
    for named in (
        "sigs.k8s.io/gateway-api-inference-extension",
        "v1.5.0",
        "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
    ):
        assert named in text


def _metrics(*argv: str) -> str:
    engine = Engine(parse_args(["serve", "m", *argv]), Knobs.from_env({}))
    return engine.render_metrics()


def _sample(text: str, name: str) -> tuple[dict[str, str], float]:
    """The one sample of ``name``: its labels and value (labels here never hold commas or quotes)."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + "{")]
    labels, value = line[len(name) + 1 :].rsplit("} ", 1)
    pairs = (item.split("=", 1) for item in labels.split(",") if item)
    return {k: v.strip('"') for k, v in pairs}, float(value)


def test_the_stand_in_exports_the_info_gauges_the_picker_reads() -> None:
    text = _metrics("--max-num-seqs", "4", "--max-model-len", "1024", "--block-size", "32")
    labels, value = _sample(text, "vllm:cache_config_info")
    assert value == 1.0
    assert labels["block_size"] == "32"
    assert labels["num_gpu_blocks"] == str(4 * 1024 // 32)
    assert "# TYPE vllm:cache_config_info gauge" in text
    # As vLLM: no LoRA gauge unless LoRA is enabled.
    assert "vllm:lora_requests_info" not in text
    before = time.time()
    labels, value = _sample(_metrics("--enable-lora", "--max-loras", "3"), "vllm:lora_requests_info")
    assert labels == {"max_lora": "3", "waiting_lora_adapters": "", "running_lora_adapters": ""}
    assert before <= value <= time.time()
    defaults, _ = _sample(_metrics(), "vllm:cache_config_info")
    assert defaults["block_size"] == "16"
    # The operator's own reader still sees the load gauges beside them.
    load = enginemetrics.parse(text.encode())
    assert load is not None
    assert (load.waiting, load.running, load.kv_cache_usage) == (0, 0, 0)
