"""Will the model fit in GPU memory? Per-GPU need against per-GPU memory of candidate nodes. Pure.

Per GPU, a replica needs (``docs/autoscaling.md``, "Placement that checks GPU memory"):

- **weights**: the weight files' bytes (``ModelCache.status.modelShape.weightsBytes``, else the
  manifest's ``totalBytes``) / (tensorParallel x pipelineParallel);
- **KV cache for one sequence at maxModelLen** (vLLM refuses to start without room for one):
  ``2 x ceil(layers / PP) x max(1, ceil(kvHeads / TP)) x headDim x dtypeBytes x maxModelLen``
  (keys and values; with TP above the KV heads each GPU keeps a replicated head);
- **a fixed overhead** of :data:`OVERHEAD_BYTES` (1 GiB): the activation peak of vLLM's profiling
  run, CUDA graphs and the CUDA/NCCL context, which vLLM's start-up log reports ("Memory profiling
  takes ...": activation peak, non-torch memory, CUDA graph memory) at roughly 0.5-1.5 GiB for
  models that fit one GPU; a floor, not an upper bound.

It gets ``gpuMemoryUtilization`` (vLLM's default 0.9) of each GPU's memory, read from the node
labels of NVIDIA GPU feature discovery: ``nvidia.com/gpu.memory`` (MiB per GPU),
``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``. Whatever is unknown (no label, no manifest,
no shape) is listed in ``assumed`` and never blocks: a node without the memory label may fit, and
an unknown KV cache counts as zero (the need is then a lower bound, "at least").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from sparkrun_operator.api.modelshape import ModelShape

GIB: Final = 1 << 30
MIB: Final = 1 << 20
#: Activation peak + CUDA graphs + CUDA/NCCL context per GPU (see the module docstring).
OVERHEAD_BYTES: Final = 1 * GIB
#: vLLM's default ``--gpu-memory-utilization``.
DEFAULT_UTILIZATION: Final = 0.9
MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
COUNT_LABEL: Final = "nvidia.com/gpu.count"
#: Largest per-GPU memory label accepted (MiB; 16 TiB) and GPU count label (a node's label is
#: whoever labels nodes' word; beyond these it is not a real GPU and counts as unknown).
MAX_MEMORY_MIB: Final = 1 << 24
MAX_COUNT: Final = 1024
#: A label value is at most 63 characters; the product name is shown, clipped to this.
PRODUCT_MAX: Final = 63


@dataclass(frozen=True, kw_only=True)
class GpuLabels:
    """The GPU feature discovery labels of one node (``None``: not labelled, or not a number)."""

    memory_mib: int | None = None
    product: str | None = None
    count: int | None = None


def _number(value: str | None, limit: int) -> int | None:
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 9:
        return None
    number = int(value)
    return number if 1 <= number <= limit else None


def gpu_labels(labels: Mapping[str, str]) -> GpuLabels:
    """The GPU labels of a node's ``labels``, each checked (digits only, bounded)."""
    product = labels.get(PRODUCT_LABEL)
    return GpuLabels(
        memory_mib=_number(labels.get(MEMORY_LABEL), MAX_MEMORY_MIB),
        product=product[:PRODUCT_MAX] if isinstance(product, str) and product else None,
        count=_number(labels.get(COUNT_LABEL), MAX_COUNT),
    )


@dataclass(frozen=True, kw_only=True)
class CandidateNode:
    """A node a replica's pods may land on, with its GPU labels and allocatable GPUs."""

    name: str
    gpus: GpuLabels = field(default_factory=GpuLabels)
    allocatable: int = 0


@dataclass(frozen=True, kw_only=True)
class Need:
    """What one GPU of a replica needs, in bytes; ``total`` is ``None`` when the weights are
    unknown (then nothing can be said)."""

    weights: int | None
    kv_cache: int | None
    overhead: int = OVERHEAD_BYTES
    utilization: float = DEFAULT_UTILIZATION
    max_model_len: int | None = None
    detected: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()

    @property
    def total(self) -> int | None:
        if self.weights is None:
            return None
        return self.weights + (self.kv_cache or 0) + self.overhead

    @property
    def lower_bound(self) -> bool:
        """Whether the KV cache is unknown (counted as zero): the need is "at least" ``total``."""
        return self.kv_cache is None


