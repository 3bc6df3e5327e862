"""Bounded reads from a hostile upstream on the translated routes (raw asyncio servers on loopback).

- one 2 MiB event dribbled in CRLF lines costs the gateway little CPU, and the stream ends well;
- what the gateway parses from an upstream (a non-streamed answer, an error body, an event) is
  capped, and whatever it holds (too deep, the wrong shape) ends the answer in the client's
  protocol instead of cutting the connection;
- one event of many choices or tool-call pieces is refused at once (it was quadratic), a
  translated event is at most 256 KiB, and what is decoded is counted first, so 1 MiB of empty
  arrays costs the event loop milliseconds (it cost 0.3 s);
- an upstream's error text reaches the client clipped to 1,024 characters.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from sparkrun_operator.gateway import GatewaySettings, messages_api, ollama_api

from .conftest import StartGateway, workload
from .rawserver import chat_completion, chunk_event, ok_head, raw_upstream, read_request

MESSAGES = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
KB = 1024
MB = 1024 * KB


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds ``thread`` (the gateway's event loop) has used so far."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def exchange(
    start_gateway: StartGateway, answer: bytes, *requests: tuple[str, dict[str, Any]]
) -> list[tuple[httpx.Response, float]]:
    """Each ``(route, body)`` POSTed to a gateway whose one upstream answers ``answer`` (whole,
    then it closes); each response with the CPU seconds the gateway's loop spent on it."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    out = []
    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        for route, body in requests:
            before = thread_cpu(gw.thread)
            response = httpx.post(f"{gw.url}{route}", json=body, timeout=60)
            out.append((response, thread_cpu(gw.thread) - before))
    return out


def sse_events(raw: bytes) -> list[tuple[str, dict[str, object]]]:
    """The ``(event, data)`` pairs of an Anthropic stream."""
    out = []
    for block in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"event" in lines:
            out.append((lines[b"event"].decode(), json.loads(lines[b"data"])))
    return out


