"""The gateway's SDK surface against a second, independent upstream: llm-d-inference-sim.

The stand-in (``sparkrun_testbed.engine``) was written with the gateway; llm-d-inference-sim
(Go, llm-d's vLLM simulator, built by ``hack/llmd-sim-bin.sh``) was not, so what passes here does
not rest on the two agreeing by construction. The official ``openai``, ``anthropic`` and
``ollama`` clients talk to the gateway, streaming and not, with the simulator as the only backend.
It runs in echo mode (the answer is the last message, so results can be checked) with the
simulated tokenizer. A missing binary skips these tests, and fails them under ``CI=true`` after
an attempt to build it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from sparkrun_testbed import llmdsim
from tests.engine.conftest import free_port
from tests.gobinary import go_binary
from tests.process.helpers import wait_for

from .conftest import GatewayThread, StartGateway, assert_stream_passed_through, workload

PROMPT = "The quick brown fox jumps over the lazy dog."
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    }
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llmdsim.Sim]:
    binary = go_binary(llmdsim.locate, llmdsim.build, "hack/llmd-sim-bin.sh")
    log = tmp_path_factory.mktemp("llmd-sim") / "sim.log"
    options = llmdsim.Options(model="sim-model", mode="echo")
    proc = llmdsim.Sim.start(binary, free_port(), log, options)
    yield proc
    proc.stop()


@pytest.fixture
def gw(sim: llmdsim.Sim, start_gateway: StartGateway) -> GatewayThread:
    return start_gateway([workload("sim", "sim-model", [sim.url], aliases=["sim"])])


@pytest.fixture
def oai(gw: GatewayThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


def _user(text: str = PROMPT) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _direct_usage(sim: llmdsim.Sim, max_tokens: int) -> dict[str, Any]:
    """The simulator's own answer to ``PROMPT`` (its usage and finish reason), without the gateway.

    NB: in echo mode the simulator answers the whole prompt even when ``max_tokens`` is smaller,
    with ``finish_reason: length`` and the tokens it sent; the gateway must relay exactly that.
    """
    body = {"model": "sim-model", "messages": _user(), "max_tokens": max_tokens}
    answer = httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=20).json()
    return {"finish": answer["choices"][0]["finish_reason"], **answer["usage"]}


# -- OpenAI ---------------------------------------------------------------------------------


def test_openai_chat_matches_direct(oai: openai.OpenAI, sim: llmdsim.Sim) -> None:
    via = oai.chat.completions.create(model="sim", messages=_user(), max_tokens=100)
    with openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0, timeout=20) as direct:
        alone = direct.chat.completions.create(model="sim-model", messages=_user(), max_tokens=100)
    assert via.choices[0].message.content == PROMPT
    assert via.choices[0].message.content == alone.choices[0].message.content
    assert via.choices[0].finish_reason == "stop"
    assert via.usage == alone.usage


def test_openai_chat_stream_is_passed_through(
    oai: openai.OpenAI, gw: GatewayThread, sim: llmdsim.Sim
) -> None:
    body = {
        "model": "sim-model",
        "messages": _user(),
        "max_tokens": 100,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert_stream_passed_through(gw.url, sim.url, body)

    chunks = list(oai.chat.completions.create(**body))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == PROMPT
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


def test_openai_completions_stream_and_not(oai: openai.OpenAI) -> None:
    whole = oai.completions.create(model="sim", prompt=PROMPT, max_tokens=100)
    assert whole.choices[0].text == PROMPT
    streamed = list(oai.completions.create(model="sim", prompt=PROMPT, max_tokens=100, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == PROMPT


def test_openai_max_tokens_reached(oai: openai.OpenAI, sim: llmdsim.Sim) -> None:
    direct = _direct_usage(sim, 3)
    cut = oai.chat.completions.create(model="sim", messages=_user(), max_tokens=3)
    assert cut.choices[0].finish_reason == direct["finish"] == "length"
    assert cut.usage is not None
    assert cut.usage.completion_tokens == direct["completion_tokens"]


def test_openai_unknown_model_is_404(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="no-such-model", messages=_user())


def test_openai_embeddings(sim: llmdsim.Sim, start_gateway: StartGateway) -> None:
    gw = start_gateway([workload("emb", "sim-model", [sim.url], capabilities=["embedding"])])
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20) as oai:
        emb = oai.embeddings.create(model="sim-model", input=["a", "b"])
        with pytest.raises(openai.BadRequestError):
            oai.chat.completions.create(model="sim-model", messages=_user())
    direct = httpx.post(f"{sim.url}/v1/embeddings", json={"model": "sim-model", "input": ["a", "b"]}).json()
    assert [d.embedding for d in emb.data] == [d["embedding"] for d in direct["data"]]
    assert len(emb.data[0].embedding) == 384  # the simulator's --default-embedding-dimensions


def _tokens(gw: GatewayThread, direction: str) -> float:
    text = httpx.get(f"{gw.url}/metrics").text
    found = re.search(rf'sparkrun_gateway_tokens_total{{direction="{direction}",model="sim"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_metrics_count_streamed_usage(oai: openai.OpenAI, gw: GatewayThread) -> None:
    """The token counters come from the simulator's streamed usage event (passed through as is)."""
    chunks = list(
        oai.chat.completions.create(
            model="sim", messages=_user(), stream=True, stream_options={"include_usage": True}
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    # The gateway counts once the stream has ended on its side, which may be just after the
    # client has read the last chunk: wait (bounded) for the counters, then compare exactly.
    want = {"out": float(usage.completion_tokens), "in": float(usage.prompt_tokens)}
    got = wait_for(
        lambda: seen if (seen := {d: _tokens(gw, d) for d in want}) == want else None,
        timeout=10,
        what=f"the gateway's token counters at {want}",
    )
    assert got == want


# -- Anthropic ------------------------------------------------------------------------------


def test_anthropic_messages_non_streaming(claude: anthropic.Anthropic, sim: llmdsim.Sim) -> None:
    msg = claude.messages.create(
        model="sim", max_tokens=100, system="Be terse.", messages=[{"role": "user", "content": PROMPT}]
    )
    assert msg.type == "message"
    assert msg.model == "sim"
    assert msg.content[0].type == "text"
    assert msg.content[0].text == PROMPT
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 0
    assert msg.usage.output_tokens > 0
    cut = claude.messages.create(model="sim", max_tokens=2, messages=[{"role": "user", "content": PROMPT}])
    direct = _direct_usage(sim, 2)
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == direct["completion_tokens"]
    assert cut.usage.input_tokens == direct["prompt_tokens"]


def test_anthropic_streaming_matches_non_streaming(claude: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {"model": "sim-model", "max_tokens": 100, "messages": _user()}
    whole = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == PROMPT
    assert text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_anthropic_stream_event_sequence(gw: GatewayThread, sim: llmdsim.Sim) -> None:
    body = {"model": "sim", "max_tokens": 3, "stream": True, "messages": _user()}
    with httpx.stream("POST", f"{gw.url}/v1/messages", json=body) as resp:
        raw = resp.read().decode()
    names = re.findall(r"^event: (\S+)$", raw, flags=re.M)
    assert names[:2] == ["message_start", "content_block_start"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    delta = json.loads(re.findall(r"^data: (.*message_delta.*)$", raw, flags=re.M)[0])
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"]["output_tokens"] == _direct_usage(sim, 3)["completion_tokens"]


def test_anthropic_tool_use_stream_and_not(claude: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": "sim",
        "max_tokens": 100,
        "tools": TOOLS,
        "tool_choice": {"type": "any"},  # "required": the simulator then always calls a tool
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    first = claude.messages.create(**kwargs)
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather"
    assert isinstance(call.input["city"], str)  # type: ignore[index]
    assert isinstance(call.input["days"], int)  # type: ignore[index]
    with claude.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    streamed_call = next(b for b in streamed.content if b.type == "tool_use")
    assert streamed.stop_reason == "tool_use"
    assert streamed_call.name == "get_weather"
    assert set(streamed_call.input) >= {"city", "days"}
    answered = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [c.model_dump() for c in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    second = claude.messages.create(**{**kwargs, "messages": answered, "tool_choice": {"type": "none"}})
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"


# -- Ollama ---------------------------------------------------------------------------------


def test_ollama_chat_stream_and_not(llama: ollama.Client, sim: llmdsim.Sim) -> None:
    whole = llama.chat(model="sim", messages=_user(), stream=False)
    assert whole.done
    assert whole.done_reason == "stop"
    assert whole.message.content == PROMPT
    assert whole.eval_count
    parts = list(llama.chat(model="sim", messages=_user(), stream=True))
    assert "".join(p.message.content or "" for p in parts) == PROMPT
    assert parts[-1].done
    assert not any(p.done for p in parts[:-1])
    assert parts[-1].eval_count == whole.eval_count
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count
    cut = llama.chat(model="sim", messages=_user(), options={"num_predict": 2}, stream=False)
    assert cut.done_reason == "length"
    assert cut.eval_count == _direct_usage(sim, 2)["completion_tokens"]


def test_ollama_generate_stream_and_not(llama: ollama.Client) -> None:
    whole = llama.generate(model="sim-model", prompt=PROMPT, stream=False)
    assert whole.done
    assert whole.response == PROMPT
    parts = list(llama.generate(model="sim-model", prompt=PROMPT, stream=True))
    assert "".join(p.response or "" for p in parts) == PROMPT
    assert parts[-1].done


def test_ollama_tool_calls_stream_and_not(llama: ollama.Client) -> None:
    """The simulator streams a call's arguments in many pieces (``name: null`` after the first)."""
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": TOOLS[0]["input_schema"]}}
    ]
    messages = [{"role": "user", "content": "Weather?"}]
    # NB: without tool_choice (Ollama has none) the simulator calls a tool at random (about half
    # the time; its seed is fixed, llmdsim.Options.seed): ask until it does, a bounded number of
    # times (32 misses in a row: one chance in 4e9 even were the order of requests to change).
    whole = next(
        (
            r
            for r in (
                llama.chat(model="sim", messages=messages, tools=tools, stream=False) for _ in range(32)
            )
            if r.message.tool_calls
        ),
        None,
    )
    assert whole is not None
    assert whole.message.tool_calls
    call = whole.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert isinstance(call.function.arguments["city"], str)
    assert isinstance(call.function.arguments["days"], int)
    for _ in range(32):
        parts = list(llama.chat(model="sim", messages=messages, tools=tools, stream=True))
        streamed = [c for p in parts for c in (p.message.tool_calls or [])]
        if streamed:
            break
    assert len(streamed) == 1
    assert streamed[0].function.name == "get_weather"
    assert set(streamed[0].function.arguments) == {"city", "days"}
    assert parts[-1].done


# -- What the simulator refuses, and many streams at once -----------------------------------


def test_upstream_refusals_reach_every_family(
    sim: llmdsim.Sim, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """A request over the simulator's context window: its 400 and message, in each protocol.

    Streamed, the simulator answers ``200`` with a first event ``{"error": {..., "code": 400}}``;
    the gateway used to turn that into a started stream with an in-band ``api_error``.
    """
    long = " ".join(["word"] * 9000)  # over --max-model-len (8192 tokens)
    gw = start_gateway([workload("sim", "sim-model", [sim.url])])
    oai = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20)
    with oai, pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="sim-model", messages=_user(long), max_tokens=5)
    assert "maximum context length" in err.value.message
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=20) as claude:
        with pytest.raises(anthropic.BadRequestError) as aerr:
            claude.messages.create(model="sim-model", max_tokens=5, messages=_user(long))
        assert "maximum context length" in aerr.value.message
        streamed = claude.messages.stream(model="sim-model", max_tokens=5, messages=_user(long))
        with pytest.raises(anthropic.BadRequestError) as aerr, streamed as stream:
            list(stream)
        assert "maximum context length" in aerr.value.message
    llama = ollama.Client(host=gw.url, timeout=20)
    with pytest.raises(ollama.ResponseError) as whole:
        llama.chat(model="sim-model", messages=_user(long), stream=False)
    with pytest.raises(ollama.ResponseError) as streamed_err:
        list(llama.chat(model="sim-model", messages=_user(long), stream=True))
    for oerr in (whole, streamed_err):
        assert oerr.value.status_code == 400
        assert "maximum context length" in oerr.value.error
    llama.close()


def _no_ids(raw: bytes) -> bytes:
    return re.sub(rb"(resp|msg)_[0-9a-f-]+", b"ID", re.sub(rb'"created_at":\d+', b"", raw))


def test_openai_responses_stream_and_not(oai: openai.OpenAI, gw: GatewayThread, sim: llmdsim.Sim) -> None:
    whole = oai.responses.create(model="sim", input=PROMPT)
    assert whole.status == "completed"
    assert whole.output_text == PROMPT
    # NB: the SDK's stream helper cannot read v0.10.2's Responses events (no output_index), even
    # directly, so the stream is checked as bytes: passed through as the simulator sends it.
    body = {"model": "sim-model", "input": PROMPT, "stream": True}
    via = httpx.post(f"{gw.url}/v1/responses", json=body, timeout=20)
    direct = httpx.post(f"{sim.url}/v1/responses", json=body, timeout=20)
    assert via.headers["content-type"].startswith("text/event-stream")
    assert _no_ids(via.content) == _no_ids(direct.content)
    deltas = re.findall(rb'"delta":"([^"]*)"', via.content)
    assert b"".join(deltas).decode() == PROMPT


def test_many_concurrent_streams(gw: GatewayThread) -> None:
    """32 streams at once, each with its own prompt, each answered with exactly its own prompt."""

    async def one(client: httpx.AsyncClient, i: int) -> str:
        body = {"model": "sim", "messages": _user(f"stream {i} says hello"), "stream": True}
        text = ""
        async with client.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:])["choices"]:
                        text += choice["delta"].get("content") or ""
        return text

    async def run() -> list[str]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(*(one(client, i) for i in range(32)))

    assert asyncio.run(run()) == [f"stream {i} says hello" for i in range(32)]


def test_bench_gateway_runs_against_the_simulator(sim: llmdsim.Sim, tmp_path: Path) -> None:
    """``bench.gateway --upstream llmd-sim`` in small: direct and gateway, every stream 64 tokens."""
    from bench import gateway as bench_gateway

    targets = bench_gateway.Targets(tmp_path, "zero", None, [1], upstream="llmd-sim")
    try:
        assert set(targets.ports) == {"direct", "gateway"}
        for port in targets.ports.values():
            samples, errors, _ = asyncio.run(bench_gateway.run_round(port, 4, 2))
            assert errors == 0
            assert [s.tokens for s in samples] == [bench_gateway.OUTPUT_TOKENS] * 8
    finally:
        targets.stop()
