"""``ModelCache.status.modelShape``: the few facts of a model's ``config.json`` a memory fit needs.

The download Job reads ``config.json`` from the cache volume (``runtime/modelshape.py``; the
operator never talks to the Hub) and reports these facts on its ``result`` line; the ModelCache
planner stores them (``plan/modelcache.py``) and the workload planner's fit check
(``plan/fit.py``) sizes the KV cache from them. Pure.

``config.json`` is the repository owner's file, so hostile: :func:`shape_from_config` takes only
whole numbers within :data:`LIMITS` and dtypes it knows; anything else (a huge number, a wrong
type, a missing key) is an unknown fact (``None``), never an error. The same check runs again
on the operator's side (:func:`shape_from_event`): the log line it reads could be forged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import Field

from sparkrun_operator.api.meta import KubeModel

#: Inclusive upper bound of each whole-number fact (far above any real model: 2^20 layers or
#: heads, 2^30 positions; a bound keeps the arithmetic of the fit small).
LIMITS: Final[Mapping[str, int]] = {
    "num_hidden_layers": 1 << 20,
    "num_key_value_heads": 1 << 20,
    "num_attention_heads": 1 << 20,
    "head_dim": 1 << 20,
    "hidden_size": 1 << 30,
    "max_position_embeddings": 1 << 30,
}
#: Bytes per element of the dtypes ``config.json`` names (``torch_dtype``, or ``dtype`` in newer
#: transformers releases); the KV cache has the model's dtype unless the engine says otherwise.
DTYPE_BYTES: Final[Mapping[str, int]] = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "int8": 1,
}
#: Keys of the text part of a multimodal model's config (``text_config`` of LLaVA, Gemma 3,
#: Qwen2-VL style configs; ``llm_config`` of InternVL), read before the top level.
TEXT_PARTS: Final = ("text_config", "llm_config", "language_config")
#: Bound of a weights size in bytes the fit accepts (1 PiB).
MAX_WEIGHTS_BYTES: Final = 1 << 50


class ModelShape(KubeModel):
    """What the fit check needs of the model's architecture (``None``: unknown)."""

    num_hidden_layers: int | None = Field(default=None, description="Transformer layers.", ge=1)
    num_key_value_heads: int | None = Field(
        default=None, description="Key/value heads (num_attention_heads when the model has no GQA).", ge=1
    )
    head_dim: int | None = Field(
        default=None, description="Size of one attention head (hidden_size / num_attention_heads).", ge=1
    )
    dtype: str | None = Field(default=None, description="torch_dtype of config.json.", max_length=32)
    dtype_bytes: int | None = Field(default=None, description="Bytes per element of dtype.", ge=1, le=8)
    max_position_embeddings: int | None = Field(
        default=None, description="Context length the model was built for (vLLM's default maxModelLen).", ge=1
    )
    weights_bytes: int | None = Field(
        default=None,
        description="Bytes of the weight files (*.safetensors, else *.bin/*.pt/*.pth); unset: the "
        "manifest's totalBytes is used.",
        ge=0,
    )

    def known(self) -> bool:
        """Whether every fact the KV-cache size needs is there."""
        facts = (self.num_hidden_layers, self.num_key_value_heads, self.head_dim, self.dtype_bytes)
        return all(v is not None for v in facts)


def _whole(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= LIMITS[key] else None


def _text_part(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in TEXT_PARTS:
        part = doc.get(key)
        if isinstance(part, Mapping) and part:
            return part
    return doc


def _dtype(*docs: Mapping[str, Any]) -> str | None:
    for doc in docs:
        for key in ("torch_dtype", "dtype"):
            value = doc.get(key)
            if isinstance(value, str) and value.removeprefix("torch.") in DTYPE_BYTES:
                return value.removeprefix("torch.")
    return None


#: Keys of attention the per-head KV formula overcounts: latent attention (MLA, DeepSeek-V2/V3:
#: a compressed KV of ``kv_lora_rank``), hybrid stacks (Mamba or linear-attention layers beside
#: attention ones), and per-layer kinds (``layer_types``: sliding-window layers among full ones).
#: Their KV heads are left unknown: the fit then counts no KV cache ("needs at least"), never
#: more than the model takes.
NOT_PER_HEAD_KEYS = (
    "kv_lora_rank",
    "layer_types",
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_type_list",
    "linear_attn_config",
    "ssm_cfg",
    "mamba_d_ssm",
)


def _per_head_kv(doc: Mapping[str, Any]) -> bool:
    """Whether every layer keeps a full KV cache of ``num_key_value_heads`` heads."""
    if any(key in doc for key in NOT_PER_HEAD_KEYS):
        return False
    window = doc.get("sliding_window")
    return not (
        isinstance(window, int) and not isinstance(window, bool) and doc.get("use_sliding_window", True)
    )


def shape_from_config(doc: Any, *, weights_bytes: int | None = None) -> ModelShape:
    """The facts of a parsed ``config.json`` (its text part first); unknown ones are ``None``
    (the KV heads too when the model's attention is not per head: :data:`NOT_PER_HEAD_KEYS`)."""
    if not isinstance(doc, Mapping):
        return ModelShape(weights_bytes=_weights(weights_bytes))
    text = _text_part(doc)

    def fact(key: str) -> int | None:
        found = _whole(text, key)
        return found if found is not None or text is doc else _whole(doc, key)

    heads = fact("num_attention_heads")
    head_dim = fact("head_dim")
    hidden = fact("hidden_size")
    if head_dim is None and heads is not None and hidden is not None and hidden % heads == 0:
        head_dim = hidden // heads
    dtype = _dtype(text, doc)
    return ModelShape(
        num_hidden_layers=fact("num_hidden_layers"),
        num_key_value_heads=(fact("num_key_value_heads") or heads) if _per_head_kv(text) else None,
        head_dim=head_dim if head_dim is None or head_dim <= LIMITS["head_dim"] else None,
        dtype=dtype,
        dtype_bytes=DTYPE_BYTES[dtype] if dtype is not None else None,
        max_position_embeddings=fact("max_position_embeddings"),
        weights_bytes=_weights(weights_bytes),
    )


def _weights(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_WEIGHTS_BYTES else None


def shape_from_event(value: Any) -> ModelShape | None:
    """The ``shape`` of a downloader ``result`` line, checked again (the line could be forged):
    ``None`` when it is not an object; every fact out of bounds or of a wrong type is unknown."""
    if not isinstance(value, Mapping):
        return None
    facts = {key: _whole(value, key) for key in LIMITS if key in value}
    dtype = value.get("dtype")
    known_dtype = dtype if isinstance(dtype, str) and dtype in DTYPE_BYTES else None
    return ModelShape(
        num_hidden_layers=facts.get("num_hidden_layers"),
        num_key_value_heads=facts.get("num_key_value_heads"),
        head_dim=facts.get("head_dim"),
        dtype=known_dtype,
        dtype_bytes=DTYPE_BYTES[known_dtype] if known_dtype is not None else None,
        max_position_embeddings=facts.get("max_position_embeddings"),
        weights_bytes=_weights(value.get("weights_bytes")),
    )


def shape_event(shape: ModelShape) -> dict[str, Any]:
    """The ``shape`` object of the downloader's ``result`` line (snake_case, unknowns left out)."""
    return shape.model_dump(exclude_none=True)
