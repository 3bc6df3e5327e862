"""The stand-in's OpenAI-compatible surface, exercised with the official ``openai`` client.

Covers: models listing, chat and completions (streaming and not, usage chunks, determinism),
tool calls, embeddings (float and base64), the Responses API, vLLM's error bodies, context-length
refusals, sleep mode, metrics, client disconnects and the log line for unknown arguments.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from .conftest import EngineProc, StartEngine

_clients: dict[str, openai.OpenAI] = {}


def client(engine: EngineProc) -> openai.OpenAI:
    """A client per engine, closed when the module's tests are done."""
    if engine.url not in _clients:
        _clients[engine.url] = openai.OpenAI(
            base_url=f"{engine.url}/v1", api_key="unused", max_retries=0, timeout=20
        )
    return _clients[engine.url]


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for c in _clients.values():
        c.close()
    _clients.clear()


def metric(engine: EngineProc, name: str, **labels: str) -> float:
    """One sample of ``/metrics`` (the sum of every series matching ``labels``)."""
    text = httpx.get(f"{engine.url}/metrics").text
    total = 0.0
    found = False
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
            found = True
    assert found, f"{name} {labels} not in /metrics"
    return total


def test_models_lists_every_served_name(engine: EngineProc) -> None:
    models = client(engine).models.list()
    assert [m.id for m in models.data] == ["m", "m-alias"]
    raw = httpx.get(f"{engine.url}/v1/models").json()
    assert raw["data"][0]["root"] == "org/model"
    assert raw["data"][0]["max_model_len"] == 512
    assert raw["data"][0]["owned_by"] == "vllm"


def test_chat_is_deterministic_and_reports_usage(engine: EngineProc) -> None:
    c = client(engine)
    messages = [{"role": "user", "content": "Tell me about foxes."}]
    first = c.chat.completions.create(model="m", messages=messages, max_tokens=6)
    again = c.chat.completions.create(model="m-alias", messages=messages, max_tokens=6)
    other = c.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Something else entirely."}],
        max_tokens=6,
    )
    assert first.object == "chat.completion"
    assert first.model == "m"
    text = first.choices[0].message.content
    assert text
    assert len(text.split()) == 6
    assert text == again.choices[0].message.content
    assert text != other.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    assert first.usage is not None
    assert first.usage.completion_tokens == 6
    assert first.usage.prompt_tokens == len(re.findall(r"\w+|[^\w\s]", "user: Tell me about foxes."))


def test_chat_stops_naturally_without_max_tokens(engine: EngineProc) -> None:
    reply = client(engine).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 16


def test_chat_stream_matches_the_non_streamed_answer(engine: EngineProc) -> None:
    c = client(engine)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Stream please"}]
    whole = c.chat.completions.create(model="m", messages=messages, max_tokens=5)
    stream = c.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5


def test_chat_stream_wire_format_is_vllm_sse(engine: EngineProc) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": True}
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert len(payloads) == 3  # role chunk + 2 tokens, no usage chunk unless asked
    assert all("usage" not in p for p in payloads)


def test_completions_stream_and_not(engine: EngineProc) -> None:
    c = client(engine)
    whole = c.completions.create(model="m", prompt="Once upon a time", max_tokens=4)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    streamed = list(
        c.completions.create(
            model="m",
            prompt="Once upon a time",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].text for ch in streamed if ch.choices)
    assert text == whole.choices[0].text
    assert streamed[-1].usage is not None
    assert streamed[-1].usage.completion_tokens == 4


