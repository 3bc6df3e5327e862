"""Ollama (``/api/chat``, ``/api/generate``, tags, show, ps) <-> OpenAI chat completions.

As ``docs/gateway.md`` lists: chat takes ``model`` and ``messages`` with optional ``tools``,
``think``, ``format`` ("json" or a JSON Schema) and ``options`` (num_predict, temperature,
top_p, top_k, stop, seed); ``stream`` defaults to true and answers newline-delimited JSON,
``stream: false`` one object.
Generate takes ``prompt`` (default empty), ``system``, ``images`` and the same controls. Tags list
every known model (digests are placeholders), show answers 400 without ``name``/``model`` and 404
for an unknown model, ps lists the models with a ready instance, size 0.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any, Literal

from sparkrun_operator.plan.served import EMBEDDING, TEXT_GENERATION

from . import enginejson
from .enginejson import MAX_CHOICES, MAX_TOOL_CALL_DELTAS, too_many
from .errors import GatewayError, bad_request, clip, upstream_message
from .routing import Workload

MAX_TOOL_CALLS = 1024
"""Distinct tool calls one streamed answer may make (more: the stream ends with an error)."""
MAX_TOOL_CALL_CHARS = 4 * 1024 * 1024
"""Characters of tool-call names and arguments a streamed answer may gather (Ollama reports tool
calls whole, in the last line, so they are held until then)."""

_EPOCH = "2025-01-01T00:00:00Z"
_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _check_options(doc: dict[str, Any]) -> None:
    options = doc.get("options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise bad_request("options must be an object")
    n = options.get("num_predict")
    # -1 (no limit) and -2 (fill the context) are Ollama's special values; 0 or other negatives
    # are the "non-positive max_tokens" refused with 400 (docs/gateway.md, "Errors").
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n == 0 or n < -2):
        raise bad_request("options.num_predict must be a positive integer (or -1)")


def validate_chat(doc: dict[str, Any]) -> None:
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty array")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise bad_request(f"messages[{i}] needs a role")
    _check_options(doc)


def validate_generate(doc: dict[str, Any]) -> None:
    for key in ("prompt", "system"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise bad_request(f"{key} must be a string")
    _check_options(doc)


def _image_part(data: str) -> dict[str, Any]:
    # Ollama sends bare base64; infer the media type from the first bytes' encoding.
    media = (
        "image/jpeg" if data.startswith("/9j/") else "image/gif" if data.startswith("R0lG") else "image/png"
    )
    return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}


def _user_content(text: str, images: Any) -> Any:
    if not images:
        return text
    return [{"type": "text", "text": text}, *(_image_part(str(img)) for img in images)]


def _common(doc: dict[str, Any], body: dict[str, Any], stream: bool) -> dict[str, Any]:
    options = doc.get("options") or {}
    n = options.get("num_predict")
    if isinstance(n, int) and n > 0:
        body["max_tokens"] = n
    for key in ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty"):
        if options.get(key) is not None:
            body[key] = options[key]
    if options.get("stop"):
        body["stop"] = options["stop"]
    fmt = doc.get("format")
    if fmt == "json":
        body["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    if doc.get("tools"):
        body["tools"] = doc["tools"]
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chat_to_openai(doc: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The chat-completions request for an Ollama chat request (already validated)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of tool calls still waiting for their result
    for i, msg in enumerate(doc["messages"]):
        role = msg["role"]
        content = msg.get("content") or ""
        if role == "assistant" and msg.get("tool_calls"):
            calls = []
            for j, call in enumerate(msg["tool_calls"]):
                fn = call.get("function") or {}
                args = fn.get("arguments", {})
                call_id = f"call_{i}_{j}"
                pending.append(call_id)
                arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": fn.get("name", ""), "arguments": arguments},
                    }
                )
            out.append({"role": "assistant", "content": content or None, "tool_calls": calls})
        elif role == "tool":
            call_id = pending.pop(0) if pending else f"call_{i}"
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif role == "user":
            out.append({"role": "user", "content": _user_content(content, msg.get("images"))})
        else:
            out.append({"role": role, "content": content})
    return _common(doc, {"model": doc["model"], "messages": out}, stream)


def generate_to_openai(doc: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The chat-completions request for an Ollama generate request (already validated)."""
    out: list[dict[str, Any]] = []
    if doc.get("system"):
        out.append({"role": "system", "content": doc["system"]})
    out.append({"role": "user", "content": _user_content(doc.get("prompt") or "", doc.get("images"))})
    return _common(doc, {"model": doc["model"], "messages": out}, stream)


def load_reply(model: str) -> bytes:
    """Ollama's answer to a generate request with an empty prompt (it loads the model)."""
    return (
        _dumps({"model": model, "created_at": _now(), "response": "", "done": True, "done_reason": "load"})
        + b"\n"
    )


def _details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "safetensors",
        "family": "",
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }


def _digest(name: str, wl: Workload) -> str:
    # Digests are placeholders, not proofs of any artifact (docs/gateway.md, "Endpoints").
    return hashlib.sha256(f"{wl.key}\x00{name}".encode()).hexdigest()


def tag(name: str, wl: Workload) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": _EPOCH,
        "size": 0,
        "digest": _digest(name, wl),
        "details": _details(),
    }


def running(name: str, wl: Workload) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "size": 0,
        "digest": _digest(name, wl),
        "details": _details(),
        "expires_at": "2999-01-01T00:00:00Z",
        "size_vram": 0,
    }


