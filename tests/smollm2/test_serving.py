"""``voltbus inference`` on SmolLM2: its BPE tokenizer and ChatML template for chat and completions, ``n``,
batching, streaming, token ids that decode to the text, and logprobs the learner recomputes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from voltbus.model import sequence_logprobs
from voltbus.services.inference.responses import TokenText

from .conftest import MODEL

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion

TOLERANCE = 1e-4
"""fp32, 30 layers, batched and left-padded: measured differences are about 1e-5."""
EOS = 2
"""``<|im_end|>``: ends an assistant turn."""
QUESTION = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]


def post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/{path}", json={"model": MODEL, "return_token_ids": True, **body}, timeout=600)
    assert answer.status_code == 200, answer.text
    return answer.json()


def assert_agrees(model: Any, prompt: list[int], ids: list[int], logprobs: list[float]) -> None:
    expected = sequence_logprobs(model, prompt, ids)
    assert len(logprobs) == len(expected) == len(ids) > 0
    assert max(abs(a - b) for a, b in zip(logprobs, expected, strict=True)) <= TOLERANCE


def test_chat_uses_the_chatml_template_and_returns_what_it_sampled(smollm2_server: str, smollm2: Any) -> None:
    model, tok = smollm2
    body = post(smollm2_server, "chat/completions", {"messages": QUESTION, "n": 3, "max_tokens": 24, "logprobs": True})
    expected = tok.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    assert body["prompt_token_ids"] == tok(expected, add_special_tokens=False).input_ids
    assert tok.decode(body["prompt_token_ids"]).endswith("<|im_start|>assistant\n")
    assert len(body["choices"]) == 3
    for choice in body["choices"]:
        ids = choice["token_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == choice["message"]["content"]
        assert (ids[-1] == EOS) == (choice["finish_reason"] == "stop")  # the turn's end is sampled, and recorded
        assert EOS not in ids[:-1]
        content = choice["logprobs"]["content"]
        assert_agrees(model, body["prompt_token_ids"], ids, [entry["logprob"] for entry in content])
        assert bytes(b for entry in content for b in entry["bytes"]).decode() == tok.decode(ids)
    greedy = post(smollm2_server, "chat/completions", {"messages": QUESTION, "temperature": 0, "max_tokens": 24})
    assert "4" in greedy["choices"][0]["message"]["content"]


def test_completions_batch_prompts_of_different_lengths(smollm2_server: str, smollm2: Any) -> None:
    model, tok = smollm2
    prompts = ["The capital of France is", "Once upon a time, in a small village by the sea, there lived a"]
    body = post(smollm2_server, "completions", {"prompt": prompts, "n": 2, "max_tokens": 16, "logprobs": 2})
    assert len(body["choices"]) == 4
    for i, choice in enumerate(body["choices"]):
        assert choice["prompt_token_ids"] == tok(prompts[i // 2]).input_ids
        assert tok.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
        logprobs = choice["logprobs"]
        assert len(logprobs["top_logprobs"]) == len(choice["token_ids"])
        assert "".join(logprobs["tokens"]) == tok.decode(choice["token_ids"])
        assert_agrees(model, choice["prompt_token_ids"], choice["token_ids"], logprobs["token_logprobs"])
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


def test_a_streamed_reply_is_the_same_tokens_and_text(smollm2_server: str, smollm2: Any) -> None:
    _, tok = smollm2
    messages = [{"role": "user", "content": "Write one sentence about the sea, with an emoji."}]
    request = {"model": MODEL, "messages": messages, "max_tokens": 32, "seed": 7, "return_token_ids": True}
    text, ids = "", []
    url = f"{smollm2_server}/v1/chat/completions"
    with httpx.stream("POST", url, json=request | {"stream": True}, timeout=600) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line.removeprefix("data: "))
                for choice in chunk["choices"]:
                    text += choice["delta"].get("content", "")
                    ids += choice.get("token_ids", [])
    assert tok.decode(ids, skip_special_tokens=True) == text and text
    whole = post(smollm2_server, "chat/completions", {k: v for k, v in request.items() if k != "model"})
    assert whole["choices"][0]["token_ids"] == ids  # the same seed samples the same tokens


def test_the_openai_client_holds_a_multi_turn_chat(smollm2_server: str, smollm2_dir: Path) -> None:
    client = openai.OpenAI(base_url=f"{smollm2_server}/v1", api_key="x", timeout=600)
    messages: list[Any] = [{"role": "user", "content": "Hi! What is your name?"}]
    for follow_up in ("And what is 3+4?", "Thanks."):
        reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
        messages += [{"role": "assistant", "content": reply.choices[0].message.content}]
        messages += [{"role": "user", "content": follow_up}]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert len(replies) == 2 and all(replies)
    assert client.models.list().data[0].root == str(smollm2_dir)


def test_logprob_bytes_of_a_character_split_over_tokens_join_to_it(smollm2: Any) -> None:
    _, tok = smollm2
    ids = tok(" 😀", add_special_tokens=False).input_ids
    text = TokenText(tok)
    assert len(ids) == 2 and all("\ufffd" in text(i) for i in ids)  # neither token holds the whole character
    assert bytes(b for i in ids for b in text.bytes(i)) == " 😀".encode()
    assert text.bytes(EOS) == list(b"<|im_end|>")
