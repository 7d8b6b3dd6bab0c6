"""The engine ends a sequence on the tokenizer's EOS and on every EOS id of the model's generation config."""

from __future__ import annotations

from voltbus.model import build_tiny_model, build_tokenizer
from voltbus.services.inference.engine import Engine, Row
from voltbus.services.inference.sampling import Sampling


def greedy(engine: Engine, prompt: list[int]) -> Row:
    row = Row(prompt, Sampling(max_tokens=8, temperature=0))
    engine.generate([row])
    return row


def test_an_eos_id_of_the_generation_config_ends_the_sequence() -> None:
    model, tok = build_tiny_model(0), build_tokenizer()
    prompt = tok("1+2=").input_ids
    free = greedy(Engine(model, tok, seed=0), prompt)
    first = free.token_ids[0]
    assert first != tok.eos_token_id and len(free.token_ids) > 1
    model.generation_config.eos_token_id = [tok.eos_token_id, first]  # e.g. a chat model's end-of-turn token
    stopped = greedy(Engine(model, tok, seed=0), prompt)
    assert stopped.token_ids == [first] and stopped.finish_reason == "stop"