def test_tool_call_then_answer(engine: EngineProc) -> None:
    c = client(engine)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"],
                },
            },
        }
    ]
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Paris?"}]
    reply = c.chat.completions.create(model="m", messages=messages, tools=tools)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    call = calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str)
    assert isinstance(args["days"], int)

    streamed = list(c.chat.completions.create(model="m", messages=messages, tools=tools, stream=True))
    pieces = [
        tc.function.arguments or ""
        for ch in streamed
        if ch.choices and ch.choices[0].delta.tool_calls
        for tc in ch.choices[0].delta.tool_calls
        if tc.function
    ]
    assert json.loads("".join(pieces)) == args
    assert streamed[-1].choices[0].finish_reason == "tool_calls"

    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    final = c.chat.completions.create(model="m", messages=messages, tools=tools)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content


def test_tool_choice_none_answers_in_text(engine: EngineProc) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    reply = client(engine).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        tool_choice="none",
    )
    assert reply.choices[0].finish_reason == "stop"
    assert not reply.choices[0].message.tool_calls


def test_responses_api_stream_and_not(engine: EngineProc) -> None:
    c = client(engine)
    whole = c.responses.create(model="m", input="Hello from the Responses API")
    assert whole.status == "completed"
    assert whole.usage is not None
    assert whole.usage.output_tokens == 16
    with c.responses.stream(model="m", input="Hello from the Responses API") as stream:
        deltas = [ev.delta for ev in stream if ev.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == whole.output_text
    assert final.output_text == whole.output_text


def test_responses_budget_ends_incomplete(engine: EngineProc) -> None:
    c = client(engine)
    whole = c.responses.create(model="m", input=[{"role": "user", "content": "Hi"}], max_output_tokens=5)
    assert whole.status == "incomplete"
    assert len(whole.output_text.split()) == 5
    events = list(c.responses.create(model="m", input="Hi", max_output_tokens=5, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.incomplete"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_unknown_model_is_vllm_404(engine: EngineProc) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(engine).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 404
    assert err.value.body == {
        "message": "The model `nope` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


def test_context_length_and_bad_input_are_400(engine: EngineProc) -> None:
    c = client(engine)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=600)
    assert "maximum context length is 512 tokens" in err.value.message
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 600}])
    resp = httpx.post(f"{engine.url}/v1/chat/completions", content=b"{not json")
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "BadRequestError"
    assert httpx.get(f"{engine.url}/v1/nothing-here").status_code == 404
    assert httpx.get(f"{engine.url}/v1/chat/completions").status_code == 405


def test_chat_model_refuses_embeddings(engine: EngineProc) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(engine).embeddings.create(model="m", input="x")
    assert "does not support Embeddings API" in err.value.message


def test_embeddings_on_a_pooling_runner(start_engine: StartEngine) -> None:
    emb = start_engine("org/embedder", "--runner", "pooling", env={"SPARKRUN_ENGINE_EMBED_DIM": "24"})
    c = client(emb)
    # The openai client asks for base64 and decodes it; check it against the float form.
    decoded = c.embeddings.create(model="org/embedder", input=["alpha", "beta"])
    floats = httpx.post(
        f"{emb.url}/v1/embeddings",
        json={"model": "org/embedder", "input": ["alpha", "beta"], "encoding_format": "float"},
    ).json()
    assert [d.index for d in decoded.data] == [0, 1]
    for got, want in zip(decoded.data, floats["data"], strict=True):
        assert len(got.embedding) == 24
        assert math.isclose(sum(v * v for v in got.embedding), 1.0, rel_tol=1e-5)
        pairs = zip(got.embedding, want["embedding"], strict=True)
        assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in pairs)
    assert decoded.data[0].embedding != decoded.data[1].embedding
    assert decoded.usage.prompt_tokens == 2
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="org/embedder", messages=[{"role": "user", "content": "x"}])
    assert "does not support Chat Completions API" in err.value.message


def test_sleep_and_wake(engine: EngineProc) -> None:
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": False}
    assert httpx.post(f"{engine.url}/sleep?level=1").status_code == 200
    try:
        assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": True}
        assert httpx.get(f"{engine.url}/health").status_code == 200
        with pytest.raises(openai.APIStatusError) as err:
            client(engine).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert err.value.status_code == 503
    finally:
        assert httpx.post(f"{engine.url}/wake_up").status_code == 200
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": False}


