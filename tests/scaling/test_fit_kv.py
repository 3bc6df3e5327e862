"""The fit's KV cache never counts more than the model takes (``plan/fit.py``,
``api/modelshape.py``): attention that is not per head (latent attention, hybrid stacks,
sliding windows) leaves the KV heads unknown, so the need is "at least" the weights; an engine's
``--kv-cache-dtype fp8`` halves the KV cache of a 16-bit model."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.api.modelshape import shape_from_config
from sparkrun_operator.plan import fit

#: A key the case leaves out of the config.
DROP = object()
DENSE: dict[str, Any] = {
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 40960,
    "sliding_window": None,
    "use_sliding_window": False,
}


@pytest.mark.parametrize(
    ("extra", "per_head"),
    [
        ({}, True),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, False),  # DeepSeek-V2/V3 latent attention
        ({"layer_types": ["sliding_attention", "full_attention"]}, False),
        ({"layers_block_type": ["mamba", "attention"]}, False),
        ({"sliding_window": 4096, "use_sliding_window": DROP}, False),  # Mistral-7B-v0.1: windowed
        ({"sliding_window": 4096, "use_sliding_window": False}, True),  # Qwen2: declared, off
        ({"sliding_window": True}, True),  # not a window size
    ],
)
def test_kv_heads_are_known_only_for_per_head_attention(extra: dict[str, Any], per_head: bool) -> None:
    doc = {key: value for key, value in {**DENSE, **extra}.items() if value is not DROP}
    shape = shape_from_config(doc, weights_bytes=16 * 2**30)
    assert (shape.num_key_value_heads is not None) is per_head
    need = fit.need(
        shape=shape,
        total_bytes=None,
        tensor_parallel=1,
        pipeline_parallel=1,
        max_model_len=None,
        utilization=None,
    )
    assert need.lower_bound is (not per_head)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), None),
        (("--kv-cache-dtype", "fp8"), 1),
        (("--kv-cache-dtype=fp8_e5m2",), 1),
        (("--kv-cache-dtype", "auto"), None),
        (("--kv-cache-dtype", "fp8", "--kv-cache-dtype", "bfloat16"), 2),  # the last one counts
        (("--kv-cache-dtype",), None),  # no value
        (("--kv-cache-dtype", "no-such-dtype"), None),
    ],
)
def test_the_engines_kv_cache_dtype(args: tuple[str, ...], expected: int | None) -> None:
    assert fit.kv_dtype_bytes(args) == expected


def test_an_fp8_kv_cache_halves_the_kv_need_of_a_16_bit_model() -> None:
    shape = shape_from_config(DENSE, weights_bytes=16 * 2**30)

    def kv(dtype_bytes: int | None) -> int:
        need = fit.need(
            shape=shape,
            total_bytes=None,
            tensor_parallel=1,
            pipeline_parallel=1,
            max_model_len=32768,
            utilization=None,
            kv_dtype_bytes=dtype_bytes,
        )
        assert need.kv_cache is not None
        return need.kv_cache

    assert kv(None) == 2 * 36 * 8 * 128 * 2 * 32768
    assert kv(1) * 2 == kv(None)
