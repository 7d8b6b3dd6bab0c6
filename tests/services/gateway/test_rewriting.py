"""Per-mode request rewriting, multi-choice recording and streamed tool calls, through a real gateway."""

from __future__ import annotations

import msgspec
import openai

from voltbus.services.eventlog import EventLog

from .conftest import GatewayFactory, model_calls
from .stub_llm import TOKENS, TOOL_PIECES

IDS = [i for _, i, _ in TOKENS]
MESSAGES = [{"role": "user", "content": "2+40"}]


def al1(url: str, rid: str, aid: str, mode: str) -> str:
    return f"{url}/proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai/v1"


async def test_served_model_name_and_val_mode_keeps_the_agents_temperature(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(model_name="tiny-policy")
    client = openai.AsyncOpenAI(base_url=al1(g.url, g.rid, g.aid, "val"), api_key="x")
    await client.chat.completions.create(model="auto", messages=MESSAGES, temperature=0.0, top_p=0.5)
    sent = g.engine.received[0]
    assert (sent["model"], sent["temperature"], sent["top_p"]) == ("tiny-policy", 0.0, 0.5)
    [call] = await model_calls(eventlog, 1)
    assert call.rewritten == ["model", "logprobs", "return_token_ids"] and call.mode == "val"
    assert msgspec.json.decode(call.request)["model"] == "tiny-policy"


async def test_val_temperature_is_forced_when_configured(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(val_temperature=0.7, train_temperature=None)
    for mode in ("val", "train"):
        client = openai.AsyncOpenAI(base_url=al1(g.url, g.rid, g.aid, mode), api_key="x")
        await client.chat.completions.create(model="stub", messages=MESSAGES, temperature=0.2)
    assert [body["temperature"] for body in g.engine.received] == [0.7, 0.2]
    calls = await model_calls(eventlog, 2)
    assert [("temperature" in c.rewritten, c.mode) for c in calls] == [(True, "val"), (False, "train")]


async def test_header_attribution_uses_the_rollouts_mode_and_unattributed_calls_are_not_rewritten(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(model_name="tiny-policy")
    client = openai.AsyncOpenAI(base_url=f"{g.url}/v1", api_key="x")
    headers = {"X-Voltbus-Rollout-Id": g.rid}
    await client.chat.completions.create(model="auto", messages=MESSAGES, temperature=0.3, extra_headers=headers)
    await client.chat.completions.create(model="auto", messages=MESSAGES, temperature=0.3)
    attributed, unattributed = g.engine.received
    assert (attributed["model"], attributed["temperature"]) == ("tiny-policy", 1.0)  # the rollout is a train one
    assert (unattributed["model"], unattributed["temperature"]) == ("auto", 0.3)
    calls = await model_calls(eventlog, 2)
    assert [(c.rollout_id, c.mode) for c in calls] == [(g.rid, "train"), ("unattributed", None)]


async def test_every_choice_of_a_multi_choice_call_is_recorded(make_gateway: GatewayFactory, eventlog: EventLog):
    g = await make_gateway()
    client = openai.AsyncOpenAI(base_url=al1(g.url, g.rid, g.aid, "train"), api_key="x")
    reply = await client.chat.completions.create(model="stub", messages=MESSAGES, n=3)
    assert len(reply.choices) == 3
    [call] = await model_calls(eventlog, 1)
    assert [c.index for c in call.choices] == [0, 1, 2]
    assert [c.response_ids for c in call.choices] == [[i + k for i in IDS] for k in range(3)]
    assert (call.choices[0].response_ids, call.choices[0].logprobs) == (call.response_ids, call.logprobs)
    assert all(c.finish_reason == "stop" and len(c.logprobs) == len(IDS) for c in call.choices)


async def test_streamed_tool_call_deltas_are_recorded_as_one_tool_call(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway()
    client = openai.AsyncOpenAI(base_url=al1(g.url, g.rid, g.aid, "train"), api_key="x")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    stream = await client.chat.completions.create(model="stub", messages=MESSAGES, tools=tools, stream=True)
    deltas = [c.choices[0].delta.tool_calls async for c in stream]
    pieces = [d[0].function.arguments for d in deltas if d]
    assert "".join(p or "" for p in pieces) == "".join(TOOL_PIECES)
    [call] = await model_calls(eventlog, 1)
    [choice] = msgspec.json.decode(call.response)["choices"]
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "".join(TOOL_PIECES)}}
    ]
    assert call.finish_reason == "tool_calls" and call.response_ids == [60, 61, 62] and call.streamed
