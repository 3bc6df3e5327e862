"""Anthropic Messages and Ollama through the gateway, with their official clients, and goldens.

Golden files (``golden/*.json``) pin the translations: each holds an input (a client request, an
upstream completion, or a list of upstream chunks) and the expected output. Regenerate with
``SPARKRUN_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import pytest

from sparkrun_operator.gateway import messages_api, ollama_api

from .conftest import Engines, GatewayThread, StartGateway

GOLDEN = Path(__file__).parent / "golden"
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture
def gw(engines: Engines, start_gateway: StartGateway) -> GatewayThread:
    return start_gateway([engines.chat_workload(), engines.embed_workload()])


# -- Anthropic ------------------------------------------------------------------------------


def test_messages_non_streaming(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(
        model="chat",
        max_tokens=6,
        system="You are terse.",
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me more"}]},
        ],
    )
    assert msg.type == "message"
    assert msg.role == "assistant"
    assert msg.model == "chat"
    assert msg.stop_reason == "max_tokens"
    assert msg.content[0].type == "text"
    assert len(msg.content[0].text.split()) == 6
    assert msg.usage.output_tokens == 6
    assert msg.usage.input_tokens > 0
    natural = claude.messages.create(
        model="chat", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    )
    assert natural.stop_reason == "end_turn"


def test_messages_streaming_matches_non_streaming(claude: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": "chat-model",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "s"}],
    }
    whole = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 5


def test_messages_stream_event_sequence(gw: GatewayThread) -> None:
    body = {"model": "chat", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", f"{gw.url}/v1/messages", json=body) as resp:
        raw = resp.read().decode()
    names = re.findall(r"^event: (\S+)$", raw, flags=re.M)
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_messages_tools_round_trip(claude: anthropic.Anthropic) -> None:
    first = claude.messages.create(
        model="chat",
        max_tokens=100,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather"
    assert isinstance(call.input["city"], str)  # type: ignore[index]
    with claude.messages.stream(
        model="chat",
        max_tokens=100,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        streamed = stream.get_final_message()
    streamed_call = next(b for b in streamed.content if b.type == "tool_use")
    assert streamed_call.input == call.input
    assert streamed.stop_reason == "tool_use"
    second = claude.messages.create(
        model="chat",
        max_tokens=100,
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [c.model_dump() for c in first.content]},  # type: ignore[misc]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"


def test_messages_errors_are_anthropic_shaped(claude: anthropic.Anthropic, gw: GatewayThread) -> None:
    with pytest.raises(anthropic.NotFoundError) as err:
        claude.messages.create(model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "No instance found for model nope"},
    }
    resp = httpx.post(
        f"{gw.url}/v1/messages", json={"model": "chat", "messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 400
    assert resp.json()["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required"}
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="embed-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])


# -- Ollama ---------------------------------------------------------------------------------


def test_ollama_chat_stream_and_not(llama: ollama.Client) -> None:
    messages = [{"role": "user", "content": "Hello"}]
    whole = llama.chat(model="chat", messages=messages, options={"num_predict": 4}, stream=False)
    assert whole.done
    assert whole.done_reason == "length"
    assert whole.eval_count == 4
    parts = list(llama.chat(model="chat", messages=messages, options={"num_predict": 4}, stream=True))
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].done
    assert not any(p.done for p in parts[:-1])
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count


def test_ollama_generate_stream_and_not(llama: ollama.Client) -> None:
    whole = llama.generate(model="chat-model", prompt="Write a haiku", system="Be calm.", stream=False)
    assert whole.done
    assert whole.done_reason == "stop"
    parts = list(llama.generate(model="chat-model", prompt="Write a haiku", system="Be calm.", stream=True))
    assert "".join(p.response for p in parts) == whole.response
    loaded = llama.generate(model="chat-model", stream=False)
    assert loaded.done_reason == "load"


def test_ollama_tools(llama: ollama.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": TOOLS[0]["input_schema"]}}
    ]
    reply = llama.chat(
        model="chat", messages=[{"role": "user", "content": "Weather?"}], tools=tools, stream=False
    )
    calls = reply.message.tool_calls
    assert calls
    assert calls[0].function.name == "get_weather"
    assert isinstance(calls[0].function.arguments["city"], str)
    streamed = list(
        llama.chat(model="chat", messages=[{"role": "user", "content": "Weather?"}], tools=tools, stream=True)
    )
    streamed_calls = [c for p in streamed for c in (p.message.tool_calls or [])]
    assert streamed_calls[0].function.arguments == calls[0].function.arguments
    follow = llama.chat(
        model="chat",
        messages=[
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
            {"role": "tool", "content": "sunny"},
        ],
        tools=tools,
        stream=False,
    )
    assert follow.message.content


def test_ollama_catalog(llama: ollama.Client, gw: GatewayThread) -> None:
    names = sorted(m.model or "" for m in llama.list().models)
    assert names == ["chat", "chat-model", "embed-model"]
    shown = llama.show("chat")
    assert "FROM chat-model" in (shown.modelfile or "")
    assert "completion" in (shown.capabilities or [])
    running = sorted(m.model or "" for m in llama.ps().models)
    assert running == ["chat", "chat-model", "embed-model"]
    with pytest.raises(ollama.ResponseError) as err:
        llama.show("nope")
    assert err.value.status_code == 404
    assert httpx.post(f"{gw.url}/api/show", json={}).status_code == 400
    both = httpx.post(f"{gw.url}/api/show", json={"name": "chat", "model": "nope"})
    assert both.status_code == 200  # name takes precedence
    assert httpx.get(f"{gw.url}/api/version").json() == {"version": "0.1.0"}


def test_ollama_errors(llama: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        llama.chat(model="nope", messages=[{"role": "user", "content": "x"}], stream=False)
    assert err.value.status_code == 404
    assert err.value.error == "No instance found for model nope"
    with pytest.raises(ollama.ResponseError) as err:
        list(llama.chat(model="embed-model", messages=[{"role": "user", "content": "x"}], stream=True))
    assert err.value.status_code == 400


@pytest.mark.parametrize("prefix", ["/ollama/api", "/ollama/api/api", "/ollama/api/v1"])
def test_ollama_prefixed_routes(gw: GatewayThread, prefix: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "x"}], "options": {"num_predict": 2}}
    resp = httpx.post(f"{gw.url}{prefix}/chat", json=body)
    assert resp.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in resp.text.splitlines()]
    assert [line["done"] for line in lines] == [False, False, True]
    assert httpx.get(f"{gw.url}{prefix}/tags").status_code == 200
    assert httpx.head(f"{gw.url}/ollama/api/version").status_code == 200
    assert httpx.head(f"{gw.url}/ollama/").status_code == 200


# -- Goldens --------------------------------------------------------------------------------


def _normalize(value: Any) -> Any:
    """Blank the fields that vary per run (timestamps, durations)."""
    text = json.dumps(value)
    text = re.sub(r'"created_at": "[^"]+"', '"created_at": "T"', text)
    text = re.sub(r'"(total|prompt_eval|eval)_duration": \d+', r'"\1_duration": 0', text)
    text = re.sub(r'\\"created_at\\":\\"[^"\\]+\\"', r'\\"created_at\\":\\"T\\"', text)
    text = re.sub(r'\\"(total|prompt_eval|eval)_duration\\":\d+', r'\\"\1_duration\\":0', text)
    return json.loads(text)


def _run_case(case: dict[str, Any]) -> Any:
    kind, data = case["kind"], case["input"]
    if kind == "anthropic_request":
        messages_api.validate(data)
        return messages_api.to_openai(data)
    if kind == "anthropic_response":
        return json.loads(messages_api.Translator(model="m", rid="r").whole(data))
    if kind == "anthropic_stream":
        t = messages_api.Translator(model="m", rid="r")
        return (t.start() + b"".join(t.feed(chunk) for chunk in data) + t.finish()).decode()
    if kind == "ollama_chat_request":
        ollama_api.validate_chat(data)
        return ollama_api.chat_to_openai(data, data.get("stream", True) is not False)
    if kind == "ollama_generate_request":
        ollama_api.validate_generate(data)
        return ollama_api.generate_to_openai(data, data.get("stream", True) is not False)
    if kind == "ollama_stream":
        t = ollama_api.Translator(model="m", mode="chat", stream=True)
        return (t.start() + b"".join(t.feed(chunk) for chunk in data) + t.finish()).decode()
    if kind == "ollama_response":
        return json.loads(ollama_api.Translator(model="m", mode="generate", stream=False).whole(data))
    raise AssertionError(f"unknown golden kind {kind}")


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    case = json.loads(path.read_text())
    got = _normalize(_run_case(case))
    if os.environ.get("SPARKRUN_UPDATE_GOLDEN") == "1":
        case["expected"] = got
        path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
    assert got == case["expected"]


def test_goldens_exist() -> None:
    assert len(list(GOLDEN.glob("*.json"))) >= 8
