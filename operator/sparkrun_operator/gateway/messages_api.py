"""Anthropic Messages (``POST /v1/messages``) <-> OpenAI chat completions.

Pure translation: a request becomes one chat-completions request; a completion (or a stream of
chunks) becomes a Messages response (or the Messages event sequence: ``message_start``,
``content_block_start``, ``content_block_delta``, ``content_block_stop``, ``message_delta``,
``message_stop``). Covered: system prompts (string or text blocks), multi-turn, images (base64 or
URL), tools (``tool_use`` / ``tool_result``, ``tool_choice``), stop sequences, stop reasons and
usage. Thinking blocks in requests are dropped (the upstream has no field for them).
"""

from __future__ import annotations

import json
from typing import Any

from . import enginejson
from .enginejson import MAX_CHOICES, MAX_TOOL_CALL_DELTAS, too_many
from .errors import GatewayError, bad_request, render, upstream_message

MAX_TOOL_CALLS = 1024
"""Distinct tool calls one streamed answer may make (more: the stream ends with an error)."""

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def validate(doc: dict[str, Any]) -> None:
    """Refuse what Anthropic's API refuses before dispatch (400 ``invalid_request_error``)."""
    max_tokens = doc.get("max_tokens")
    if max_tokens is None:
        raise bad_request("max_tokens: Field required", param="max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise bad_request("max_tokens: must be a positive integer", param="max_tokens")
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: at least one message is required", param="messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in {"user", "assistant"}:
            raise bad_request(f"messages.{i}.role: Input should be 'user' or 'assistant'", param="messages")
        if not isinstance(msg.get("content"), str | list):
            raise bad_request(f"messages.{i}.content: Field required", param="messages")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _image_url(block: dict[str, Any]) -> str:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise bad_request("image source must be base64 or url", param="messages")


def to_openai(doc: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request equivalent to Messages request ``doc`` (already validated)."""
    out: list[dict[str, Any]] = []
    system = _text_of(doc.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for msg in doc["messages"]:
        role, content = msg["role"], msg["content"]
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
                call = {"name": block.get("name", ""), "arguments": arguments}
                calls.append({"id": block.get("id", ""), "type": "function", "function": call})
            elif kind == "tool_result":
                text = _text_of(block.get("content"))
                if block.get("is_error"):
                    text = f"Error: {text}"
                results.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text}
                )
        if role == "assistant":
            text = "".join(p["text"] for p in parts if p["type"] == "text")
            item: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
            continue
        # Tool results answer the previous assistant turn, so they come first, as tool messages.
        out.extend(results)
        if parts:
            simple = all(p["type"] == "text" for p in parts)
            out.append({"role": "user", "content": "".join(p["text"] for p in parts) if simple else parts})
    body: dict[str, Any] = {"model": doc["model"], "messages": out, "max_tokens": doc["max_tokens"]}
    for key in ("temperature", "top_p", "top_k"):
        if doc.get(key) is not None:
            body[key] = doc[key]
    if doc.get("stop_sequences"):
        body["stop"] = doc["stop_sequences"]
    if isinstance(doc.get("metadata"), dict) and doc["metadata"].get("user_id"):
        body["user"] = doc["metadata"]["user_id"]
    tools = doc.get("tools")
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name", ""),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
                },
            }
            for t in tools
            if isinstance(t, dict)
        ]
    choice = doc.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "auto":
            body["tool_choice"] = "auto"
        elif kind == "any":
            body["tool_choice"] = "required"
        elif kind == "none":
            body["tool_choice"] = "none"
        elif kind == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": choice.get("name", "")}}
    if doc.get("stream"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _stop(finish: str | None, stop_reason: Any) -> tuple[str | None, str | None]:
    if finish == "stop" and isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    if finish is None:
        return None, None
    return _STOP_REASONS.get(finish, "end_turn"), None


def _event(name: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return b"event: " + name.encode() + b"\ndata: " + data.encode() + b"\n\n"


def _parse_arguments(raw: str | None) -> Any:
    if not raw:
        return {}
    try:
        return enginejson.loads(raw)
    except (ValueError, RecursionError):  # NB: not JSON, too deep, or over enginejson's bounds
        return {"_raw": raw}


class Translator:
    """Turns one upstream completion (or its chunks) into the Messages answer."""

    content_type = b"text/event-stream; charset=utf-8"

    def __init__(self, *, model: str, rid: str) -> None:
        self.model = model
        self.id = f"msg_{rid}"
        self._index = -1
        self._open: str | None = None
        self._tool_blocks: dict[int, int] = {}
        self._finish: str | None = None
        self._stop_reason: Any = None
        self._usage: dict[str, int] = {}

    # -- non-streaming ----------------------------------------------------------------------

    def whole(self, completion: dict[str, Any]) -> bytes:
        if "error" in completion:
            raise GatewayError(502, upstream_message(completion["error"]))
        choice = completion["choices"][0]
        message = choice.get("message") or {}
        content: list[dict[str, Any]] = []
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id", ""),
                    "name": fn.get("name", ""),
                    "input": _parse_arguments(fn.get("arguments")),
                }
            )
        stop_reason, stop_sequence = _stop(choice.get("finish_reason"), choice.get("stop_reason"))
        usage = completion.get("usage") or {}
        body = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": {
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
            },
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    # -- streaming --------------------------------------------------------------------------

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def _close(self, out: list[bytes]) -> None:
        if self._open is not None:
            self._open = None
            out.append(_event("content_block_stop", {"type": "content_block_stop", "index": self._index}))

    def _begin(self, out: list[bytes], kind: str, block: dict[str, Any]) -> None:
        self._close(out)
        self._index += 1
        self._open = kind
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        out.append(_event("content_block_start", start))

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def feed(self, chunk: dict[str, Any]) -> bytes:
        # NB: pieces joined once (bytes += per piece copied everything before it: quadratic)
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
                if self._open != "text":
                    self._begin(out, "text", {"type": "text", "text": ""})
                out.append(self._delta(self._index, {"type": "text_delta", "text": text}))
            calls = delta.get("tool_calls") or ()
            if len(calls) > MAX_TOOL_CALL_DELTAS:
                raise too_many("tool-call deltas", MAX_TOOL_CALL_DELTAS)
            for call in calls:
                fn = call.get("function") or {}
                position = call.get("index", 0)
                if position not in self._tool_blocks:
                    if len(self._tool_blocks) >= MAX_TOOL_CALLS:
                        raise ValueError(f"Upstream sent more than {MAX_TOOL_CALLS} tool calls")
                    block = {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": fn.get("name", ""),
                        "input": {},
                    }
                    self._begin(out, "tool", block)
                    self._tool_blocks[position] = self._index
                if fn.get("arguments"):
                    partial = {"type": "input_json_delta", "partial_json": fn["arguments"]}
                    out.append(self._delta(self._tool_blocks[position], partial))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._stop_reason = choice.get("stop_reason")
        return b"".join(out)

    def finish(self) -> bytes:
        stop_reason, stop_sequence = _stop(self._finish or "stop", self._stop_reason)
        usage = {
            "input_tokens": self._usage.get("prompt_tokens", 0),
            "output_tokens": self._usage.get("completion_tokens", 0),
        }
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out: list[bytes] = []
        self._close(out)
        out.append(_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(_event("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """An in-band ``error`` event; Anthropic streams end with it when the server fails."""
        return b"event: error\ndata: " + render("anthropic", 500, message) + b"\n\n"
