"""Logprob agreement with the learner's recomputation (also across batched, left-padded requests), n samples,
greedy determinism, seeds, stop strings and finish reasons."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import torch

from voltbus.model import build_tokenizer, sequence_logprobs

from .conftest import MODEL, stats

tok = build_tokenizer()
TOLERANCE = 1e-5


def complete(url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "return_token_ids": True, **body}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def assert_agrees(model: Any, choice: dict[str, Any]) -> None:
    """The returned logprobs equal the recomputed ones for the same prompt and response ids."""
    expected = sequence_logprobs(model, choice["prompt_token_ids"], choice["token_ids"])
    got = choice["logprobs"]["token_logprobs"]
    assert len(got) == len(expected) == len(choice["token_ids"]) > 0
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) <= TOLERANCE


def test_logprobs_agree_for_prompts_of_different_lengths_in_one_batch(server: str, reference: dict) -> None:
    prompts = ["1+2=", "a much longer prompt, padded on the left of the short ones: 7+8=", [1, 50, 60]]
    body = complete(server, prompt=prompts, n=3, max_tokens=24, logprobs=0)
    assert len(body["choices"]) == 9
    for i, choice in enumerate(body["choices"]):
        expected_prompt = prompts[i // 3] if isinstance(prompts[i // 3], list) else tok(prompts[i // 3]).input_ids
        assert choice["prompt_token_ids"] == expected_prompt
        assert choice["index"] == i
        assert_agrees(reference[0], choice)
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


async def test_logprobs_agree_for_concurrent_requests_batched_together(make_server, reference: dict) -> None:
    url = make_server(batch_quiet_ms=200, batch_max_wait_ms=3000)
    prompts = [f"{'x' * k}{k}+{k}=" for k in range(0, 40, 5)]
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        body = {"model": MODEL, "return_token_ids": True, "logprobs": 1, "max_tokens": 16, "n": 2}
        answers = await asyncio.gather(*(http.post("/v1/completions", json=body | {"prompt": p}) for p in prompts))
    counters = stats(url)
    assert counters["requests"] == len(prompts) and counters["sequences"] == 2 * len(prompts)
    assert counters["largest_batch"] > 2, counters  # several requests shared a batch
    for answer in answers:
        for choice in answer.json()["choices"]:
            assert_agrees(reference[0], choice)


def test_chat_logprobs_agree(server: str, reference: dict) -> None:
    messages = [{"role": "system", "content": "Add."}, {"role": "user", "content": "4+4="}]
    body = {"model": MODEL, "messages": messages, "logprobs": True, "return_token_ids": True, "max_tokens": 10}
    answer = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=30).json()
    choice = answer["choices"][0]
    got = [c["logprob"] for c in choice["logprobs"]["content"]]
    expected = sequence_logprobs(reference[0], answer["prompt_token_ids"], choice["token_ids"])
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) <= TOLERANCE


def test_n_samples_differ_and_each_agrees(server: str, reference: dict) -> None:
    body = complete(server, prompt="5+5=", n=8, max_tokens=12, logprobs=0)
    ids = [tuple(c["token_ids"]) for c in body["choices"]]
    assert len(ids) == 8 and len(set(ids)) > 1
    for choice in body["choices"]:
        assert_agrees(reference[0], choice)
        assert tok.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]


def test_temperature_zero_is_greedy_and_deterministic(server: str, reference: dict) -> None:
    first = complete(server, prompt="9+1=", max_tokens=16, temperature=0, n=2)
    second = complete(server, prompt="9+1=", max_tokens=16, temperature=0)
    ids = first["choices"][0]["token_ids"]
    assert first["choices"][1]["token_ids"] == ids == second["choices"][0]["token_ids"]
    with torch.no_grad():
        full = torch.tensor([tok("9+1=").input_ids + ids])
        logits = reference[0](input_ids=full).logits[0, 4:-1]
    assert logits.argmax(-1).tolist() == ids[: len(logits)]


def test_seed_reproduces_a_sample(server: str) -> None:
    one = complete(server, prompt="3+3=", max_tokens=16, seed=7, n=2)
    two = complete(server, prompt="3+3=", max_tokens=16, seed=7, n=2)
    other = complete(server, prompt="3+3=", max_tokens=16, seed=8)
    assert [c["token_ids"] for c in one["choices"]] == [c["token_ids"] for c in two["choices"]]
    assert one["choices"][0]["token_ids"] != one["choices"][1]["token_ids"]  # sample i uses seed + i
    assert other["choices"][0]["token_ids"] != one["choices"][0]["token_ids"]


def test_stop_string_ends_the_text_before_it(server: str) -> None:
    greedy = complete(server, prompt="6+2=", max_tokens=24, temperature=0)["choices"][0]
    assert greedy["finish_reason"] == "length" and len(greedy["text"]) >= 6
    stop = greedy["text"][4:6]
    cut = greedy["text"].find(stop)
    stopped = complete(server, prompt="6+2=", max_tokens=24, temperature=0, stop=[stop, "never"])["choices"][0]
    assert stopped["finish_reason"] == "stop"
    assert stopped["text"] == greedy["text"][:cut]
    assert stopped["token_ids"] == greedy["token_ids"][: len(stopped["token_ids"])]
    assert tok.decode(stopped["token_ids"], skip_special_tokens=True).endswith(stop)  # vLLM: ids keep the stop


def test_max_tokens_gives_length(server: str) -> None:
    choice = complete(server, prompt="1+1=", max_tokens=3, temperature=0)["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 3
