"""The leader's OpenAI-compatible surface: state, scheduling and request handlers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import struct
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ._args import Knobs, ServeArgs
from ._http import SSE_TYPE, BadRequest, Conn, Request, dumps
from ._metrics import Stats
from ._model import chat_prompt, count_tokens, embed, generate_words, tool_call
from ._scheduler import Scheduler

log = logging.getLogger("sparkrun.engine")
_T = TypeVar("_T")


class Engine:
    """Request handling of the leader: state, scheduling and the OpenAI surface."""

    def __init__(self, args: ServeArgs, knobs: Knobs) -> None:
        self.args = args
        self.knobs = knobs
        self.stats = Stats()
        self.loaded = False
        self.sleeping = False
        self.sleep_level = 0
        self.created = int(time.time())
        kv_tokens = knobs.kv_cache_tokens or max(1, args.max_num_seqs * args.max_model_len)
        self.scheduler = Scheduler(self.stats, max_num_seqs=args.max_num_seqs, kv_cache_tokens=kv_tokens)
        self._routes: dict[tuple[str, str], Callable[[Request, Conn], Awaitable[None]]] = {
            ("GET", "/health"): self._health,
            ("GET", "/ping"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("POST", "/v1/responses"): self._responses,
            ("POST", "/sleep"): self._sleep,
            ("POST", "/wake_up"): self._wake_up,
            ("GET", "/is_sleeping"): self._is_sleeping,
        }

    @property
    def served_name(self) -> str:
        return self.args.names[0]

    # -- plumbing ------------------------------------------------------------------------

    async def handle(self, req: Request, conn: Conn) -> None:
        """Dispatch one request; every outcome writes a complete response (or ends the stream)."""
        route = self._routes.get((req.method, req.path))
        if route is None:
            if any(path == req.path for _, path in self._routes):
                await conn.send(405, dumps({"detail": "Method Not Allowed"}))
            else:
                await conn.send(404, dumps({"detail": "Not Found"}))
            return
        try:
            await route(req, conn)
        except BadRequest as exc:
            await conn.send(400, error_body(exc.message, "BadRequestError", 400, exc.param))

    def _json(self, req: Request) -> dict[str, Any]:
        try:
            body = json.loads(req.body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("Input should be a valid dictionary")
        return body

    async def _admit(self, body: dict[str, Any], conn: Conn, *, pooling: bool, api: str) -> bool:
        """Common admission; False when an error response was already sent."""
        model = body.get("model")
        if not self.loaded:
            await conn.send(503, error_body("The engine is still loading.", "ServiceUnavailable", 503))
            return False
        if model is not None and model not in self.args.names:
            await conn.send(
                404,
                error_body(f"The model `{model}` does not exist.", "NotFoundError", 404, "model"),
            )
            return False
        if pooling != self.args.pooling:
            await conn.send(400, error_body(f"The model does not support {api} API", "BadRequestError", 400))
            return False
        if self.sleeping:
            await conn.send(
                503, error_body("The engine is sleeping; call /wake_up first.", "ServiceUnavailable", 503)
            )
            return False
        return True

    # -- plain endpoints -----------------------------------------------------------------

    async def _health(self, req: Request, conn: Conn) -> None:
        await conn.send(200 if self.loaded else 503, b"", None)

    async def _version(self, req: Request, conn: Conn) -> None:
        await conn.send(200, dumps({"version": "0.0.0+sparkrun-standin"}))

    async def _models(self, req: Request, conn: Conn) -> None:
        data = [
            {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": self.args.model,
                "parent": None,
                "max_model_len": self.args.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": self.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in self.args.names
        ]
        await conn.send(200, dumps({"object": "list", "data": data}))

    async def _sleep(self, req: Request, conn: Conn) -> None:
        if not self.args.enable_sleep_mode:
            raise BadRequest("Sleep mode is not enabled. Start the server with --enable-sleep-mode.")
        level = req.query.get("level", ["1"])[0]
        self.sleeping = True
        self.sleep_level = int(level) if level.isdigit() else 1
        log.info("engine is sleeping (level %d)", self.sleep_level)
        await conn.send(200, b"", None)

    async def _wake_up(self, req: Request, conn: Conn) -> None:
        if self.sleeping and self.knobs.wake_seconds:
            await asyncio.sleep(self.knobs.wake_seconds)
        self.sleeping = False
        self.sleep_level = 0
        log.info("engine is awake")
        await conn.send(200, b"", None)

    async def _is_sleeping(self, req: Request, conn: Conn) -> None:
        await conn.send(200, dumps({"is_sleeping": self.sleeping}))

    async def _metrics(self, req: Request, conn: Conn) -> None:
        await conn.send(200, self.render_metrics().encode(), b"text/plain; version=0.0.4; charset=utf-8")

    def render_metrics(self) -> str:
        """Prometheus exposition of the engine's state, with vLLM's metric and label names."""
        s = self.stats
        lbl = f'engine="0",model_name="{self.served_name}"'
        kv = self.scheduler.kv_cache_usage
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lbl}}} {float(s.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lbl}}} {float(s.waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lbl}}} {kv}",
            *self._info_metrics(),
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lbl}}} {float(s.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lbl}}} {float(s.generation_tokens)}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, count in sorted(s.finished.items()):
            lines.append(f'vllm:request_success_total{{{lbl},finished_reason="{reason}"}} {float(count)}')
        lines += [
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{lbl}}} {float(s.preemptions)}",
            "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            *s.ttft.render("vllm:time_to_first_token_seconds", lbl),
            "# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.",
            "# TYPE vllm:inter_token_latency_seconds histogram",
            *s.itl.render("vllm:inter_token_latency_seconds", lbl),
            "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
            "# TYPE vllm:e2e_request_latency_seconds histogram",
            *s.e2e.render("vllm:e2e_request_latency_seconds", lbl),
            "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
            "# TYPE vllm:request_queue_time_seconds histogram",
            *s.queue.render("vllm:request_queue_time_seconds", lbl),
            "# HELP vllm:is_sleeping Whether the engine is sleeping (sparkrun stand-in).",
            "# TYPE vllm:is_sleeping gauge",
            f"vllm:is_sleeping{{{lbl}}} {float(self.sleeping)}",
        ]
        return "\n".join(lines) + "\n"

    def _info_metrics(self) -> list[str]:
        """vLLM's info gauges: the cache configuration (always, after start-up) and, with
        ``--enable-lora``, the LoRA adapters (none run here; the value is the time, as vLLM's)."""
        a = self.args
        blocks = max(1, self.scheduler.kv_cache_tokens // a.block_size)
        cache = (
            f'block_size="{a.block_size}",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
            f'gpu_memory_utilization="{a.gpu_memory_utilization}",num_gpu_blocks="{blocks}"'
        )
        lines = [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f"vllm:cache_config_info{{{cache}}} 1.0",
        ]
        if a.enable_lora:
            lora = f'max_lora="{a.max_loras}",waiting_lora_adapters="",running_lora_adapters=""'
            lines += [
                "# HELP vllm:lora_requests_info Running stats on lora requests.",
                "# TYPE vllm:lora_requests_info gauge",
                f"vllm:lora_requests_info{{{lora}}} {time.time()}",
            ]
        return lines

    # -- generation ----------------------------------------------------------------------

    def _budget(self, body: dict[str, Any], prompt_tokens: int, *keys: str) -> tuple[int, bool]:
        """(tokens to generate, stopped naturally) with vLLM's context-length checks."""
        max_len = self.args.max_model_len
        if prompt_tokens >= max_len:
            raise BadRequest(
                f"This model's maximum context length is {max_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
                param="input_tokens",
            )
        requested = next((body[k] for k in keys if body.get(k) is not None), None)
        if requested is not None:
            if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
                raise BadRequest(f"{keys[0]} must be at least 1, got {requested}.", param=keys[0])
            if prompt_tokens + requested > max_len:
                raise BadRequest(
                    f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's "
                    f"maximum context length is {max_len} tokens and your request has {prompt_tokens} "
                    f"input tokens ({requested} > {max_len} - {prompt_tokens}).",
                    param="max_tokens",
                )
        natural = min(self.knobs.output_tokens, max_len - prompt_tokens)
        if requested is not None and requested < natural:
            return requested, False
        return natural, True

    async def _generate(self, conn: Conn, prompt_tokens: int, words: list[str]) -> AsyncGenerator[str, None]:
        """Yield tokens on the simulated schedule; accounts metrics and aborts on disconnect."""
        s = self.stats
        start = time.monotonic()
        if not await self.scheduler.enter(prompt_tokens, lambda: conn.gone):  # a slot, KV-cache room
            s.finished["abort"] += 1  # the client left while waiting
            return
        s.queue.observe(time.monotonic() - start)
        s.prompt_tokens += prompt_tokens
        produced = 0
        finished = "abort"
        last = start
        try:
            if self.knobs.ttft_seconds:
                await asyncio.sleep(self.knobs.ttft_seconds)
            for i, word in enumerate(words):
                if i and self.knobs.token_seconds:
                    await asyncio.sleep(self.knobs.token_seconds)
                elif i % 8 == 7:
                    await asyncio.sleep(0)  # let other requests progress with zero delays
                if conn.gone:
                    return
                now = time.monotonic()
                (s.itl if i else s.ttft).observe(now - last)
                last = now
                produced += 1
                s.generation_tokens += 1
                s.running_tokens += 1
                yield word
            finished = "done"
        finally:
            self.scheduler.leave(prompt_tokens + produced)
            if finished == "abort":
                s.finished["abort"] += 1
            else:
                s.e2e.observe(time.monotonic() - start)

    def _finish(self, natural: bool) -> str:
        reason = "stop" if natural else "length"
        self.stats.finished[reason] += 1
        return reason

    async def _chat(self, req: Request, conn: Conn) -> None:
        body = self._json(req)
        if not await self._admit(body, conn, pooling=False, api="Chat Completions"):
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list", param="messages")
        prompt = chat_prompt(messages)
        seed = self.knobs.seed ^ int(body.get("seed") or 0)
        prompt_tokens = count_tokens(prompt)
        n_tokens, natural = self._budget(body, prompt_tokens, "max_completion_tokens", "max_tokens")
        last_role = messages[-1].get("role") if isinstance(messages[-1], dict) else None
        call = None
        if last_role != "tool":
            call = tool_call(body.get("tools") or [], body.get("tool_choice", "auto"), prompt, seed)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if call is not None:
            await self._chattool_call(body, conn, rid, created, prompt_tokens, call)
            return
        words = generate_words(prompt, n_tokens, seed=seed)
        if body.get("stream"):
            await self._chat_stream(body, conn, rid, created, prompt_tokens, words, natural)
            return
        text = "".join(await collect(self._generate(conn, prompt_tokens, words)))
        if conn.gone:
            return
        reason = self._finish(natural)
        await conn.send(
            200,
            dumps(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": self.served_name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": text,
                                "refusal": None,
                                "annotations": None,
                                "audio": None,
                                "function_call": None,
                                "tool_calls": [],
                                "reasoning_content": None,
                            },
                            "logprobs": None,
                            "finish_reason": reason,
                            "stop_reason": None,
                        }
                    ],
                    "service_tier": None,
                    "system_fingerprint": None,
                    "usage": usage_body(prompt_tokens, len(words)),
                    "prompt_logprobs": None,
                    "kv_transfer_params": None,
                }
            ),
        )

    async def _chat_stream(
        self,
        body: dict[str, Any],
        conn: Conn,
        rid: str,
        created: int,
        prompt_tokens: int,
        words: list[str],
        natural: bool,
    ) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.served_name}
        await conn.start_stream(200, SSE_TYPE)
        try:
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            await conn.chunk(sse({**head, "choices": [{**first, "finish_reason": None}]}))
            last = len(words) - 1
            async for i, word in aenumerate(self._generate(conn, prompt_tokens, words)):
                choice: dict[str, Any] = {"index": 0, "delta": {"content": word}, "logprobs": None}
                if i == last:
                    choice["finish_reason"] = self._finish(natural)
                    choice["stop_reason"] = None
                else:
                    choice["finish_reason"] = None
                await conn.chunk(sse({**head, "choices": [choice]}))
            if conn.gone:
                return
            if include_usage:
                await conn.chunk(sse({**head, "choices": [], "usage": usage_body(prompt_tokens, len(words))}))
            await conn.chunk(b"data: [DONE]\n\n")
            await conn.end_stream()
        except ConnectionError:
            return

    async def _chattool_call(
        self,
        body: dict[str, Any],
        conn: Conn,
        rid: str,
        created: int,
        prompt_tokens: int,
        call: tuple[str, str],
    ) -> None:
        name, arguments = call
        call_id = f"chatcmpl-tool-{uuid.uuid4().hex}"
        pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
        completion_tokens = len(pieces)
        if not body.get("stream"):
            await collect(self._generate(conn, prompt_tokens, pieces))
            if conn.gone:
                return
            self.stats.finished["stop"] += 1
            message = {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                ],
                "reasoning_content": None,
            }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls",
                "stop_reason": None,
            }
            await conn.send(
                200,
                dumps(
                    {
                        "id": rid,
                        "object": "chat.completion",
                        "created": created,
                        "model": self.served_name,
                        "choices": [choice],
                        "usage": usage_body(prompt_tokens, completion_tokens),
                    }
                ),
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.served_name}
        await conn.start_stream(200, SSE_TYPE)
        try:
            first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
            await conn.chunk(sse({**head, "choices": [{**first, "finish_reason": None}]}))
            async for i, piece in aenumerate(self._generate(conn, prompt_tokens, pieces)):
                tc: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                if i == 0:
                    tc = {
                        "id": call_id,
                        "type": "function",
                        "index": 0,
                        "function": {"name": name, "arguments": piece},
                    }
                choice = {"index": 0, "delta": {"tool_calls": [tc]}, "logprobs": None, "finish_reason": None}
                await conn.chunk(sse({**head, "choices": [choice]}))
            if conn.gone:
                return
            self.stats.finished["stop"] += 1
            end = {
                "index": 0,
                "delta": {},
                "logprobs": None,
                "finish_reason": "tool_calls",
                "stop_reason": None,
            }
            await conn.chunk(sse({**head, "choices": [end]}))
            if include_usage:
                await conn.chunk(
                    sse({**head, "choices": [], "usage": usage_body(prompt_tokens, completion_tokens)})
                )
            await conn.chunk(b"data: [DONE]\n\n")
            await conn.end_stream()
        except ConnectionError:
            return

    async def _completions(self, req: Request, conn: Conn) -> None:
        body = self._json(req)
        if not await self._admit(body, conn, pooling=False, api="Completions"):
            return
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string (the stand-in serves one prompt)", param="prompt")
        seed = self.knobs.seed ^ int(body.get("seed") or 0)
        prompt_tokens = count_tokens(prompt)
        n_tokens, natural = self._budget(body, prompt_tokens, "max_tokens")
        words = generate_words(prompt, n_tokens, seed=seed)
        rid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        head = {"id": rid, "object": "text_completion", "created": created, "model": self.served_name}
        if not body.get("stream"):
            text = "".join(await collect(self._generate(conn, prompt_tokens, words)))
            if conn.gone:
                return
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": self._finish(natural),
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            payload = {
                **head,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage_body(prompt_tokens, len(words)),
                "kv_transfer_params": None,
            }
            await conn.send(200, dumps(payload))
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        await conn.start_stream(200, SSE_TYPE)
        try:
            last = len(words) - 1
            async for i, word in aenumerate(self._generate(conn, prompt_tokens, words)):
                chunk: dict[str, Any] = {"index": 0, "text": word, "logprobs": None, "finish_reason": None}
                if i == last:
                    chunk["finish_reason"] = self._finish(natural)
                    chunk["stop_reason"] = None
                await conn.chunk(sse({**head, "choices": [chunk]}))
            if conn.gone:
                return
            if include_usage:
                await conn.chunk(sse({**head, "choices": [], "usage": usage_body(prompt_tokens, len(words))}))
            await conn.chunk(b"data: [DONE]\n\n")
            await conn.end_stream()
        except ConnectionError:
            return

    async def _embeddings(self, req: Request, conn: Conn) -> None:
        body = self._json(req)
        if not await self._admit(body, conn, pooling=True, api="Embeddings"):
            return
        raw = body.get("input")
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) for x in inputs):
            raise BadRequest("input must be a string or a non-empty list of strings", param="input")
        fmt = body.get("encoding_format") or "float"
        if fmt not in {"float", "base64"}:
            raise BadRequest(f"Unsupported encoding_format {fmt!r}", param="encoding_format")
        dim = self.knobs.embed_dim
        if body.get("dimensions") is not None:
            raise BadRequest("Model does not support matryoshka representation", param="dimensions")
        data = []
        tokens = 0
        for i, text in enumerate(inputs):
            tokens += count_tokens(text)
            vec = embed(text, dim, seed=self.knobs.seed)
            value: Any = vec
            if fmt == "base64":
                value = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode()
            data.append({"index": i, "object": "embedding", "embedding": value})
        self.stats.prompt_tokens += tokens
        self.stats.finished["stop"] += 1
        payload = {
            "id": f"embd-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": self.served_name,
            "data": data,
            "usage": {
                "prompt_tokens": tokens,
                "total_tokens": tokens,
                "completion_tokens": 0,
                "prompt_tokens_details": None,
            },
        }
        await conn.send(200, dumps(payload))

    async def _responses(self, req: Request, conn: Conn) -> None:
        body = self._json(req)
        if not await self._admit(body, conn, pooling=False, api="Responses"):
            return
        raw = body.get("input")
        if isinstance(raw, str):
            messages: list[Any] = [{"role": "user", "content": raw}]
        elif isinstance(raw, list) and raw:
            messages = [m for m in raw if isinstance(m, dict)]
        else:
            raise BadRequest("input must be a string or a non-empty list", param="input")
        if isinstance(body.get("instructions"), str):
            messages = [{"role": "system", "content": body["instructions"]}, *messages]
        prompt = chat_prompt([{"role": m.get("role", "user"), "content": m.get("content")} for m in messages])
        prompt_tokens = count_tokens(prompt)
        n_tokens, natural = self._budget(body, prompt_tokens, "max_output_tokens")
        words = generate_words(prompt, n_tokens, seed=self.knobs.seed)
        resp_id = f"resp_{uuid.uuid4().hex}"
        msg_id = f"msg_{uuid.uuid4().hex}"
        created = int(time.time())

        def response(status: str, text: str | None, usage: dict[str, Any] | None) -> dict[str, Any]:
            output = []
            if text is not None:
                part: dict[str, Any] = {
                    "annotations": [],
                    "text": text,
                    "type": "output_text",
                    "logprobs": None,
                }
                output.append(
                    {
                        "id": msg_id,
                        "content": [part],
                        "role": "assistant",
                        "status": "completed",
                        "type": "message",
                    }
                )
            return {
                "id": resp_id,
                "created_at": created,
                "incomplete_details": None
                if natural or status != "incomplete"
                else {"reason": "max_output_tokens"},
                "instructions": body.get("instructions"),
                "metadata": body.get("metadata"),
                "model": self.served_name,
                "object": "response",
                "output": output,
                "parallel_tool_calls": True,
                "temperature": body.get("temperature", 1.0),
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": [],
                "top_p": body.get("top_p", 1.0),
                "background": False,
                "max_output_tokens": body.get("max_output_tokens"),
                "max_tool_calls": None,
                "previous_response_id": None,
                "prompt": None,
                "reasoning": None,
                "service_tier": "auto",
                "status": status,
                "text": None,
                "top_logprobs": None,
                "truncation": "disabled",
                "usage": usage,
                "user": None,
            }

        def usage() -> dict[str, Any]:
            return {
                "input_tokens": prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": len(words),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt_tokens + len(words),
            }

        final_status = "completed" if natural else "incomplete"
        if not body.get("stream"):
            text = "".join(await collect(self._generate(conn, prompt_tokens, words)))
            if conn.gone:
                return
            self._finish(natural)
            await conn.send(200, dumps(response(final_status, text, usage())))
            return
        seq = 0

        def event(kind: str, payload: dict[str, Any]) -> bytes:
            nonlocal seq
            data = {"type": kind, "sequence_number": seq, **payload}
            seq += 1
            return b"event: " + kind.encode() + b"\ndata: " + dumps(data) + b"\n\n"

        part0 = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        item0 = {"id": msg_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message"}
        await conn.start_stream(200, SSE_TYPE)
        try:
            await conn.chunk(event("response.created", {"response": response("in_progress", None, None)}))
            await conn.chunk(event("response.in_progress", {"response": response("in_progress", None, None)}))
            await conn.chunk(event("response.output_item.added", {"output_index": 0, "item": item0}))
            ids = {"item_id": msg_id, "output_index": 0, "content_index": 0}
            await conn.chunk(event("response.content_part.added", {**ids, "part": part0}))
            text = ""
            async for _, word in aenumerate(self._generate(conn, prompt_tokens, words)):
                text += word
                await conn.chunk(event("response.output_text.delta", {**ids, "delta": word, "logprobs": []}))
            if conn.gone:
                return
            self._finish(natural)
            done_part = {**part0, "text": text}
            await conn.chunk(event("response.output_text.done", {**ids, "text": text, "logprobs": []}))
            await conn.chunk(event("response.content_part.done", {**ids, "part": done_part}))
            done_item = {**item0, "content": [done_part], "status": "completed"}
            await conn.chunk(event("response.output_item.done", {"output_index": 0, "item": done_item}))
            kind = "response.completed" if natural else "response.incomplete"
            await conn.chunk(event(kind, {"response": response(final_status, text, usage())}))
            await conn.end_stream()
        except ConnectionError:
            return


async def collect(agen: AsyncGenerator[str, None]) -> list[str]:
    async with contextlib.aclosing(agen):
        return [item async for item in agen]


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    """vLLM's ``ErrorResponse`` JSON."""
    return dumps({"error": {"message": message, "type": err_type, "param": param, "code": code}})


def sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


async def aenumerate(agen: AsyncGenerator[_T, None]) -> AsyncIterator[tuple[int, _T]]:
    # Closes ``agen`` when the consumer stops early, so the engine's accounting in
    # ``Engine._generate``'s ``finally`` runs at once rather than at garbage collection.
    async with contextlib.aclosing(agen):
        i = 0
        async for item in agen:
            yield i, item
            i += 1
