"""The memory fit (``plan/fit.py``), the model's shape (``api/modelshape.py``,
``runtime/modelshape.py``), their way into ModelCache status and the workload gate. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.api.modelshape import ModelShape, shape_from_config, shape_from_event
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan import fit, observe
from sparkrun_operator.plan.modelcache import (
    CacheObservation,
    ObservedClaim,
    ObservedDownloadPod,
    ObservedJob,
)
from sparkrun_operator.plan.modelcache import job_name as cache_job_name
from sparkrun_operator.plan.modelcache import plan as cache_plan
from sparkrun_operator.plan.workload import NodeCapacity, Observation, ObservedCache, plan
from sparkrun_operator.runtime import modelshape

GIB = 1 << 30
NOW = dt.datetime(2026, 12, 6, 10, 0, tzinfo=dt.UTC)
#: Qwen3-8B's config.json (the facts that matter) and its weight files' size.
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 40960,
}
QWEN3_8B_WEIGHTS = 16_381_470_208
QWEN3_8B_SHAPE = shape_from_config(QWEN3_8B, weights_bytes=QWEN3_8B_WEIGHTS)


# -- the shape of config.json -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (QWEN3_8B, (36, 8, 128, "bfloat16", 2, 40960)),
        # no GQA: KV heads = attention heads; no head_dim: hidden / heads; torch. prefix
        (
            {
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "hidden_size": 768,
                "torch_dtype": "torch.float16",
                "max_position_embeddings": 1024,
            },
            (12, 12, 64, "float16", 2, 1024),
        ),
        # multimodal: the text part is read, the top level's dtype used
        (
            {
                "torch_dtype": "bfloat16",
                "vision_config": {"num_hidden_layers": 27, "num_attention_heads": 16},
                "text_config": {
                    "num_hidden_layers": 34,
                    "num_attention_heads": 8,
                    "num_key_value_heads": 4,
                    "head_dim": 256,
                    "max_position_embeddings": 131072,
                },
            },
            (34, 4, 256, "bfloat16", 2, 131072),
        ),
        # newer transformers write "dtype"
        (
            {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 64, "dtype": "float32"},
            (2, 2, 64, "float32", 4, None),
        ),
        # hostile: huge numbers, wrong types, booleans, an unknown dtype, head size not whole
        (
            {
                "num_hidden_layers": 10**30,
                "num_key_value_heads": "8",
                "num_attention_heads": True,
                "hidden_size": 1000,
                "torch_dtype": "float128",
                "max_position_embeddings": -5,
            },
            (None, None, None, None, None, None),
        ),
        (
            {"num_hidden_layers": 1.5, "num_attention_heads": 7, "hidden_size": 1000},
            (None, 7, None, None, None, None),
        ),
        ([1, 2, 3], (None, None, None, None, None, None)),
        ("not an object", (None, None, None, None, None, None)),
        (None, (None, None, None, None, None, None)),
    ],
)
def test_the_shape_of_a_config(doc: Any, expected: tuple[Any, ...]) -> None:
    shape = shape_from_config(doc)
    got = (
        shape.num_hidden_layers,
        shape.num_key_value_heads,
        shape.head_dim,
        shape.dtype,
        shape.dtype_bytes,
        shape.max_position_embeddings,
    )
    assert got == expected
    # what the downloader prints, read back by the operator, is the same shape
    assert shape_from_event(shape.model_dump(exclude_none=True)) == shape


def test_a_forged_shape_line_gives_unknown_facts() -> None:
    forged = {"num_hidden_layers": 1 << 40, "head_dim": "128", "dtype": "int4", "weights_bytes": -1, "x": 1}
    assert shape_from_event(forged) == ModelShape()
    assert shape_from_event([1]) is None
    assert shape_from_event({"dtype_bytes": 8, "dtype": "bfloat16"}) == ModelShape(
        dtype="bfloat16", dtype_bytes=2
    )


def _snapshot(tmp_path: Path, content: bytes | None) -> Path:
    snap = tmp_path / "snap"
    snap.mkdir()
    if content is not None:
        (snap / "config.json").write_bytes(content)
    return snap


@pytest.mark.parametrize(
    ("content", "layers"),
    [
        (json.dumps(QWEN3_8B).encode(), 36),
        (None, None),  # no config.json (allowPatterns left it out)
        (b"{" * 100 + b"}" * 100, None),  # deeper than the bound
        (b'{"num_hidden_layers": 3, "pad": "' + b"x" * (1 << 20) + b'"}', None),  # over 1 MiB
        (b'{"num_hidden_layers": NaN}', None),
        (b"\xff\xfe not json", None),
    ],
)
def test_the_downloader_reads_config_json_bounded(
    tmp_path: Path, content: bytes | None, layers: int | None
) -> None:
    files = [
        ("model-00001-of-00002.safetensors", 10),
        ("model-00002-of-00002.safetensors", 5),
        ("config.json", 1),
    ]
    line = modelshape.shape_of(_snapshot(tmp_path, content), files)
    assert line["shape"].get("num_hidden_layers") == layers
    assert line["shape"]["weights_bytes"] == 15


@pytest.mark.parametrize(
    ("files", "weights"),
    [
        ([("model.safetensors", 7), ("consolidated.safetensors", 7), ("tokenizer.json", 2)], 7),
        ([("adapter.safetensors", 3), ("original/consolidated.00.pth", 9)], 3),
        ([("pytorch_model.bin", 4), ("original/x.pth", 9), ("README.md", 1)], 4),
        ([("model.gguf", 4), ("config.json", 1)], None),
    ],
)
def test_the_weight_files(files: list[tuple[str, int]], weights: int | None) -> None:
    assert modelshape.weights_bytes(files) == weights


# -- the need and the check ----------------------------------------------------------------------


def _need(shape: ModelShape | None = QWEN3_8B_SHAPE, **over: Any) -> fit.Need:
    args: dict[str, Any] = {
        "shape": shape,
        "total_bytes": 17 * 10**9,
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "max_model_len": None,
        "utilization": None,
    }
    args.update(over)
    return fit.need(**args)


@pytest.mark.parametrize(
    ("over", "weights", "kv", "lower_bound"),
    [
        # Qwen3-8B at its full 40960 tokens: 2 x 36 x 8 x 128 x 2 B x 40960 = 5.625 GiB of KV cache
        ({}, QWEN3_8B_WEIGHTS, 6_039_797_760, False),
        ({"tensor_parallel": 2}, QWEN3_8B_WEIGHTS // 2, 6_039_797_760 // 2, False),
        ({"max_model_len": 8192}, QWEN3_8B_WEIGHTS, 2 * 36 * 8 * 128 * 2 * 8192, False),
        # TP beyond the KV heads: each GPU still holds one (replicated) head
        (
            {"tensor_parallel": 16, "max_model_len": 1024},
            -(-QWEN3_8B_WEIGHTS // 16),
            2 * 36 * 1 * 128 * 2 * 1024,
            False,
        ),
        # PP splits the layers (rounded up)
        (
            {"pipeline_parallel": 5, "max_model_len": 1024},
            -(-QWEN3_8B_WEIGHTS // 5),
            2 * 8 * 8 * 128 * 2 * 1024,
            False,
        ),
        # no shape: the manifest's totalBytes, KV not counted (a lower bound)
        ({"shape": None}, 17 * 10**9, None, True),
        # shape without a context length and none in the spec
        (
            {"shape": ModelShape(num_hidden_layers=2, num_key_value_heads=2, head_dim=64, dtype_bytes=2)},
            17 * 10**9,
            None,
            True,
        ),
        # nothing known
        ({"shape": None, "total_bytes": None}, None, None, True),
    ],
)
def test_the_need_per_gpu(
    over: dict[str, Any], weights: int | None, kv: int | None, lower_bound: bool
) -> None:
    need = _need(**over)
    assert need.weights == weights
    assert need.kv_cache == kv
    assert need.lower_bound is lower_bound
    assert need.total == (None if weights is None else weights + (kv or 0) + fit.OVERHEAD_BYTES)
    assert need.utilization == fit.DEFAULT_UTILIZATION
    assert any("gpuMemoryUtilization 0.9" in a for a in need.assumed)
    if weights is None:
        assert any("weights size unknown" in a for a in need.assumed)


def _node(name: str, memory: str | None, count: str = "2", product: str = "NVIDIA-A10") -> fit.CandidateNode:
    labels = {fit.PRODUCT_LABEL: product, fit.COUNT_LABEL: count}
    if memory is not None:
        labels[fit.MEMORY_LABEL] = memory
    return fit.candidates_of([(name, labels, int(count))])[0]


A10 = "24576"  # MiB: 24 GiB, 21.6 GiB usable at 0.9
H100 = "81559"


@pytest.mark.parametrize(
    ("over", "nodes", "replica_nodes", "fits"),
    [
        ({}, [_node("a", A10), _node("b", A10)], 1, False),  # 21.9 GiB > 21.6 GiB
        ({"tensor_parallel": 2}, [_node("a", A10)], 1, True),  # 11.4 GiB
        ({"max_model_len": 4096}, [_node("a", A10)], 1, True),
        ({}, [_node("a", A10), _node("big", H100)], 1, True),
        ({}, [_node("a", A10), _node("big", H100)], 2, False),  # a two-node replica needs two
        ({}, [_node("a", A10), _node("unlabelled", None)], 1, None),  # may fit: never blocks
        ({}, [_node("a", A10), _node("junk", "24GiB")], 1, None),  # a label that is no number
        ({"shape": None, "total_bytes": None}, [_node("a", A10)], 1, None),  # nothing known
        ({}, [], 1, None),  # no candidates: the GPU count check says so
        ({"max_model_len": 4096}, [_node("a", A10)], 2, None),  # too few nodes at all: likewise
        ({}, [_node("a", A10)], 2, None),
        ({"utilization": 0.95}, [_node("a", A10)], 1, True),  # 22.8 GiB usable
    ],
)
def test_the_check(
    over: dict[str, Any], nodes: list[fit.CandidateNode], replica_nodes: int, fits: bool | None
) -> None:
    verdict = fit.check(_need(**over), nodes, nodes=replica_nodes, tensor_parallel=1, where="nodes of pool p")
    assert verdict.fits is fits
    assert bool(verdict.message) is (fits is False)


def test_the_message_says_what_is_needed_and_what_the_pool_has() -> None:
    verdict = fit.check(
        _need(), [_node("a", A10)], nodes=1, tensor_parallel=1, where="nodes of InferenceCluster 'pool'"
    )
    assert verdict.message.startswith("needs 21.9 GiB per GPU with TP 1 (weights 15.3 GiB + KV cache 5.6 GiB")
    assert "nodes of InferenceCluster 'pool' have 24 GiB per GPU (0 of 1 fit)" in verdict.message
    lower = fit.check(
        _need(shape=None, total_bytes=40 * GIB), [_node("a", A10)], nodes=1, tensor_parallel=2, where="x"
    )
    assert lower.message.startswith("needs at least 41 GiB per GPU with TP 2")
    split = fit.check(
        _need(shape=None, total_bytes=200 * GIB, pipeline_parallel=2),
        [_node("a", A10), _node("b", A10)],
        nodes=2,
        tensor_parallel=1,
        pipeline_parallel=2,
        where="x",
    )
    assert split.message.startswith("needs at least 101 GiB per GPU with TP 1 and PP 2 on each of 2 nodes")


def test_unlabelled_nodes_are_assumed() -> None:
    verdict = fit.check(
        _need(), [_node(f"n{i}", None) for i in range(7)], nodes=1, tensor_parallel=1, where="x"
    )
    assert verdict.fits is None
    assert (
        "GPU memory of n0, n1, n2, n3, n4 and 2 more unknown (no nvidia.com/gpu.memory label): may fit"
        in verdict.assumed
    )


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (
            {fit.MEMORY_LABEL: "81559", fit.COUNT_LABEL: "8", fit.PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"},
            (81559, 8, "NVIDIA-H100-80GB-HBM3"),
        ),
        ({fit.MEMORY_LABEL: "0", fit.COUNT_LABEL: "-1"}, (None, None, None)),
        ({fit.MEMORY_LABEL: "9" * 40, fit.COUNT_LABEL: "99999"}, (None, None, None)),
        ({fit.MEMORY_LABEL: "٣٣", fit.COUNT_LABEL: " 8"}, (None, None, None)),  # non-ASCII digits, spaces
        ({fit.PRODUCT_LABEL: "x" * 200}, (None, None, "x" * 63)),
    ],
)
def test_node_labels(labels: dict[str, str], expected: tuple[Any, ...]) -> None:
    got = fit.gpu_labels(labels)
    assert (got.memory_mib, got.count, got.product) == expected


# -- into ModelCache status, and the workload gate --------------------------------------------------

CACHE_SPEC = ModelCacheSpec.model_validate(
    {"source": {"huggingFace": {"repo": "Qwen/Qwen3-8B"}}, "storage": {"create": {"size": "40Gi"}}}
)


def test_the_result_line_sets_model_shape_and_it_is_carried() -> None:
    obs = CacheObservation(
        name="m",
        namespace="ns",
        uid="u",
        generation=1,
        spec=CACHE_SPEC,
        status=ModelCacheStatus(),
        now=NOW,
        has_finalizer=True,
        claim=ObservedClaim(name="m", phase="Bound", access_modes=("ReadWriteMany",)),
    )
    job = ObservedJob(name=cache_job_name(obs), uid="j", succeeded=True)
    line: dict[str, Any] = {"event": "result", "commit": "a" * 40, "files": 9, "total_bytes": 17 * 10**9}
    line |= modelshape.shape_of(Path("/nonexistent"), [("model.safetensors", QWEN3_8B_WEIGHTS)])
    line["shape"] |= QWEN3_8B_SHAPE.model_dump(exclude_none=True) | {"num_hidden_layers": 1 << 40}
    pod = ObservedDownloadPod(name="p", phase="Succeeded", exit_code=0, last_event=line)
    status = cache_plan(CacheObservation(**{**obs.__dict__, "jobs": (job,), "pods": (pod,)})).status
    assert status.phase == "Ready"
    assert status.model_shape is not None
    assert status.model_shape.num_hidden_layers is None  # out of bounds: unknown
    assert status.model_shape.num_key_value_heads == 8
    wire = status.to_wire()["modelShape"]
    assert (wire["weightsBytes"], wire["maxPositionEmbeddings"]) == (QWEN3_8B_WEIGHTS, 40960)
    # the next pass (no pod log) keeps it; the workload side reads it back
    again = cache_plan(CacheObservation(**{**obs.__dict__, "status": status, "jobs": (job,)})).status
    assert again.model_shape == status.model_shape
    raw = {"spec": {"storage": {"create": {}}}, "status": {**again.to_wire(), "phase": "Ready"}}
    seen = observe.cache_from(raw, name="m")
    assert (seen.total_bytes, seen.shape) == (17 * 10**9, status.model_shape)


def _workload(**spec: Any) -> Observation:
    body = {"model": {"name": "Qwen/Qwen3-8B", "cacheRef": {"name": "m"}}, **spec}
    return Observation(
        name="w",
        namespace="ns",
        uid="u",
        generation=1,
        spec=InferenceWorkloadSpec.model_validate(body),
        status=InferenceWorkloadStatus(),
        now=NOW,
        cache=ObservedCache(
            name="m",
            ready=True,
            phase="Ready",
            claim_name="m",
            resolved_revision="a" * 40,
            access_modes=("ReadWriteMany",),
            total_bytes=17 * 10**9,
            shape=QWEN3_8B_SHAPE,
        ),
        capacity=(
            NodeCapacity(name="a", allocatable=8, free=8, gpu_labels=fit.gpu_labels({fit.MEMORY_LABEL: A10})),
            NodeCapacity(name="b", allocatable=8, free=8, gpu_labels=fit.gpu_labels({fit.MEMORY_LABEL: A10})),
        ),
    )


def _scheduled(p: Any) -> Any:
    return next(x for x in p.status.conditions if x.type == c.SCHEDULED)


def test_a_workload_that_fits_nowhere_gets_no_jobset_and_says_why() -> None:
    p = plan(_workload())
    assert not [d for d in p.apply if d["kind"] == "JobSet"]
    cond = _scheduled(p)
    assert (cond.status, cond.reason) == ("False", c.REASON_INSUFFICIENT_GPU_MEMORY)
    assert cond.message.startswith("needs 21.9 GiB per GPU with TP 1")
    assert "the candidate nodes have 24 GiB per GPU" in cond.message
    ready = next(x for x in p.status.conditions if x.type == c.READY)
    assert ready.reason == c.REASON_INSUFFICIENT_GPU_MEMORY


@pytest.mark.parametrize(
    "spec",
    [
        {"engine": {"maxModelLen": 4096}},
        {"topology": {"gpusPerNode": 2, "tensorParallel": 2}},
        {"state": "Stopped"},
    ],
)
def test_a_spec_that_fits_or_places_nothing_is_not_blocked(spec: dict[str, Any]) -> None:
    p = plan(_workload(**spec))
    assert _scheduled(p).reason != c.REASON_INSUFFICIENT_GPU_MEMORY
    jobsets = [d for d in p.apply if d["kind"] == "JobSet"]
    assert jobsets  # Stopped: a suspended one (no pods)
    assert jobsets[0]["spec"].get("suspend", False) is (spec.get("state") == "Stopped")


def test_unknown_capacity_or_shape_never_blocks() -> None:
    obs = _workload()
    for variant in (
        Observation(**{**obs.__dict__, "capacity": None}),
        Observation(
            **{
                **obs.__dict__,
                "cache": ObservedCache(**{**obs.cache.__dict__, "total_bytes": None, "shape": None}),
            }
        ),
    ):
        p = plan(variant)
        assert [d for d in p.apply if d["kind"] == "JobSet"]
        assert _scheduled(p).reason != c.REASON_INSUFFICIENT_GPU_MEMORY


def test_a_running_replica_proves_the_fit_and_the_next_is_created() -> None:
    """A Ready leader proves the model fits: replicas 2 with one running replica creates slot 1
    although the nodes look too small by the estimate (no InsufficientGPUMemory)."""
    obs = _workload(replicas=2)
    unblocked = plan(Observation(**{**obs.__dict__, "capacity": None}))
    docs = {d["metadata"]["name"]: d for d in unblocked.apply if d["kind"] == "JobSet"}
    assert len(docs) == 2
    seen = [observe.jobset_from({**d, "metadata": {**d["metadata"], "uid": n}}) for n, d in docs.items()]
    first = next(js for js in seen if js is not None and js.replica == 0)
    ready = dataclasses.replace(first, leader_ready=True, jobs=1)
    p = plan(Observation(**{**obs.__dict__, "jobsets": (ready,)}))
    created = [d for d in p.apply if d["kind"] == "JobSet" and d["metadata"]["name"] != ready.name]
    assert [d["metadata"]["name"] for d in created] == [n for n in docs if n != ready.name]
    assert _scheduled(p).reason != c.REASON_INSUFFICIENT_GPU_MEMORY
    ready_cond = next(x for x in p.status.conditions if x.type == c.READY)
    assert ready_cond.reason != c.REASON_INSUFFICIENT_GPU_MEMORY
    # not Ready yet: no proof, the gate still blocks
    waiting = plan(Observation(**{**obs.__dict__, "jobsets": (dataclasses.replace(first, jobs=1),)}))
    assert _scheduled(waiting).reason == c.REASON_INSUFFICIENT_GPU_MEMORY
    assert not [d for d in waiting.apply if d["kind"] == "JobSet" and d["metadata"]["name"] != first.name]
