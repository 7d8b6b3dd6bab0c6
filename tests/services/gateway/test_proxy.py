"""Model calls through the gateway with the official openai client: proxied, rewritten, recorded."""

from __future__ import annotations

import asyncio

import httpx
import msgspec
import openai
import pytest

from voltbus.services.eventlog import EventLog

from .conftest import GatewayFactory, Setup, model_calls
from .stub_llm import PROMPT_IDS, TOKENS

IDS = [i for _, i, _ in TOKENS]
LOGPROBS = [p for _, _, p in TOKENS]
MESSAGES = [{"role": "user", "content": "2+40"}]


def al1_base(g: Setup, mode: str = "train") -> str:
    return f"{g.url}/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/{mode}/openai/v1"


async def test_async_chat_is_proxied_rewritten_and_recorded(gateway: Setup, eventlog: EventLog) -> None:
    client = openai.AsyncOpenAI(base_url=al1_base(gateway), api_key="x")
    reply = await client.chat.completions.create(model="stub", messages=MESSAGES, temperature=0.3)
    assert reply.choices[0].message.content == "42"
    sent = gateway.engine.received[0]
    assert sent["logprobs"] is True and sent["return_token_ids"] is True
    assert sent["temperature"] == 1.0  # a train rollout samples at 1.0 (the learner's distribution)
    [call] = await model_calls(eventlog, 1)
    assert (call.rollout_id, call.attempt_id, call.status) == (gateway.rid, gateway.aid, "ok")
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    assert call.usage.total_tokens == 5 and call.finish_reason == "stop" and call.http_status == 200
    assert call.rewritten == ["temperature", "logprobs", "return_token_ids"] and not call.streamed
    assert call.mode == "train" and call.choices == []
    assert msgspec.json.decode(call.request)["messages"] == MESSAGES


async def test_sync_client_on_the_al03_route(gateway: Setup, eventlog: EventLog) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/rollout/{gateway.rid}/attempt/{gateway.aid}/v1", api_key="x")
    reply = await asyncio.to_thread(client.chat.completions.create, model="stub", messages=MESSAGES)
    assert reply.choices[0].message.content == "42"
    [call] = await model_calls(eventlog, 1)
    assert call.response_ids == IDS and call.rollout_id == gateway.rid


async def test_completions_and_models(gateway: Setup, eventlog: EventLog) -> None:
    client = openai.AsyncOpenAI(base_url=al1_base(gateway, "val"), api_key="x")
    reply = await client.completions.create(model="stub", prompt="2+40=")
    assert reply.choices[0].text == "42"
    assert gateway.engine.received[0]["logprobs"] == 0
    [call] = await model_calls(eventlog, 1)
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    models = await openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="x").models.list()
    assert [m.id for m in models.data] == ["stub"]


async def test_header_attribution_and_unattributed_calls(gateway: Setup, eventlog: EventLog) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="x")
    await client.chat.completions.create(
        model="stub", messages=MESSAGES, extra_headers={"X-Voltbus-Rollout-Id": gateway.rid}
    )
    await client.chat.completions.create(model="stub", messages=MESSAGES)
    first, second = await model_calls(eventlog, 2)
    assert (first.rollout_id, first.attempt_id) == (gateway.rid, gateway.aid)
    assert (second.rollout_id, second.attempt_id) == ("unattributed", "unattributed")


@pytest.mark.parametrize("sync", [False, True])
async def test_streaming_passes_chunks_and_records_the_whole_call(
    gateway: Setup, eventlog: EventLog, sync: bool
) -> None:
    if sync:
        client = openai.OpenAI(base_url=al1_base(gateway), api_key="x")

        def consume() -> list[str]:
            stream = client.chat.completions.create(model="stub", messages=MESSAGES, stream=True)
            return [c.choices[0].delta.content or "" for c in stream if c.choices]

        pieces = await asyncio.to_thread(consume)
    else:
        aclient = openai.AsyncOpenAI(base_url=al1_base(gateway), api_key="x")
        stream = await aclient.chat.completions.create(model="stub", messages=MESSAGES, stream=True)
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert pieces == ["4", "2"]
    [call] = await model_calls(eventlog, 1)
    assert call.streamed and call.status == "ok" and call.finish_reason == "stop"
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)
    assert msgspec.json.decode(call.response)["choices"][0]["message"]["content"] == "42"


async def test_streamed_completions_are_assembled(gateway: Setup, eventlog: EventLog) -> None:
    client = openai.AsyncOpenAI(base_url=al1_base(gateway), api_key="x")
    stream = await client.completions.create(model="stub", prompt="2+40=", stream=True)
    assert "".join([c.choices[0].text async for c in stream]) == "42"
    [call] = await model_calls(eventlog, 1)
    assert (call.prompt_ids, call.response_ids, call.logprobs) == (PROMPT_IDS, IDS, LOGPROBS)


async def test_unknown_rollout_or_attempt_is_404_and_nothing_is_proxied(gateway: Setup) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        for path in (
            "/proxy/rollout/nope/attempt/0/mode/train/openai/v1/chat/completions",
            f"/rollout/{gateway.rid}/attempt/nope/v1/chat/completions",
        ):
            resp = await http.post(path, json={"model": "stub", "messages": MESSAGES})
            assert resp.status_code == 404 and "unknown" in resp.json()["error"]["type"]
        resp = await http.post(f"{al1_base(gateway, 'test')}/chat/completions", json={"messages": MESSAGES})
        assert resp.status_code == 404 and "mode" in resp.json()["error"]["message"]
    assert gateway.engine.received == []


async def test_malformed_and_oversized_bodies(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(max_body_bytes=1000)
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        bad = await http.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_json"
        listed = await http.post("/chat/completions", json=[1, 2])
        assert listed.status_code == 400
        big = await http.post("/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2000}]})
        assert big.status_code == 413
    assert g.engine.received == []


async def test_engine_503_is_a_502_and_an_error_event(gateway: Setup, eventlog: EventLog) -> None:
    gateway.engine.fail_status = 503
    client = openai.AsyncOpenAI(base_url=al1_base(gateway), api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        await client.chat.completions.create(model="stub", messages=MESSAGES)
    assert info.value.status_code == 502 and "503" in str(info.value)
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.http_status == 503 and call.error and call.error.type == "UpstreamError"


async def test_retries_are_counted(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(retries=2, retry_backoff_s=0.01)
    g.engine.fail_status = 503
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        resp = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES})
    assert resp.status_code == 502 and len(g.engine.received) == 3
    [call] = await model_calls(eventlog, 1)
    assert call.retries == 2


async def test_engine_down_is_a_502_and_an_error_event(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    from .stub_llm import free_port

    g = await make_gateway(upstream=f"http://127.0.0.1:{free_port()}/v1")
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        resp = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES})
        streamed = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES, "stream": True})
    assert resp.status_code == 502 and resp.json()["error"]["type"] == "upstream_unreachable"
    assert streamed.status_code == 502
    calls = await model_calls(eventlog, 2)
    assert [c.status for c in calls] == ["error", "error"] and calls[0].http_status is None


async def test_engine_timeout_is_a_504(make_gateway: GatewayFactory, eventlog: EventLog) -> None:
    g = await make_gateway(timeout_s=0.2)
    g.engine.hold = asyncio.Event()
    async with httpx.AsyncClient(base_url=al1_base(g)) as http:
        resp = await http.post("/chat/completions", json={"model": "stub", "messages": MESSAGES})
    g.engine.hold.set()
    assert resp.status_code == 504
    [call] = await model_calls(eventlog, 1)
    assert call.status == "error" and call.error and call.error.type == "UpstreamTimeout"
