"""Attacks on the gateway's Responses and Anthropic Messages routes: the same keys, revocation and
limits as chat, each refusal in the API's own shape, and no input that makes the gateway fail (500)."""

from __future__ import annotations

import httpx
import pytest

from tests.security.test_gateway_security import refused_once_ended
from tests.services.gateway import conftest as gateway_fixtures
from tests.services.gateway.conftest import GatewayFactory, model_calls
from voltbus.services.eventlog import EventLog
from voltbus.services.keys import rollout_key
from voltbus.store import Store

make_gateway, store = gateway_fixtures.make_gateway, gateway_fixtures.store  # the gateway tests' fixtures
SECRET = "rollout-key-secret"
RESPONSES = {"model": "stub", "input": "2+40"}
MESSAGES = {"model": "stub", "max_tokens": 8, "messages": [{"role": "user", "content": "2+40"}]}
BODIES = {"responses": RESPONSES, "messages": MESSAGES}


def path(rid: str, aid: str, api: str) -> str:
    return f"/proxy/rollout/{rid}/attempt/{aid}/mode/train/openai/v1/{api}"


def error_type(api: str, answer: httpx.Response) -> str:
    """The error's type in the API's own shape (Anthropic's ``{"type": "error", "error": {...}}``)."""
    body = answer.json()
    if api == "messages":
        assert body["type"] == "error"
    return body["error"]["type"]


@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_a_rollout_key_speaks_only_for_its_own_rollout(
    make_gateway: GatewayFactory, store: Store, eventlog: EventLog, api: str
) -> None:
    g = await make_gateway(key_secret=SECRET)
    other = await store.start_rollout({"question": "other"}, mode="train")
    own, theirs = rollout_key(SECRET, g.rid), rollout_key(SECRET, other.rollout_id)
    body = BODIES[api]
    async with httpx.AsyncClient(base_url=g.url) as http:
        none = await http.post(path(g.rid, g.aid, api), json=body)
        wrong = await http.post(path(g.rid, g.aid, api), json=body, headers={"x-api-key": theirs})
        bearer = await http.post(path(g.rid, g.aid, api), json=body, headers={"Authorization": f"Bearer {theirs}"})
        assert g.engine.received == []  # refused before the rollout was looked up or anything forwarded
        ok = await http.post(path(g.rid, g.aid, api), json=body, headers={"x-api-key": own})
    assert none.status_code == 401 and wrong.status_code == 403 and bearer.status_code == 403
    expected = ("authentication_error", "permission_error") if api == "messages" else ("unauthorized", "forbidden")
    assert (error_type(api, none), error_type(api, wrong)) == expected
    assert ok.status_code == 200 and theirs not in wrong.text
    [call] = await model_calls(eventlog, 1)
    assert call.rollout_id == g.rid and own.encode() not in bytes(call.request) + bytes(call.response)


@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_an_ended_attempts_key_is_revoked_on_these_routes_too(
    make_gateway: GatewayFactory, store: Store, api: str
) -> None:
    g = await make_gateway(key_secret=SECRET)
    key = rollout_key(SECRET, g.rid)
    async with httpx.AsyncClient(base_url=g.url) as http:
        await store.finish_attempt(g.rid, g.aid)
        late = await refused_once_ended(http, path(g.rid, g.aid, api), BODIES[api], key)
    assert late.status_code == 403 and "revoked" in late.json()["error"]["message"]
    assert error_type(api, late) == ("permission_error" if api == "messages" else "attempt_ended")


async def test_the_message_limit_counts_the_translated_chat_messages(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(max_messages=4)
    results = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "1"} for n in range(5)]
    body = {**MESSAGES, "messages": [{"role": "user", "content": results}]}  # one message, five chat messages
    items = [{"type": "function_call_output", "call_id": f"t{n}", "output": "1"} for n in range(5)]
    async with httpx.AsyncClient(base_url=g.url) as http:
        anthropic = await http.post(path(g.rid, g.aid, "messages"), json=body)
        responses = await http.post(path(g.rid, g.aid, "responses"), json={**RESPONSES, "input": items})
    assert anthropic.status_code == 400 and anthropic.json()["error"]["code"] == "limit_exceeded"
    assert responses.status_code == 400 and responses.json()["error"]["type"] == "limit_exceeded"
    assert g.engine.received == []


@pytest.mark.parametrize("api", ["chat/completions", "responses", "messages"])
async def test_deeply_nested_json_is_a_400_not_a_500(make_gateway: GatewayFactory, api: str) -> None:
    g = await make_gateway()
    deep = b"[" * 50_000 + b"]" * 50_000
    async with httpx.AsyncClient(base_url=g.url) as http:
        answer = await http.post(
            path(g.rid, g.aid, api), content=b'{"input": ' + deep + b"}", headers={"content-type": "application/json"}
        )
    assert answer.status_code == 400 and "nested" in answer.json()["error"]["message"]
    assert g.engine.received == []


async def test_a_tool_input_at_any_depth_is_forwarded_or_refused_never_a_500(make_gateway: GatewayFactory) -> None:
    g = await make_gateway()
    statuses = {}
    async with httpx.AsyncClient(base_url=g.url) as http:
        for depth in (100, 440, 460, 480, 500, 2000):  # around the depth where decoding or re-encoding gives up
            nested = '{"a": [' * depth + "{}" + "]}" * depth
            use = f'{{"type": "tool_use", "id": "t1", "name": "add", "input": {nested}}}'
            body = f'{{"model": "stub", "max_tokens": 8, "messages": [{{"role": "assistant", "content": [{use}]}}]}}'
            answer = await http.post(
                path(g.rid, g.aid, "messages"), content=body.encode(), headers={"content-type": "application/json"}
            )
            statuses[depth] = answer.status_code
            assert answer.status_code == 200 or "nested too deeply" in answer.json()["error"]["message"]
    assert statuses[100] == 200 and statuses[2000] == 400 and set(statuses.values()) <= {200, 400}


async def test_what_is_echoed_in_a_refusal_is_bounded(make_gateway: GatewayFactory) -> None:
    g = await make_gateway()
    huge = "x" * 100_000
    async with httpx.AsyncClient(base_url=g.url) as http:
        tools = await http.post(path(g.rid, g.aid, "responses"), json={**RESPONSES, "tools": [{"type": huge}]})
        block = {"role": "user", "content": [{"type": huge}]}
        content = await http.post(path(g.rid, g.aid, "messages"), json={**MESSAGES, "messages": [block]})
        unknown = await http.post(path(g.rid, g.aid, "messages"), json={**MESSAGES, huge: 1})
    for answer in (tools, content, unknown):
        assert answer.status_code == 400 and len(answer.content) < 2_000
