"""``vllm serve``'s command line and the stand-in's environment knobs."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """Stand-in behaviour that ``vllm serve`` has no flag for (read from the environment)."""

    load_seconds: float = 0.0
    ttft_seconds: float = 0.0
    token_seconds: float = 0.0
    seed: int = 0
    output_tokens: int = 16
    embed_dim: int = 32
    wake_seconds: float = 0.0
    kv_cache_tokens: int = 0
    heartbeat_seconds: float = 1.0
    join_timeout: float = 600.0
    master_bind: str = "0.0.0.0"
    #: Fail on request: the rank that exits (``None``: none), how long after it joined (or, on
    #: the leader, after all ranks joined), with which status, after printing which line.
    fail_rank: int | None = None
    fail_after: float = 0.0
    fail_code: int = 3
    fail_message: str = ""
    #: With both: fail only while the ledger file (on the host: process nodes share it) has
    #: fewer than ``fail_times`` lines; each failure adds one.
    fail_times: int = 0
    fail_ledger: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Knobs:
        """Read ``SPARKRUN_ENGINE_*``; a malformed value raises ``ValueError`` naming the variable."""
        env = dict(os.environ) if env is None else env

        def num(name: str, default: float) -> float:
            raw = env.get(f"SPARKRUN_ENGINE_{name}")
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"SPARKRUN_ENGINE_{name}={raw!r} is not a number") from None
            if value < 0 or math.isnan(value):
                raise ValueError(f"SPARKRUN_ENGINE_{name}={raw!r} must be >= 0")
            return value

        return cls(
            load_seconds=num("LOAD_SECONDS", 0.0),
            ttft_seconds=num("TTFT_SECONDS", 0.0),
            token_seconds=num("TOKEN_SECONDS", 0.0),
            seed=int(num("SEED", 0)),
            output_tokens=max(1, int(num("OUTPUT_TOKENS", 16))),
            embed_dim=max(1, int(num("EMBED_DIM", 32))),
            wake_seconds=num("WAKE_SECONDS", 0.0),
            kv_cache_tokens=int(num("KV_CACHE_TOKENS", 0)),
            heartbeat_seconds=max(0.05, num("HEARTBEAT_SECONDS", 1.0)),
            join_timeout=num("JOIN_TIMEOUT", 600.0),
            master_bind=env.get("SPARKRUN_ENGINE_MASTER_BIND") or "0.0.0.0",
            fail_rank=int(num("FAIL_RANK", 0)) if env.get("SPARKRUN_ENGINE_FAIL_RANK") else None,
            fail_after=num("FAIL_AFTER", 0.0),
            fail_code=min(255, max(1, int(num("FAIL_CODE", 3)))),
            fail_message=env.get("SPARKRUN_ENGINE_FAIL_MESSAGE") or "",
            fail_times=int(num("FAIL_TIMES", 0)),
            fail_ledger=env.get("SPARKRUN_ENGINE_FAIL_LEDGER") or "",
        )


@dataclass(frozen=True, kw_only=True)
class ServeArgs:
    """The parsed ``vllm serve`` command line (only what the stand-in acts on or reports)."""

    model: str
    host: str = "0.0.0.0"
    port: int = 8000
    served_model_names: tuple[str, ...] = ()
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29501
    headless: bool = False
    enable_sleep_mode: bool = False
    max_model_len: int = 4096
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    #: KV-cache block size in tokens (``--block-size``; vLLM's CUDA default is 16).
    block_size: int = 16
    #: ``--enable-lora`` and ``--max-loras``: vLLM exports ``vllm:lora_requests_info`` only then.
    enable_lora: bool = False
    max_loras: int = 1
    revision: str | None = None
    download_dir: str | None = None
    trust_remote_code: bool = False
    pooling: bool = False
    ignored: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Served names; the first is the one responses report (as vLLM does)."""
        return self.served_model_names or (self.model,)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparkrun_testbed.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a model (vllm serve compatible)")
    serve.add_argument("model_tag", nargs="?", default=None)
    serve.add_argument("--model", default=None)
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+", action="extend", default=[])
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--distributed-executor-backend", default=None)
    serve.add_argument("--nnodes", type=int, default=1)
    serve.add_argument("--node-rank", type=int, default=0)
    serve.add_argument("--master-addr", default="127.0.0.1")
    serve.add_argument("--master-port", type=int, default=29501)
    serve.add_argument("--headless", action="store_true")
    serve.add_argument("--enable-sleep-mode", action="store_true")
    serve.add_argument("--max-model-len", type=_int_with_suffix, default=4096)
    serve.add_argument("--max-num-seqs", type=int, default=256)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--block-size", type=int, default=16)
    serve.add_argument("--enable-lora", action="store_true")
    serve.add_argument("--max-loras", type=int, default=1)
    serve.add_argument("--revision", default=None)
    serve.add_argument("--download-dir", default=None)
    serve.add_argument("--trust-remote-code", action="store_true")
    serve.add_argument("--runner", default=None)
    serve.add_argument("--task", default=None)
    serve.add_argument("--convert", default=None)
    return parser


def _int_with_suffix(raw: str) -> int:
    # vLLM accepts --max-model-len 32k / 1m.
    match = re.fullmatch(r"(\d+)([kKmM]?)", raw.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid length {raw!r}")
    scale = {"": 1, "k": 1000, "K": 1024, "m": 1_000_000, "M": 1024 * 1024}[match.group(2)]
    return int(match.group(1)) * scale


def parse_args(argv: Sequence[str]) -> ServeArgs:
    """Parse a ``serve`` command line; ``SystemExit(2)`` on a malformed known flag (argparse)."""
    ns, unknown = _parser().parse_known_args(list(argv))
    model = ns.model or ns.model_tag
    if not model:
        _parser().error("serve needs a model (positional or --model)")
    if ns.nnodes < 1 or not 0 <= ns.node_rank < ns.nnodes:
        _parser().error(f"--node-rank {ns.node_rank} is out of range for --nnodes {ns.nnodes}")
    pooling = ns.runner == "pooling" or ns.task in {"embed", "embedding"} or ns.convert == "embed"
    return ServeArgs(
        model=model,
        host=ns.host,
        port=ns.port,
        served_model_names=tuple(ns.served_model_name),
        tensor_parallel_size=ns.tensor_parallel_size,
        pipeline_parallel_size=ns.pipeline_parallel_size,
        distributed_executor_backend=ns.distributed_executor_backend,
        nnodes=ns.nnodes,
        node_rank=ns.node_rank,
        master_addr=ns.master_addr,
        master_port=ns.master_port,
        headless=ns.headless,
        enable_sleep_mode=ns.enable_sleep_mode,
        max_model_len=ns.max_model_len,
        max_num_seqs=max(1, ns.max_num_seqs),
        gpu_memory_utilization=ns.gpu_memory_utilization,
        block_size=max(1, ns.block_size),
        enable_lora=ns.enable_lora,
        max_loras=max(1, ns.max_loras),
        revision=ns.revision,
        download_dir=ns.download_dir,
        trust_remote_code=ns.trust_remote_code,
        pooling=pooling,
        ignored=tuple(unknown),
    )
