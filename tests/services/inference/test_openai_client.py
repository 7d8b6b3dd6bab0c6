"""The official openai client (sync and async, chat and completions, streamed and not) against the server,
and the gateway's own reader on what the server returns."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from voltbus.model import build_tokenizer
from voltbus.services.gateway.assembler import StreamAssembler
from voltbus.services.gateway.rewrite import read_response

from .conftest import MODEL

EXTRA = {"return_token_ids": True}
MESSAGES = [{"role": "user", "content": "2+3="}]
tok = build_tokenizer()


def check_completion(body: dict[str, Any], max_tokens: int) -> None:
    choice = body["choices"][0]
    assert choice["prompt_token_ids"] == tok("2+3=").input_ids
    assert 1 <= len(choice["token_ids"]) <= max_tokens
    assert tok.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
    assert body["weight_version"].startswith("local:")


def check_chat(body: dict[str, Any]) -> None:
    choice = body["choices"][0]
    prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert body["prompt_token_ids"] == tok(prompt, add_special_tokens=False).input_ids
    assert tok.decode(choice["token_ids"], skip_special_tokens=True) == choice["message"]["content"]
    assert [c["logprob"] for c in choice["logprobs"]["content"]] and len(choice["logprobs"]["content"]) == len(
        choice["token_ids"]
    )


def test_sync_completions(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none")
    out = client.completions.create(model=MODEL, prompt="2+3=", max_tokens=6, logprobs=2, extra_body=EXTRA)
    body = out.model_dump()
    check_completion(body, 6)
    assert all(len(top) >= 2 for top in body["choices"][0]["logprobs"]["top_logprobs"])
    sampled = read_response(body)
    assert sampled.response_ids == body["choices"][0]["token_ids"]
    assert sampled.prompt_ids == body["choices"][0]["prompt_token_ids"]
    assert sampled.logprobs == body["choices"][0]["logprobs"]["token_logprobs"]
    assert sampled.resources_id == body["weight_version"]
    assert sampled.usage["completion_tokens"] == len(sampled.response_ids)


def test_sync_chat(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none")
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, logprobs=True, top_logprobs=3, extra_body=EXTRA
    )
    body = raw.parse().model_dump()
    assert raw.headers["x-voltbus-weight-version"] == body["weight_version"]
    check_chat(body)
    assert all(len(c["top_logprobs"]) == 3 for c in body["choices"][0]["logprobs"]["content"])
    sampled = read_response(body)
    assert sampled.prompt_ids == body["prompt_token_ids"]
    assert sampled.response_ids == body["choices"][0]["token_ids"]
    assert sampled.logprobs == [c["logprob"] for c in body["choices"][0]["logprobs"]["content"]]
    assert sampled.finish_reason in ("stop", "length") and sampled.resources_id == body["weight_version"]


@pytest.mark.parametrize("kind", ["chat", "completions"])
async def test_async_streaming_assembles_to_the_same_call(server: str, kind: str) -> None:
    """Streamed chunks (token ids per delta, prompt ids once) assemble, in the gateway's assembler,
    to what a non-streamed greedy call returns."""
    client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="none")
    common: dict[str, Any] = {"model": MODEL, "max_tokens": 12, "temperature": 0, "extra_body": EXTRA}
    if kind == "chat":
        common |= {"messages": MESSAGES, "logprobs": True}
        whole = (await client.chat.completions.create(**common)).model_dump()
        stream = await client.chat.completions.create(**common, stream=True, stream_options={"include_usage": True})
    else:
        common |= {"prompt": "2+3=", "logprobs": 0}
        whole = (await client.completions.create(**common)).model_dump()
        stream = await client.completions.create(**common, stream=True, stream_options={"include_usage": True})
    assembler = StreamAssembler(kind)  # type: ignore[arg-type]
    chunks = 0
    async for chunk in stream:
        chunks += 1
        assembler.feed(f"data: {chunk.model_dump_json()}\n\n".encode())
    assert chunks >= 3
    streamed, expected = read_response(assembler.response()), read_response(whole)
    assert streamed.prompt_ids == expected.prompt_ids and streamed.response_ids == expected.response_ids
    assert streamed.logprobs == pytest.approx(expected.logprobs, abs=1e-5)
    assert streamed.finish_reason == expected.finish_reason
    assert streamed.usage == expected.usage and streamed.resources_id == expected.resources_id
    text = assembler.response()["choices"][0]["message" if kind == "chat" else "text"]
    text = text["content"] if kind == "chat" else text
    assert text == (whole["choices"][0]["message"]["content"] if kind == "chat" else whole["choices"][0]["text"])


async def test_async_non_streamed_and_models(server: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="none")
    assert [m.id for m in (await client.models.list()).data] == [MODEL]
    out = await client.completions.create(model=MODEL, prompt="2+3=", max_tokens=4, logprobs=0, extra_body=EXTRA)
    check_completion(out.model_dump(), 4)
    chat = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, logprobs=True, extra_body=EXTRA
    )
    check_chat(chat.model_dump())


def test_sync_stream_text_matches_token_ids(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none")
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=10, n=2, stream=True, extra_body=EXTRA
    )
    text, ids = {0: "", 1: ""}, {0: [], 1: []}
    finished = {}
    for chunk in stream:
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            ids[choice.index] += (choice.model_extra or {}).get("token_ids") or []
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert set(finished) == {0, 1}
    for i in (0, 1):
        assert text[i] == tok.decode(ids[i], skip_special_tokens=True)
