"""The pure translations of the Responses and Anthropic Messages APIs to chat and back: the cases the
SDK tests against the stub engine do not reach (stop sequences, length, prefills, tool errors,
interleaved stream blocks, engine error chunks, error shapes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.responses import JSONResponse

from voltbus.services.gateway import anthropic_api, responses_api
from voltbus.services.gateway.errors import GatewayError


def chat_answer(content: str | None = "hi", finish: str = "stop", stop_reason: Any = None, **message: Any) -> dict:
    choice = {"index": 0, "finish_reason": finish, "stop_reason": stop_reason, "token_ids": [1, 2]}
    choice["message"] = {"role": "assistant", "content": content, **message}
    return {"model": "m", "prompt_token_ids": [7, 8, 9], "choices": [choice]}


def events(raw: bytes) -> list[tuple[str, dict]]:
    """(event name, payload) of each server-sent event."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_responses_items_become_chat_messages() -> None:
    chat = responses_api.to_chat(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "let me add"}]},
                {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "1"},
            ],
            "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
            "tool_choice": {"type": "function", "name": "add"},
            "previous_response_id": None,
            "background": False,
            "store": True,
            "include": [],
        }
    )
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert chat["messages"][1]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assistant = chat["messages"][2]
    assert assistant["content"] == "let me add" and [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object"}},
    }
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert "store" not in chat and "include" not in chat and "stream" not in chat


def test_a_response_cut_by_length_is_incomplete() -> None:
    answer = responses_api.answer({"model": "m"}, chat_answer(finish="length"), "abc")
    assert answer["status"] == "incomplete" and answer["incomplete_details"] == {"reason": "max_output_tokens"}
    assert answer["usage"]["input_tokens"] == 3 and answer["usage"]["output_tokens"] == 2
    assert answer["output"][0]["id"] == "msg_abc_0" and answer["id"] == "resp_abc"


def test_anthropic_stop_reasons() -> None:
    request = {"stop_sequences": ["END"]}
    by_sequence = anthropic_api.answer(request, chat_answer(stop_reason="END"), "x")
    assert (by_sequence["stop_reason"], by_sequence["stop_sequence"]) == ("stop_sequence", "END")
    by_eos = anthropic_api.answer(request, chat_answer(stop_reason=2), "x")
    assert (by_eos["stop_reason"], by_eos["stop_sequence"]) == ("end_turn", None)
    assert anthropic_api.answer({}, chat_answer(finish="length"), "x")["stop_reason"] == "max_tokens"
    calls = [{"id": "t1", "type": "function", "function": {"name": "add", "arguments": "not json"}}]
    tool = anthropic_api.answer({}, chat_answer(content=None, finish="tool_calls", tool_calls=calls), "x")
    assert tool["stop_reason"] == "tool_use"
    assert tool["content"] == [{"type": "tool_use", "id": "t1", "name": "add", "input": "not json"}]


def test_anthropic_messages_become_chat_messages() -> None:
    chat = anthropic_api.to_chat(
        {
            "model": "m",
            "max_tokens": 9,
            "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {}}],
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1}}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
                        {"type": "text", "text": "go on"},
                    ],
                },
                {"role": "assistant", "content": "The answer is"},
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "thinking": {"type": "disabled"},
            "metadata": {"user_id": "u"},
        }
    )
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert chat["messages"][0]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"}
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False  # a prefill


@pytest.mark.parametrize(
    "body",
    [
        {"max_tokens": 0, "messages": []},
        {"max_tokens": 8, "messages": [], "output_config": {"effort": "high"}},
        {"max_tokens": 8, "messages": [], "container": "c"},
        {"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
        {"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n"}]}]},
    ],
)
def test_anthropic_refusals(body: dict) -> None:
    with pytest.raises(GatewayError) as info:
        anthropic_api.to_chat(body)
    assert info.value.status == 400 and info.value.kind == "invalid_request_error"


def test_a_stream_that_interleaves_text_and_tools_closes_each_block_before_the_next() -> None:
    folder = anthropic_api.MessagesStream({"model": "m"}, "x")
    tool = {"index": 0, "id": "t1", "function": {"name": "add", "arguments": '{"a"'}}
    chunks = [
        {
            "model": "m",
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"content": "a"}, "token_ids": [5]}],
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [tool]}, "token_ids": [6]}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "tool_calls", "token_ids": [7]}]},
    ]
    raw = b"".join(folder.chunk(c) for c in chunks) + folder.end()
    seen = [(name, data.get("index")) for name, data in events(raw)]
    assert seen == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    delta = events(raw)[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"] == {"input_tokens": 2, "output_tokens": 3}


def test_an_engine_error_chunk_ends_the_stream_in_an_error_event() -> None:
    folder = responses_api.ResponsesStream({"model": "m"}, "x")
    started = folder.chunk({"model": "m", "choices": [{"index": 0, "delta": {"content": "a"}}]})
    failed = folder.chunk({"error": {"message": "engine died"}})
    assert [name for name, _ in events(started)][:2] == ["response.created", "response.in_progress"]
    [(name, data)] = events(failed)
    assert name == "error" and "engine died" in data["message"] and data["error"]["message"] == data["message"]
    assert folder.end() == b"" and folder.chunk({"choices": []}) == b""  # nothing after the error


def test_anthropic_errors_keep_status_headers_and_the_gateways_kind() -> None:
    refusal = JSONResponse(
        {"error": {"message": "paused", "type": "gateway_paused", "code": 429}},
        status_code=429,
        headers={"Retry-After": "2", "X-Agl-Paused": "true"},
    )
    answer = anthropic_api.error(refusal)
    body = json.loads(bytes(answer.body))
    assert answer.status_code == 429 and answer.headers["retry-after"] == "2" and answer.headers["x-agl-paused"]
    assert body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "paused", "code": "gateway_paused"},
    }
    engine = anthropic_api.error(JSONResponse({"object": "error", "message": "too long", "type": "BadRequest"}, 400))
    assert json.loads(bytes(engine.body))["error"]["message"] == "too long"
