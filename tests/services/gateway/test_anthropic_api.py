"""The Anthropic Messages API through the gateway, with the official anthropic client: forwarded as
chat with forced token ids, answered in Anthropic's shape (events and errors too), recorded as chat
calls on the right rollout and attempt."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import msgspec
import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.keys import rollout_key

from .conftest import GatewayFactory, Setup, model_calls
from .stub_llm import PROMPT_IDS, TOKENS, TOOL_IDS, TOOL_PIECES

IDS = [i for _, i, _ in TOKENS]
LOGPROBS = [p for _, _, p in TOKENS]
ADD = {
    "name": "add",
    "description": "Add two numbers.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}
ASK = [{"role": "user", "content": "2+40"}]


def base(g: Setup) -> str:
    """The Anthropic base URL: the SDK adds ``/v1/messages``."""
    return f"{g.url}/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/train/openai"


def client(g: Setup, key: str = "x", **kw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base(g), api_key=key, **kw)


async def test_plain_message_is_forwarded_as_chat_and_recorded(gateway: Setup, eventlog: EventLog) -> None:
    reply = await client(gateway).messages.create(
        model="stub",
        max_tokens=16,
        system="Reply with the sum.",
        messages=ASK,
        stop_sequences=["\n\n"],
        extra_body={"top_k": 5},
    )
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == "42"
    assert reply.stop_reason == "end_turn" and reply.role == "assistant"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 2)
    sent = gateway.engine.received[0]
    assert sent["messages"] == [{"role": "system", "content": "Reply with the sum."}, *ASK]
    assert (sent["max_tokens"], sent["stop"], sent["top_k"]) == (16, ["\n\n"], 5)
    assert sent["logprobs"] is True and sent["return_token_ids"] is True and sent["temperature"] == 1.0
    [call] = await model_calls(eventlog, 1)
    assert (call.rollout_id, call.attempt_id, call.status, call.mode) == (gateway.rid, gateway.aid, "ok", "train")
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    assert reply.id == f"msg_{call.call_id}"


async def test_a_tool_use_round_trip(gateway: Setup, eventlog: EventLog) -> None:
    api = client(gateway)
    first = await api.messages.create(model="stub", max_tokens=32, messages=ASK, tools=[ADD])
    [use] = first.content
    assert use.type == "tool_use" and use.name == "add" and use.input == {"a": 40, "b": 2}
    assert first.stop_reason == "tool_use"
    history = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42"}]},
    ]
    second = await api.messages.create(
        model="stub", max_tokens=32, messages=history, tools=[ADD], tool_choice={"type": "auto"}
    )
    assert second.content[0].text == "42" and second.stop_reason == "end_turn"
    sent = gateway.engine.received[1]
    function = {"name": "add", "parameters": ADD["input_schema"], "description": ADD["description"]}
    assert sent["tools"] == [{"type": "function", "function": function}] and sent["tool_choice"] == "auto"
    assistant, tool = sent["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == use.id and assistant["tool_calls"][0]["function"]["name"] == "add"
    assert tool == {"role": "tool", "tool_call_id": use.id, "content": "42"}
    calls = await model_calls(eventlog, 2)
    assert [c.response_ids for c in calls] == [TOOL_IDS, IDS]
    assert {(c.rollout_id, c.attempt_id) for c in calls} == {(gateway.rid, gateway.aid)}


async def test_streamed_text_with_the_stream_helper(gateway: Setup, eventlog: EventLog) -> None:
    async with client(gateway).messages.stream(model="stub", max_tokens=16, messages=ASK) as stream:
        pieces = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()
    assert pieces == ["4", "2"] and final.content[0].text == "42" and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 2)
    [call] = await model_calls(eventlog, 1)
    assert call.streamed and call.status == "ok" and final.id == f"msg_{call.call_id}"
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)


async def test_streamed_tool_use_events(gateway: Setup, eventlog: EventLog) -> None:
    stream = await client(gateway).messages.create(model="stub", max_tokens=32, messages=ASK, tools=[ADD], stream=True)
    events = [e async for e in stream]
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * len(TOOL_PIECES),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1].content_block.type == "tool_use" and events[1].content_block.name == "add"
    assert [e.delta.partial_json for e in events[2:-3]] == TOOL_PIECES
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens == len(TOOL_IDS)
    [call] = await model_calls(eventlog, 1)
    assert call.response_ids == TOOL_IDS and call.streamed
    assert msgspec.json.decode(call.response)["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"


async def test_the_rollout_key_goes_in_x_api_key(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(key_secret="secret")
    reply = await client(g, rollout_key("secret", g.rid)).messages.create(model="stub", max_tokens=8, messages=ASK)
    assert reply.content[0].text == "42"
    with pytest.raises(anthropic.AuthenticationError) as info:
        await client(g, "wrong", max_retries=0).messages.create(model="stub", max_tokens=8, messages=ASK)
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    [call] = await model_calls(eventlog, 1)
    assert call.rollout_id == g.rid


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "'image' is not supported"),
        ({"messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "client tools"),
        ({"messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ({"messages": ASK, "mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "mcp_servers"),
        ({"messages": [{"role": "system", "content": "hi"}]}, "role must be user or assistant"),
        ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "add"}]}]}, "string id"),
        ({"messages": ASK, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ],
)
async def test_what_cannot_be_translated_is_a_precise_400(gateway: Setup, body: dict[str, Any], says: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        await client(gateway, max_retries=0).messages.create(model="stub", max_tokens=8, messages=[], extra_body=body)
    error = info.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error" and says in error["error"]["message"]
    assert gateway.engine.received == []


async def test_malformed_bodies_pause_and_engine_failures_in_anthropics_shape(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(max_body_bytes=1000)
    async with httpx.AsyncClient(base_url=f"{base(g)}/v1") as http:
        bad = await http.post("/messages", content=b"{nope", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        assert bad.json()["type"] == "error" and bad.json()["error"]["code"] == "invalid_json"
        missing = await http.post("/messages", json={"model": "stub", "messages": ASK})
        assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
        big = await http.post(
            "/messages", json={"max_tokens": 8, "messages": [{"role": "user", "content": "x" * 2000}]}
        )
        assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
        assert g.engine.received == []
        g.engine.fail_status = 503
        failed = await http.post("/messages", json={"model": "stub", "max_tokens": 8, "messages": ASK})
        assert failed.status_code == 502 and failed.json()["error"]["type"] == "api_error"
        await http.post(f"{g.url}/admin/pause")
        paused = await http.post("/messages", json={"model": "stub", "max_tokens": 8, "messages": ASK})
    assert paused.status_code == 429 and paused.json()["error"]["type"] == "rate_limit_error"
    assert paused.headers["retry-after"] and paused.headers["x-agl-paused"]
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.rollout_id == g.rid


async def test_a_stream_the_engine_breaks_ends_in_an_error_event(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(timeout_s=0.3)
    g.engine.stream_gate = asyncio.Event()  # the engine stalls after its first chunk
    stream = await client(g, max_retries=0).messages.create(model="stub", max_tokens=8, messages=ASK, stream=True)
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        async for event in stream:
            seen.append(event.type)
    g.engine.stream_gate.set()
    assert seen == ["message_start", "content_block_start", "content_block_delta"]
    assert "engine stream broke" in str(info.value)
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.error and call.error.type == "UpstreamTimeout"