def need(
    *,
    shape: ModelShape | None,
    total_bytes: int | None,
    tensor_parallel: int,
    pipeline_parallel: int,
    max_model_len: int | None,
    utilization: float | None,
    kv_dtype_bytes: int | None = None,
) -> Need:
    """The per-GPU need of a replica with ``tensor_parallel`` x ``pipeline_parallel`` GPUs
    (``kv_dtype_bytes``: the engine's ``--kv-cache-dtype`` when it sets one, else the model's)."""
    tp, pp = max(1, tensor_parallel), max(1, pipeline_parallel)
    detected: list[str] = []
    assumed: list[str] = []
    weights_total = shape.weights_bytes if shape is not None and shape.weights_bytes else None
    if weights_total is not None:
        detected.append(f"weights: {_gib(weights_total)} GiB of weight files (ModelCache modelShape)")
    elif total_bytes:
        weights_total = total_bytes
        detected.append(f"weights: {_gib(total_bytes)} GiB, every file of the cached revision (manifest)")
    else:
        assumed.append("weights size unknown (no ModelCache manifest): no memory check")
    length = max_model_len
    if length is None and shape is not None and shape.max_position_embeddings is not None:
        length = shape.max_position_embeddings
        detected.append(f"maxModelLen {length}: the model's max_position_embeddings (vLLM's default)")
    kv = _kv_cache(shape, tp, pp, length, kv_dtype_bytes)
    if kv is None:
        missing = "maxModelLen" if shape is not None and shape.known() else "the model's shape (config.json)"
        assumed.append(f"KV cache not counted: {missing} unknown")
    else:
        assert shape is not None
        detected.append(
            f"KV cache: {_gib(kv)} GiB per GPU for one sequence of {length} tokens "
            f"({shape.num_hidden_layers} layers, {shape.num_key_value_heads} KV heads of {shape.head_dim}, "
            f"{shape.dtype if kv_dtype_bytes is None else f'a {kv_dtype_bytes}-byte --kv-cache-dtype'})"
        )
    util = utilization if utilization is not None else DEFAULT_UTILIZATION
    if utilization is None:
        assumed.append(f"gpuMemoryUtilization {DEFAULT_UTILIZATION} (vLLM's default)")
    assumed.append(f"{_gib(OVERHEAD_BYTES)} GiB per GPU for activations, CUDA graphs and context")
    return Need(
        weights=math.ceil(weights_total / (tp * pp)) if weights_total is not None else None,
        kv_cache=kv,
        utilization=util,
        max_model_len=length,
        detected=tuple(detected),
        assumed=tuple(assumed),
    )


#: ``--kv-cache-dtype`` values and the bytes of one element (vLLM's ``auto`` is the model's).
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "bfloat16": 2, "float16": 2}


def kv_dtype_bytes(engine_args: Sequence[str]) -> int | None:
    """The element size ``--kv-cache-dtype`` sets in ``engine_args`` (its last occurrence, either
    spelling); ``None`` when unset, ``auto`` or unknown (the model's dtype then)."""
    value: str | None = None
    for i, arg in enumerate(engine_args):
        if arg == "--kv-cache-dtype" and i + 1 < len(engine_args):
            value = engine_args[i + 1]
        elif arg.startswith("--kv-cache-dtype="):
            value = arg.partition("=")[2]
    return KV_CACHE_DTYPE_BYTES.get(value) if value is not None else None


def _kv_cache(
    shape: ModelShape | None, tp: int, pp: int, length: int | None, kv_dtype_bytes: int | None = None
) -> int | None:
    if shape is None or length is None:
        return None
    facts = (
        shape.num_hidden_layers,
        shape.num_key_value_heads,
        shape.head_dim,
        kv_dtype_bytes or shape.dtype_bytes,
    )
    if any(f is None for f in facts):
        return None
    layers, kv_heads, head_dim, dtype_bytes = (int(f or 0) for f in facts)
    per_gpu_heads = max(1, math.ceil(kv_heads / tp))
    return 2 * math.ceil(layers / pp) * per_gpu_heads * head_dim * dtype_bytes * length


