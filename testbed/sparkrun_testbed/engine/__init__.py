"""A vLLM stand-in: ``vllm serve``'s command line and OpenAI-compatible HTTP surface, no GPU.

Run it as ``python -m sparkrun_testbed.engine serve MODEL [vllm serve args...]``. The
testbed maps the vLLM command of a pod onto this module; tests start it directly.

Contract (what a client can rely on):

- Arguments: the ``vllm serve`` flags the operator renders (``--host``, ``--port``,
  ``--served-model-name`` (several names), ``--tensor-parallel-size``, ``--pipeline-parallel-size``,
  ``--distributed-executor-backend``, ``--nnodes``, ``--node-rank``, ``--master-addr``,
  ``--master-port``, ``--headless``, ``--enable-sleep-mode``, ``--max-model-len``,
  ``--gpu-memory-utilization``, ``--revision``, ``--download-dir``, ``--trust-remote-code``,
  ``--max-num-seqs``, ``--runner``/``--task``, ``--block-size``, ``--enable-lora``,
  ``--max-loras``) are parsed; any other argument is ignored with one
  log line.
- HTTP (leader only): ``/health`` answers 503 until every rank joined and the simulated load time
  passed, then 200 with an empty body. ``/v1/models``, ``/v1/chat/completions``,
  ``/v1/completions`` (streaming or not, vLLM's SSE chunks, ``stream_options.include_usage``,
  ``data: [DONE]``), ``/v1/embeddings``, ``/v1/responses`` (streaming or not), ``/metrics`` with
  vLLM's metric names, ``/sleep``, ``/wake_up``, ``/is_sleeping``, ``/version``. Errors use vLLM's
  ``ErrorResponse`` body ``{"error": {"message", "type", "param", "code"}}``; an unknown model is
  404 ``The model `X` does not exist.``.
- Load, as vLLM reports it (``_scheduler.py``): at most ``--max-num-seqs`` requests run at once,
  and a request runs only when its prompt fits in the KV cache beside the running ones'; the rest
  wait in arrival order. ``/metrics`` has ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (tokens of running requests over the
  KV-cache size), ``vllm:request_success_total{finished_reason=stop|length|abort}``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:num_preemptions_total``
  (always 0: it never preempts), the histograms ``vllm:time_to_first_token_seconds``,
  ``vllm:inter_token_latency_seconds`` (between consecutive tokens of a request),
  ``vllm:e2e_request_latency_seconds`` and ``vllm:request_queue_time_seconds`` (arrival to
  admission) with vLLM's default buckets (``helm/sparkrun-operator/dashboards/vllm-metrics.yaml``,
  what the engine dashboard reads), and the info
  gauges the Inference Extension's endpoint picker reads: ``vllm:cache_config_info`` (value 1;
  labels ``block_size`` (``--block-size``, 16), ``num_gpu_blocks`` (the KV-cache size over the
  block size), ``gpu_memory_utilization``, ``cache_dtype``, ``enable_prefix_caching``, ``engine``)
  and, only with ``--enable-lora`` as in vLLM, ``vllm:lora_requests_info`` (labels ``max_lora``
  (``--max-loras``, 1), ``running_lora_adapters`` and ``waiting_lora_adapters``, empty: the
  stand-in serves no adapters; value: the time of the scrape). A cold start
  is ``SPARKRUN_ENGINE_LOAD_SECONDS`` (``/health`` answers 503 until then), a wake from sleep
  (level 1: ``--enable-sleep-mode``, ``POST /sleep?level=1``) ``SPARKRUN_ENGINE_WAKE_SECONDS``;
  ``SPARKRUN_ENGINE_TOKEN_SECONDS`` sets how fast a slot frees, so a steady request rate above
  ``max-num-seqs / (tokens x TOKEN_SECONDS)`` builds a queue.
- Tokens are deterministic: the same prompt (and request ``seed``, and ``SPARKRUN_ENGINE_SEED``)
  always yields the same words. A prompt "token" is a word or a punctuation mark.
- Tools: when a chat request offers tools (and ``tool_choice`` is not ``"none"``) and its last
  message is not a tool result, the answer is one call of the first (or the forced) tool with
  arguments built from its JSON schema, ``finish_reason: "tool_calls"``.
- Multi-node: with ``--nnodes N``, rank 0 (the leader) listens on ``--master-port`` and ranks
  1..N-1 (``--headless``) connect to ``--master-addr:--master-port``. The leader is healthy only
  when all ranks joined; it exits with status 1 when a joined worker goes away (as vLLM's
  distributed executor does). A worker exits with status 1 when the leader goes away, and waits
  for the leader to come up at start (bounded by ``SPARKRUN_ENGINE_JOIN_TIMEOUT``).

Stand-in knobs (environment; seconds unless said otherwise):

=====================================  =========  ==============================================
``SPARKRUN_ENGINE_LOAD_SECONDS``       0          simulated weight loading after all ranks joined
``SPARKRUN_ENGINE_TTFT_SECONDS``       0          delay before the first generated token
``SPARKRUN_ENGINE_TOKEN_SECONDS``      0          delay between generated tokens
``SPARKRUN_ENGINE_SEED``               0          mixed into every token choice
``SPARKRUN_ENGINE_OUTPUT_TOKENS``      16         tokens of a natural answer (``finish_reason: stop``)
``SPARKRUN_ENGINE_EMBED_DIM``          32         embedding dimensionality
``SPARKRUN_ENGINE_WAKE_SECONDS``       0          time ``/wake_up`` takes
``SPARKRUN_ENGINE_KV_CACHE_TOKENS``    0          KV-cache size in tokens (0: max-num-seqs x max-model-len)
``SPARKRUN_ENGINE_HEARTBEAT_SECONDS``  1          rank heartbeat interval (loss after 5 missed)
``SPARKRUN_ENGINE_JOIN_TIMEOUT``       600        how long a worker retries reaching the leader
``SPARKRUN_ENGINE_MASTER_BIND``        0.0.0.0    address the leader's rendezvous port binds
``SPARKRUN_ENGINE_FAIL_RANK``          (none)     this rank fails on request (0: the leader); the
                                                  leader notices such a worker gone after five
                                                  missed heartbeats, not at once
``SPARKRUN_ENGINE_FAIL_AFTER``         0          ... this long after it joined (the leader:
                                                  after every rank joined)
``SPARKRUN_ENGINE_FAIL_CODE``          3          ... exiting with this status
``SPARKRUN_ENGINE_FAIL_MESSAGE``       (none)     ... after printing this line to stderr
``SPARKRUN_ENGINE_FAIL_TIMES``         0          with ``..._FAIL_LEDGER``: fail only this often
``SPARKRUN_ENGINE_FAIL_LEDGER``        (none)     a file (on the host) with a line per failure
=====================================  =========  ==============================================

The HTTP server is a small asyncio HTTP/1.1 implementation (keep-alive, Content-Length and chunked
request bodies, chunked streaming responses) so that an idle stand-in costs a few MiB and no CPU:
many of them run side by side in the testbed.
"""

from __future__ import annotations

from ._args import Knobs, ServeArgs, parse_args
from ._main import main, run_leader
from ._model import count_tokens, embed, generate_words
from ._server import Engine

__all__ = [
    "Engine",
    "Knobs",
    "ServeArgs",
    "count_tokens",
    "embed",
    "generate_words",
    "main",
    "parse_args",
    "run_leader",
]