def show(name: str, wl: Workload) -> dict[str, Any]:
    capabilities = []
    if TEXT_GENERATION in wl.capabilities:
        capabilities += ["completion", "tools"]
    if EMBEDDING in wl.capabilities:
        capabilities.append("embedding")
    return {
        "modelfile": f"# compatibility modelfile (sparkrun-operator)\nFROM {wl.served_name}\n",
        "parameters": "",
        "template": "{{ .Prompt }}",
        "details": _details(),
        "model_info": {"general.architecture": "", "sparkrun.workload": wl.key, "sparkrun.state": wl.state},
        "capabilities": capabilities,
        "modified_at": _EPOCH,
    }


class Translator:
    """Turns one upstream completion (or its chunks) into Ollama's chat/generate answer."""

    content_type = b"application/x-ndjson"

    def __init__(self, *, model: str, mode: Literal["chat", "generate"], stream: bool) -> None:
        self.model = model
        self.mode = mode
        self.stream = stream
        self._started = time.perf_counter_ns()
        self._first_token: int | None = None
        # NB: pieces, joined once at the end (str += on a dict value copies the whole string)
        self._calls: dict[int, tuple[list[str], list[str]]] = {}
        self._held = 0
        self._finish: str | None = None
        self._usage: dict[str, int] = {}

    def _piece(self, text: str, **extra: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"model": self.model, "created_at": _now()}
        if self.mode == "chat":
            base["message"] = {"role": "assistant", "content": text, **extra}
        else:
            base["response"] = text
        return base

    def _final(self, text: str = "", tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        now = time.perf_counter_ns()
        first = self._first_token or now
        extra = {"tool_calls": tool_calls} if tool_calls and self.mode == "chat" else {}
        return {
            **self._piece(text, **extra),
            "done": True,
            "done_reason": _DONE_REASONS.get(self._finish or "stop", "stop"),
            "total_duration": now - self._started,
            "load_duration": 0,
            "prompt_eval_count": self._usage.get("prompt_tokens", 0),
            "prompt_eval_duration": first - self._started,
            "eval_count": self._usage.get("completion_tokens", 0),
            "eval_duration": now - first,
        }

    def _tool_calls(self) -> list[dict[str, Any]]:
        calls = []
        for _, (names, pieces) in sorted(self._calls.items()):
            arguments = "".join(pieces)
            try:
                args: Any = enginejson.loads(arguments or "{}")
            except (ValueError, RecursionError):  # NB: not JSON, too deep, or over enginejson's bounds
                args = {"_raw": arguments}
            calls.append({"function": {"name": "".join(names), "arguments": args}})
        return calls

    def _gather(self, index: Any, name: str, arguments: str) -> None:
        """One streamed piece of tool call ``index``; bounded (:data:`MAX_TOOL_CALLS`,
        :data:`MAX_TOOL_CALL_CHARS`): ``ValueError`` beyond."""
        if not isinstance(index, int) or not isinstance(name, str) or not isinstance(arguments, str):
            raise ValueError("Upstream sent a tool call of an unexpected shape")
        slot = self._calls.get(index)
        if slot is None:
            if len(self._calls) >= MAX_TOOL_CALLS:
                raise ValueError(f"Upstream sent more than {MAX_TOOL_CALLS} tool calls")
            slot = self._calls[index] = ([], [])
        self._held += len(name) + len(arguments)
        if self._held > MAX_TOOL_CALL_CHARS:
            raise ValueError(f"Upstream sent tool calls longer than {MAX_TOOL_CALL_CHARS} characters")
        slot[0].append(name)
        slot[1].append(arguments)

    def whole(self, completion: dict[str, Any]) -> bytes:
        if "error" in completion:
            raise GatewayError(502, upstream_message(completion["error"]))
        choice = completion["choices"][0]
        message = choice.get("message") or {}
        self._finish = choice.get("finish_reason")
        self._usage = completion.get("usage") or {}
        for i, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function") or {}
            self._calls[i] = ([fn.get("name") or ""], [fn.get("arguments") or ""])
        return _dumps(self._final(message.get("content") or "", self._tool_calls()))

    def start(self) -> bytes:
        return b""

    def feed(self, chunk: dict[str, Any]) -> bytes:
        # NB: lines joined once (bytes += per line copied everything before it: quadratic)
        out: list[bytes] = []
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or ()
        if len(choices) > MAX_CHOICES:
            raise too_many("choices", MAX_CHOICES)
        for choice in choices:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._first_token is None:
                    self._first_token = time.perf_counter_ns()
                out.append(_dumps({**self._piece(text), "done": False}) + b"\n")
            calls = delta.get("tool_calls") or ()
            if len(calls) > MAX_TOOL_CALL_DELTAS:
                raise too_many("tool-call deltas", MAX_TOOL_CALL_DELTAS)
            for call in calls:
                fn = call.get("function") or {}
                self._gather(call.get("index", 0), fn.get("name") or "", fn.get("arguments") or "")
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return b"".join(out)

    def finish(self) -> bytes:
        out: list[bytes] = []
        if self._calls and self.mode == "chat":
            out.append(_dumps({**self._piece("", tool_calls=self._tool_calls()), "done": False}) + b"\n")
        out.append(_dumps(self._final()) + b"\n")
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """Ollama streams report failures as a final ``{"error": ...}`` line."""
        return _dumps({"error": clip(message)}) + b"\n"