def test_a_slow_crlf_event_costs_the_gateway_little_cpu(start_gateway: StartGateway) -> None:
    """Issue 23: a 2 MiB event in 1 KiB CRLF lines 2 ms apart cost the gateway 3.4 CPU s."""
    pad = b'"' + b"p" * (KB - 12) + b'",'
    head = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}],\r\n'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head(b"text/event-stream") + head + b'data: "pad": [\r\n')
        for _ in range(2 * KB):
            writer.write(b"data: " + pad + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b'data: "end"]}\r\n\r\n' + chunk_event(finish="stop", newline=b"\r\n"))
        writer.write(b"data: [DONE]\r\n\r\n")
        await writer.drain()

    with raw_upstream(handler) as up:
        settings = GatewaySettings(max_event_bytes=4 * MB)  # NB: the parser's cost, not its cap
        gw = start_gateway([workload("m", "m", [up.url])], settings=settings)
        before = thread_cpu(gw.thread)
        resp = httpx.post(f"{gw.url}/v1/messages", json={**MESSAGES, "stream": True}, timeout=60)
        spent = thread_cpu(gw.thread) - before
        print(f"the gateway's CPU for the stream: {spent:.3f} s")
    assert resp.status_code == 200
    events = sse_events(resp.content)
    assert [name for name, _ in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert [d["delta"] for name, d in events if name == "content_block_delta"] == [
        {"type": "text_delta", "text": "Hi"}
    ]
    assert spent < 0.4, f"the gateway used {spent:.2f} CPU s for one 2 MiB event"


@pytest.mark.parametrize("route", ["/v1/messages", "/api/chat", "/v1/chat/completions"])
def test_a_huge_non_streamed_answer_is_502_and_not_read_further(
    start_gateway: StartGateway, route: str
) -> None:
    """A translated (decoded) answer is capped at ``max_answer_bytes``, one passed through at
    ``max_upstream_body_bytes``; the rest is never read, and the backend is not ejected."""
    sent = {"bytes": 0}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok_head() + b'{"choices": [')  # ended by closing, once it is all sent
        piece = b'{"index": 0},' * (64 * KB // 13)
        while sent["bytes"] < 64 * MB:
            writer.write(piece)
            await writer.drain()
            sent["bytes"] += len(piece)

    with raw_upstream(handler) as up:
        settings = GatewaySettings(max_answer_bytes=MB, max_upstream_body_bytes=2 * MB)
        gw = start_gateway([workload("m", "m", [up.url])], settings=settings)
        body = {**MESSAGES, "stream": False}
        resp = httpx.post(f"{gw.url}{route}", json=body, timeout=30)
        time.sleep(0.5)
        backend = gw.gateway.services.connector.balancer.backend(up.url)
    assert resp.status_code == 502
    limit = 2 * MB if route.startswith("/v1/chat") else MB
    assert f"larger than {limit} bytes" in resp.text
    assert sent["bytes"] < 16 * MB  # the gateway stopped reading (TCP buffers hold the rest)
    assert backend.failures == 0


def test_a_huge_error_body_keeps_the_status_and_is_not_read_whole(start_gateway: StartGateway) -> None:
    sent = {"bytes": 0}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n")
        writer.write(b"connection: close\r\n\r\n" + b'{"error": {"message": "')
        while sent["bytes"] < 64 * MB:
            writer.write(b"e" * 64 * KB)
            await writer.drain()
            sent["bytes"] += 64 * KB

    with raw_upstream(handler) as up:
        gw = start_gateway([workload("m", "m", [up.url])])
        resp = httpx.post(f"{gw.url}/v1/messages", json=MESSAGES, timeout=30)
        time.sleep(0.5)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "Upstream answered 400"
    assert sent["bytes"] < 16 * MB


def close_head(length: int, ctype: bytes = b"text/event-stream") -> bytes:
    """A 200 head for one answer; the connection closes after it."""
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % (
        ctype,
        length,
    )


MALFORMED = {
    "deep": b"[" * 100_000 + b"]" * 100_000,  # deeper than the JSON decoder recurses
    "list": b"[1, 2, 3]",  # not an object
    "choice": b'{"choices": [7]}',  # a choice that is not an object
}


MALFORMED_EVENTS = {
    **MALFORMED,
    "delta": b'{"choices": [{"delta": 7}]}',
    "usage": b'{"choices": [], "usage": 5}',  # kept, and used only at the end of the stream
    "tool-index": b'{"choices": [{"delta": {"tool_calls": [{"index": [1], "function": {}}]}}]}',
}


@pytest.mark.parametrize("event", MALFORMED_EVENTS.values(), ids=list(MALFORMED_EVENTS))
def test_a_malformed_event_ends_the_stream_in_the_clients_protocol(
    start_gateway: StartGateway, event: bytes
) -> None:
    stream = (
        chunk_event("Hi") + b"data: " + event + b"\n\n" + chunk_event(finish="stop") + b"data: [DONE]\n\n"
    )

    body = {**MESSAGES, "stream": True}
    [(claude, _), (llama, _)] = exchange(
        start_gateway, close_head(len(stream)) + stream, ("/v1/messages", body), ("/api/chat", body)
    )
    assert claude.status_code == 200
    name, data = sse_events(claude.content)[-1]
    assert name == "error", claude.content[-300:]
    assert "Upstream sent" in str(data)
    assert llama.status_code == 200
    assert json.loads(llama.content.splitlines()[-1])["error"].startswith("Upstream sent")


@pytest.mark.parametrize("answer", MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_answer_is_502_in_the_clients_protocol(
    start_gateway: StartGateway, answer: bytes
) -> None:
    [(claude, _), (llama, _)] = exchange(
        start_gateway,
        close_head(len(answer), b"application/json") + answer,
        ("/v1/messages", MESSAGES),
        ("/api/chat", {**MESSAGES, "stream": False}),
    )
    assert claude.status_code == 502, claude.text
    assert claude.json()["error"]["message"].startswith("Upstream answered something unexpected")
    assert llama.status_code == 502, llama.text
    assert llama.json()["error"].startswith("Upstream answered something unexpected")


def tool_call_chunk(index: int, arguments: str) -> dict[str, object]:
    call = {"index": index, "id": f"c{index}", "function": {"name": "f", "arguments": arguments}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}


@pytest.mark.parametrize("translator", ["anthropic", "ollama"])
def test_streamed_tool_calls_are_bounded(translator: str) -> None:
    """At most 1024 distinct tool calls, and (Ollama, which gathers them for its last line)
    4 Mi characters of names and arguments; gathering them is linear (before: every piece copied
    all the arguments gathered so far: 14 CPU s for these 100,000 pieces)."""
    make = {
        "anthropic": lambda: messages_api.Translator(model="m", rid="r"),
        "ollama": lambda: ollama_api.Translator(model="m", mode="chat", stream=True),
    }[translator]
    t = make()
    for i in range(1024):
        t.feed(tool_call_chunk(i, "{}"))
    with pytest.raises(ValueError, match="more than 1024 tool calls"):
        t.feed(tool_call_chunk(1024, "{}"))
    if translator == "anthropic":
        return  # it holds nothing per piece: each goes out as an input_json_delta
    t = make()
    started = time.process_time()
    for _ in range(100_000):
        t.feed(tool_call_chunk(0, "x" * 40))
    spent = time.process_time() - started
    last = json.loads(t.finish().splitlines()[-2])
    assert last["message"]["tool_calls"][0]["function"]["arguments"] == {"_raw": "x" * 4_000_000}
    assert spent < 1.0, f"100,000 pieces took {spent:.2f} CPU s"
    with pytest.raises(ValueError, match="longer than 4194304 characters"):
        t.feed(tool_call_chunk(0, "y" * 200_000))


# -- one event of many pieces (issue 23 review: H1) ----------------------------------------------

TRANSLATORS = {
    "anthropic": lambda: messages_api.Translator(model="m", rid="r"),
    "ollama": lambda: ollama_api.Translator(model="m", mode="chat", stream=True),
}
PIECES = {"choices": "more than 16 choices", "tool_calls": "more than 128 tool-call deltas"}


def many_pieces(shape: str, size: int) -> dict[str, Any]:
    """A chunk of about ``size`` bytes (as JSON) made of many choices or many tool-call deltas."""
    if shape == "choices":
        choice = {"index": 0, "delta": {"content": "x"}, "finish_reason": None}
        return {"choices": [choice] * (size // len(json.dumps(choice)))}
    call = {"index": 0, "function": {"arguments": "x"}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call] * (size // len(json.dumps(call)))}}]}


@pytest.mark.parametrize("shape", list(PIECES))
@pytest.mark.parametrize("translator", list(TRANSLATORS))
def test_a_4_mib_event_of_many_pieces_is_refused_at_once(translator: str, shape: str) -> None:
    """The gateway asks for one completion: an event holds one choice, and a tool call's delta a
    few pieces. Before: every piece's output was appended to all the bytes before it (a 1 MB
    event of 40,000 choices: 22 CPU s on the Anthropic route, 19 s on Ollama)."""
    t = TRANSLATORS[translator]()
    t.feed(tool_call_chunk(0, "{") if shape == "tool_calls" else json.loads(chunk_event("Hi")[6:]))
    with pytest.raises(ValueError, match=PIECES[shape]):
        t.feed(many_pieces(shape, 16 * KB))  # a few hundred pieces
    t = TRANSLATORS[translator]()
    event = many_pieces(shape, 4 * MB)
    started = time.process_time()
    with pytest.raises(ValueError, match=PIECES[shape]):
        t.feed(event)
    spent = time.process_time() - started
    assert spent < 0.5, f"a 4 MiB event of many {shape} took {spent:.2f} CPU s"


@pytest.mark.parametrize("translator", list(TRANSLATORS))
def test_an_event_at_the_piece_bounds_is_translated(translator: str) -> None:
    """16 choices of one event, and 128 tool-call deltas, are still translated, each piece once."""
    t = TRANSLATORS[translator]()
    choice = {"index": 0, "delta": {"content": "x"}, "finish_reason": None}
    text = t.feed({"choices": [choice] * 16})
    call = {"index": 0, "id": "c0", "function": {"name": "f", "arguments": "1"}}
    calls = t.feed({"choices": [{"index": 0, "delta": {"tool_calls": [call] * 128}}]})
    if translator == "anthropic":
        assert text.count(b'"text_delta"') == 16
        assert calls.count(b'"input_json_delta"') == 128
        return
    assert text.count(b'"content":"x"') == 16
    last = json.loads(t.finish().splitlines()[-2])
    assert last["message"]["tool_calls"][0]["function"]["arguments"] == int("1" * 128)


@pytest.mark.parametrize("shape", list(PIECES))
@pytest.mark.parametrize("route", ["/v1/messages", "/api/chat"])
def test_an_event_of_many_pieces_ends_the_stream_cheaply(
    start_gateway: StartGateway, route: str, shape: str
) -> None:
    """End to end: an event (under the 256 KiB event cap) of thousands of choices or tool-call
    deltas ends the stream with the bound's error, for little of the gateway's CPU."""
    event = b"data: " + json.dumps(many_pieces(shape, 200 * KB)).encode() + b"\n\n"
    stream = chunk_event("Hi") + event + chunk_event(finish="stop") + b"data: [DONE]\n\n"
    [(resp, spent)] = exchange(
        start_gateway, close_head(len(stream)) + stream, (route, {**MESSAGES, "stream": True})
    )
    assert resp.status_code == 200
    assert stream_error(route, resp.content) == f"Upstream sent {PIECES[shape]} in one event"
    assert spent < 0.2, f"the gateway used {spent:.2f} CPU s for one 200 KiB event"


def stream_error(route: str, raw: bytes) -> str:
    """The in-band error that ends a translated stream (Anthropic ``error`` event, Ollama line)."""
    if route == "/v1/messages":
        name, data = sse_events(raw)[-1]
        assert name == "error", raw[-300:]
        return str(data["error"]["message"])  # type: ignore[index]
    return str(json.loads(raw.splitlines()[-1])["error"])


# -- what a translated route decodes, and where (issue 23 review: M1) --------------------------


@pytest.mark.parametrize("route", ["/v1/messages", "/api/chat"])
def test_an_event_over_256_kib_ends_a_translated_stream(start_gateway: StartGateway, route: str) -> None:
    """Real chat events are a few KiB: a translated stream decodes at most 256 KiB per event (a
    4 MiB event of empty lists took 0.3 s of the loop to decode, again for every event)."""
    pad = json.dumps({"choices": [{"index": 0, "delta": {"content": "Hi"}}], "pad": "p" * 300 * KB})
    stream = chunk_event("Hi") + b"data: " + pad.encode() + b"\n\n" + b"data: [DONE]\n\n"
    [(resp, _)] = exchange(
        start_gateway, close_head(len(stream)) + stream, (route, {**MESSAGES, "stream": True})
    )
    assert resp.status_code == 200
    assert stream_error(route, resp.content) == "Upstream sent an event larger than 262144 bytes"


CONTAINERS = "[]," * (MB // 3)
"""1 MiB of empty arrays: the most the JSON decoder can be made to build from a MiB (0.3 CPU s)."""


def container_answers() -> dict[str, bytes]:
    """Non-streamed answers holding 1 MiB of empty arrays: in the answer, or in a tool call's
    arguments (which both routes decode: Anthropic ``input``, Ollama ``arguments`` are objects)."""
    pad = chat_completion("Hello")[:-1] + b', "pad": [' + CONTAINERS.encode() + b"[]]}"
    call = {"id": "c0", "type": "function", "function": {"name": "f", "arguments": f"[{CONTAINERS}[]]"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    tool = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    return {"pad": pad, "arguments": json.dumps(tool).encode()}


@pytest.mark.parametrize("shape", list(container_answers()))
@pytest.mark.parametrize("route", ["/v1/messages", "/api/chat"])
def test_a_1_mib_answer_of_containers_costs_the_loop_little(
    start_gateway: StartGateway, route: str, shape: str
) -> None:
    """What an answer holds is counted before it is decoded: 64 Ki strings and 64 Ki other values
    at most (the answer: 502), and tool-call arguments over that are passed on undecoded. Before:
    the loop decoded it all (0.3 CPU s per MiB; a worker thread would not help, the decoder holds
    the GIL)."""
    answer = container_answers()[shape]
    [(resp, spent)] = exchange(
        start_gateway,
        close_head(len(answer), b"application/json") + answer,
        (route, {**MESSAGES, "stream": False}),
    )
    if shape == "pad":
        assert resp.status_code == 502, resp.text[:300]
        assert "Upstream sent JSON of more than 65536 values" in resp.text
    else:
        assert resp.status_code == 200, resp.text[:300]
        doc = resp.json()
        held = doc["content"][0]["input"] if route == "/v1/messages" else doc["message"]["tool_calls"][0]
        raw = held["_raw"] if route == "/v1/messages" else held["function"]["arguments"]["_raw"]
        assert raw == f"[{CONTAINERS}[]]"
    assert spent < 0.1, f"the loop spent {spent:.3f} CPU s on a 1 MiB answer"


def test_streamed_tool_arguments_of_containers_cost_the_loop_little(start_gateway: StartGateway) -> None:
    """Ollama gathers a streamed tool call's arguments and decodes them at the end: counted first."""
    pieces = [CONTAINERS[i : i + 30 * KB] for i in range(0, len(CONTAINERS), 30 * KB)]
    stream = b"".join(
        b"data: " + json.dumps(tool_call_chunk(0, piece)).encode() + b"\n\n"
        for piece in ["[", *pieces, "[]]"]
    )
    stream += chunk_event(finish="tool_calls") + b"data: [DONE]\n\n"
    [(resp, spent)] = exchange(
        start_gateway, close_head(len(stream)) + stream, ("/api/chat", {**MESSAGES, "stream": True})
    )
    assert resp.status_code == 200
    calls = json.loads(resp.content.splitlines()[-2])["message"]["tool_calls"]
    assert calls[0]["function"]["arguments"] == {"_raw": f"[{CONTAINERS}[]]"}
    assert spent < 0.1, f"the loop spent {spent:.3f} CPU s on 1 MiB of tool-call arguments"


# -- upstream text echoed to clients (issue 23 review: L5) ---------------------------------------

LONG = "e" * (200 * KB)


def error_answers() -> dict[str, tuple[bytes, bytes]]:
    """Ways an upstream's error text reaches the client: (status line, body)."""
    status, ok = b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 200 OK"
    event = json.dumps({"error": {"message": LONG, "code": 400}}).encode()
    return {
        "status": (status, json.dumps({"error": {"message": LONG[: 60 * KB]}}).encode()),
        "answer": (ok, json.dumps({"error": {"message": LONG}}).encode()),
        "first-event": (ok, b"data: " + event + b"\n\n"),
        "later-event": (ok, chunk_event("Hi") + b"data: " + event + b"\n\n"),
    }


@pytest.mark.parametrize("way", list(error_answers()))
@pytest.mark.parametrize("route", ["/v1/messages", "/api/chat"])
def test_upstream_error_text_is_clipped_to_1_kib(start_gateway: StartGateway, route: str, way: str) -> None:
    head, body = error_answers()[way]
    stream = way.endswith("event")
    ctype = b"text/event-stream" if stream else b"application/json"
    answer = head + b"\r\ncontent-type: " + ctype + b"\r\nconnection: close\r\n\r\n" + body
    [(resp, _)] = exchange(start_gateway, answer, (route, {**MESSAGES, "stream": stream}))
    if way == "later-event":
        assert resp.status_code == 200
        message = stream_error(route, resp.content)
    else:
        assert resp.status_code == {"status": 400, "answer": 502, "first-event": 400}[way], resp.text[:300]
        doc = resp.json()
        message = doc["error"] if route == "/api/chat" else doc["error"]["message"]
    assert (len(message), message[-1]) == (1025, "…"), f"{len(message)} characters: {message[-40:]!r}"
    assert message.startswith("e" * 1024)