@dataclass(frozen=True, kw_only=True)
class NodeFit:
    """One candidate node against the need: ``fits`` is ``None`` when its memory is unknown."""

    node: CandidateNode
    usable_bytes: int | None
    fits: bool | None


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether a replica of ``nodes`` nodes can fit anywhere, and why not."""

    need: Need
    nodes: tuple[NodeFit, ...]
    #: ``False`` only when known to be too small everywhere; ``None`` when nothing can be said.
    fits: bool | None
    message: str = ""

    @property
    def assumed(self) -> list[str]:
        out = list(self.need.assumed)
        unlabelled = [f.node.name for f in self.nodes if f.usable_bytes is None]
        if unlabelled:
            more = f" and {len(unlabelled) - 5} more" if len(unlabelled) > 5 else ""
            shown = ", ".join(unlabelled[:5]) + more
            out.append(f"GPU memory of {shown} unknown (no {MEMORY_LABEL} label): may fit")
        return out


def check(
    need_: Need,
    candidates: Sequence[CandidateNode],
    *,
    nodes: int,
    tensor_parallel: int,
    where: str,
    pipeline_parallel: int = 1,
) -> Verdict:
    """Whether at least ``nodes`` candidates have per-GPU memory for ``need_`` (or unknown memory).

    ``where`` names the candidates in the message ("nodes of InferenceCluster gpu-pool", "the
    candidate nodes").
    """
    total = need_.total
    fits_list = tuple(_node_fit(n, total, need_.utilization) for n in candidates)
    if total is None or len(candidates) < max(1, nodes):
        # NB: too few nodes at all is a GPU count problem (NoFittingNodes), not a memory one
        return Verdict(need=need_, nodes=fits_list, fits=None)
    possible = [f for f in fits_list if f.fits is not False]
    if len(possible) >= max(1, nodes):
        known = all(f.fits is True for f in possible)
        return Verdict(need=need_, nodes=fits_list, fits=True if known else None)
    sizes = sorted({f.node.gpus.memory_mib for f in fits_list if f.node.gpus.memory_mib is not None})
    have = " or ".join(f"{_gib(m * MIB)} GiB" for m in sizes[-3:])
    at_least = "at least " if need_.lower_bound else ""
    span = f" on each of {nodes} nodes" if nodes > 1 else ""
    pp = f" and PP {pipeline_parallel}" if pipeline_parallel > 1 else ""
    message = (
        f"needs {at_least}{_gib(total)} GiB per GPU with TP {max(1, tensor_parallel)}{pp}{span} "
        f"(weights {_gib(need_.weights or 0)} GiB + KV cache {_gib(need_.kv_cache or 0)} GiB + overhead "
        f"{_gib(need_.overhead)} GiB, at gpuMemoryUtilization {need_.utilization:g}); {where} have {have} "
        f"per GPU ({len(possible)} of {len(fits_list)} fit): add nodes with larger GPUs, raise "
        "tensorParallel, or lower maxModelLen"
    )
    return Verdict(need=need_, nodes=fits_list, fits=False, message=message)


def _node_fit(node: CandidateNode, total: int | None, utilization: float) -> NodeFit:
    mib = node.gpus.memory_mib
    if mib is None:
        return NodeFit(node=node, usable_bytes=None, fits=None)
    usable = int(mib * MIB * utilization)
    return NodeFit(node=node, usable_bytes=usable, fits=None if total is None else total <= usable)


def _gib(value: int) -> str:
    """Bytes in GiB, one decimal (a whole number without it)."""
    gib = round(value / GIB, 1)
    return f"{gib:g}"


def candidates_of(rows: Iterable[tuple[str, Mapping[str, str], int]]) -> tuple[CandidateNode, ...]:
    """Candidate nodes from ``(name, labels, allocatable GPUs)`` rows."""
    return tuple(CandidateNode(name=n, gpus=gpu_labels(labels), allocatable=a) for n, labels, a in rows)