def test_sleep_needs_sleep_mode(start_engine: StartEngine) -> None:
    plain = start_engine("org/plain")
    resp = httpx.post(f"{plain.url}/sleep")
    assert resp.status_code == 400
    assert "--enable-sleep-mode" in resp.json()["error"]["message"]


def test_metrics_count_tokens_and_ttft(engine: EngineProc) -> None:
    before_gen = metric(engine, "vllm:generation_tokens_total", model_name="m")
    before_ttft = metric(engine, "vllm:time_to_first_token_seconds_count", model_name="m")
    client(engine).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "count me"}], max_tokens=3
    )
    assert metric(engine, "vllm:generation_tokens_total", model_name="m") == before_gen + 3
    assert metric(engine, "vllm:time_to_first_token_seconds_count", model_name="m") == before_ttft + 1
    assert metric(engine, "vllm:num_requests_running") == 0
    assert metric(engine, "vllm:num_requests_waiting") == 0
    assert metric(engine, "vllm:kv_cache_usage_perc") == 0
    text = httpx.get(f"{engine.url}/metrics").text
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="+Inf"}' in text


def test_client_disconnect_aborts_the_request(start_engine: StartEngine) -> None:
    slow = start_engine(
        "org/slow", env={"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "1000"}
    )
    body = {"model": "org/slow", "messages": [{"role": "user", "content": "go"}], "max_tokens": 200}
    body["stream"] = True
    with httpx.stream("POST", f"{slow.url}/v1/chat/completions", json=body) as resp:
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
        assert metric(slow, "vllm:num_requests_running") == 1
        assert metric(slow, "vllm:kv_cache_usage_perc") > 0
    deadline = time.monotonic() + 5
    while metric(slow, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(slow, "vllm:num_requests_running") == 0
    assert metric(slow, "vllm:request_success_total", finished_reason="abort") == 1
    assert metric(slow, "vllm:generation_tokens_total") < 200


def test_max_num_seqs_queues_requests(start_engine: StartEngine) -> None:
    eng = start_engine(
        "org/q",
        "--max-num-seqs",
        "1",
        env={"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "1000"},
    )
    body = {"model": "org/q", "messages": [{"role": "user", "content": "go"}], "max_tokens": 40}
    body["stream"] = True
    with (
        httpx.stream("POST", f"{eng.url}/v1/chat/completions", json=body) as first,
        httpx.Client(timeout=10) as other,
    ):
        lines = first.iter_lines()  # keep it referenced: closing the iterator drops the connection
        next(lines)
        with other.stream("POST", f"{eng.url}/v1/chat/completions", json=body):
            deadline = time.monotonic() + 5
            while metric(eng, "vllm:num_requests_waiting") != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert metric(eng, "vllm:num_requests_waiting") == 1
            assert metric(eng, "vllm:num_requests_running") == 1


def test_health_is_503_until_loaded(start_engine: StartEngine) -> None:
    eng = start_engine("org/slowload", env={"SPARKRUN_ENGINE_LOAD_SECONDS": "1.5"}, wait=False)
    eng.wait_listening()
    assert eng.health() == 503
    resp = httpx.post(
        f"{eng.url}/v1/chat/completions",
        json={"model": "org/slowload", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 503
    eng.wait_healthy()


def test_unknown_arguments_are_logged(engine: EngineProc) -> None:
    assert "ignoring unsupported vllm serve argument(s): --some-future-flag 7" in engine.log()


def test_bad_knob_exits_2(start_engine: StartEngine) -> None:
    eng = start_engine("org/x", env={"SPARKRUN_ENGINE_TTFT_SECONDS": "soon"}, wait=False)
    assert eng.wait_exit() == 2
    assert "SPARKRUN_ENGINE_TTFT_SECONDS" in eng.log()
