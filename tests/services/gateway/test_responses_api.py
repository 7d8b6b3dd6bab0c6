"""The OpenAI Responses API through the gateway, with the official openai client (and the Agents
SDK's default model): forwarded as chat with forced token ids, answered as Responses, recorded as
chat calls on the right rollout and attempt."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from typing import Any

import httpx
import msgspec
import openai
import pytest

from voltbus.services.eventlog import EventLog

from .conftest import GatewayFactory, Setup, model_calls
from .stub_llm import PROMPT_IDS, TOKENS, TOOL_IDS, TOOL_PIECES

IDS = [i for _, i, _ in TOKENS]
LOGPROBS = [p for _, _, p in TOKENS]
ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}


def base(g: Setup) -> str:
    return f"{g.url}/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/train/openai/v1"


def client(g: Setup, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base(g), api_key="x", **kw)


async def test_plain_response_is_forwarded_as_chat_and_recorded(gateway: Setup, eventlog: EventLog) -> None:
    reply = await client(gateway).responses.create(
        model="stub", input="2+40", instructions="Reply with the sum.", max_output_tokens=16, temperature=0.2
    )
    assert reply.output_text == "42" and reply.status == "completed"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (3, 2, 5)
    sent = gateway.engine.received[0]
    assert sent["messages"] == [
        {"role": "system", "content": "Reply with the sum."},
        {"role": "user", "content": "2+40"},
    ]
    assert sent["max_tokens"] == 16 and sent["temperature"] == 1.0  # a train rollout samples at 1.0
    assert sent["logprobs"] is True and sent["return_token_ids"] is True
    [call] = await model_calls(eventlog, 1)
    assert (call.rollout_id, call.attempt_id, call.status, call.mode) == (gateway.rid, gateway.aid, "ok", "train")
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    assert reply.id == f"resp_{call.call_id}"  # the answer names its recorded call
    assert msgspec.json.decode(call.request)["messages"][1] == {"role": "user", "content": "2+40"}


async def test_a_tool_call_round_trip(gateway: Setup, eventlog: EventLog) -> None:
    api = client(gateway)
    first = await api.responses.create(model="stub", input=[{"role": "user", "content": "2+40"}], tools=[ADD])
    [item] = first.output
    assert item.type == "function_call" and item.name == "add" and item.call_id == "call_1"
    assert json.loads(item.arguments) == {"a": 40, "b": 2}
    history = [
        {"role": "user", "content": "2+40"},
        *[i.model_dump(exclude_none=True) for i in first.output],
        {"type": "function_call_output", "call_id": item.call_id, "output": "42"},
    ]
    second = await api.responses.create(model="stub", input=history, tools=[ADD], tool_choice="auto")
    assert second.output_text == "42"
    sent = gateway.engine.received[1]
    assert sent["tools"] == [{"type": "function", "function": {k: v for k, v in ADD.items() if k != "type"}}]
    assert sent["tool_choice"] == "auto"
    assistant, tool = sent["messages"][1:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["function"]["name"] == "add"
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    calls = await model_calls(eventlog, 2)
    assert [c.response_ids for c in calls] == [TOOL_IDS, IDS]
    assert {(c.rollout_id, c.attempt_id) for c in calls} == {(gateway.rid, gateway.aid)}
    assert msgspec.json.decode(calls[0].response)["choices"][0]["finish_reason"] == "tool_calls"


async def test_streamed_text_in_responses_events(gateway: Setup, eventlog: EventLog) -> None:
    stream = await client(gateway).responses.create(model="stub", input="2+40", stream=True)
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["4", "2"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "42" and final.usage is not None and final.usage.output_tokens == 2
    [call] = await model_calls(eventlog, 1)
    assert call.streamed and call.status == "ok" and final.id == f"resp_{call.call_id}"
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    assert gateway.engine.received[0]["stream_options"] == {"include_usage": True}


async def test_streamed_tool_call_with_the_stream_helper(gateway: Setup, eventlog: EventLog) -> None:
    async with client(gateway).responses.stream(model="stub", input="2+40", tools=[ADD]) as stream:
        pieces = [e.delta async for e in stream if e.type == "response.function_call_arguments.delta"]
        final = await stream.get_final_response()
    assert pieces == TOOL_PIECES
    [item] = final.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"a": 40, "b": 2}
    [call] = await model_calls(eventlog, 1)
    assert call.response_ids == TOOL_IDS and call.streamed


async def test_the_agents_sdk_default_model_runs_a_tool_through_the_gateway(gateway: Setup, eventlog: EventLog) -> None:
    if importlib.util.find_spec("agents") is None:
        pytest.fail("the OpenAI Agents SDK (openai-agents) is not installed: pip install -e '.[dev,learn,examples]'")
    import agents

    agents.set_tracing_disabled(True)
    added: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append((a, b))
        return a + b

    model = agents.OpenAIResponsesModel(model="stub", openai_client=client(gateway))
    agent = agents.Agent(name="adder", instructions="Use the tool.", model=model, tools=[add])
    result = await agents.Runner.run(agent, "2+40", max_turns=3)
    assert result.final_output == "42" and added == [(40, 2)]
    calls = await model_calls(eventlog, 2)
    assert [c.response_ids for c in calls] == [TOOL_IDS, IDS] and calls[0].rollout_id == gateway.rid
    streamed = agents.Runner.run_streamed(agent, "2+40", max_turns=3)
    async for _ in streamed.stream_events():
        pass
    assert streamed.final_output == "42" and added == [(40, 2), (40, 2)]


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id", "server-side state"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0]", "text"),
        ({"input": "hi", "tools": [{"type": "web_search_preview"}]}, "tools[0].type", "function tools only"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "item_reference"),
        ({"input": "hi", "modalities": ["audio"]}, "modalities", "unsupported parameter"),
        ({"input": "hi", "tool_choice": {"type": "web_search_preview"}}, "tool_choice", "not supported"),
        ({"input": 42}, "input", "must be a list"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "must be one of"),
        ({"input": [{"type": "function_call", "name": "add"}]}, "input[0].call_id", "must be a string"),
    ],
)
async def test_what_cannot_be_translated_is_a_precise_400(
    gateway: Setup, body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client(gateway, max_retries=0).responses.create(model="stub", extra_body=body)
    error = info.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert error["param"].startswith(param) and says in error["message"]
    assert gateway.engine.received == []


async def test_malformed_bodies_and_engine_failures(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(max_body_bytes=1000)
    async with httpx.AsyncClient(base_url=base(g)) as http:
        bad = await http.post("/responses", content=b"{nope", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_json"
        assert (await http.post("/responses", json=["a"])).status_code == 400
        assert (await http.post("/responses", json={"input": "x" * 2000})).status_code == 413
        assert g.engine.received == []
        g.engine.fail_status = 503
        failed = await http.post("/responses", json={"model": "stub", "input": "2+40"})
    assert failed.status_code == 502 and failed.json()["error"]["type"] == "upstream_error"
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.rollout_id == g.rid


async def test_a_stream_the_engine_breaks_ends_in_an_error_event(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(timeout_s=0.3)
    g.engine.stream_gate = asyncio.Event()  # the engine stalls after its first chunk
    stream = await client(g, max_retries=0).responses.create(model="stub", input="2+40", stream=True)
    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:
        async for event in stream:
            seen.append(event.type)
    g.engine.stream_gate.set()
    assert seen[-1] == "response.output_text.delta" and "response.completed" not in seen
    assert "engine stream broke" in str(info.value)
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.error and call.error.type == "UpstreamTimeout"
