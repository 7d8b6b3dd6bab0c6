"""Warm start on segments: the loss falls only on trained segments, and a short run teaches a format."""

from __future__ import annotations

import doctest
import random

import torch

import voltbus.services.clients.model.sft
from voltbus.model import build_tiny_model, build_tokenizer, segments_batch, train_on_samples


def test_doctests() -> None:
    assert doctest.testmod(voltbus.services.clients.model.sft).failed == 0


def test_labels_cover_trained_segments_and_eos_only() -> None:
    tok = build_tokenizer()
    ids, mask, labels = segments_batch(tok, [[("ab", False), ("c</s>", True)], [("x", True)]])
    assert ids.tolist() == [tok("abc").input_ids + [tok.eos_token_id], tok("x").input_ids + [0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert labels.tolist() == [
        [-100, -100, -100, ids[0, 3].item(), tok.eos_token_id],
        [-100, ids[1, 1].item(), -100, -100, -100],
    ]


def test_a_short_run_teaches_the_trained_segment_and_not_the_context() -> None:
    tok = build_tokenizer()
    model = build_tiny_model(0)

    def sample(rng: random.Random) -> list[tuple[str, bool]]:
        digit = str(rng.randrange(10))
        return [(f"{digit}:", False), (f"{digit}{digit}</s>", True)]

    before = [p.detach().clone() for p in model.parameters()]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 threads on 2 busy cores run 2-3x slower
    try:
        loss = train_on_samples(model, tok, sample, steps=60, batch=32, lr=3e-3, seed=0)
    finally:
        torch.set_num_threads(threads)
    assert loss < 0.5 and any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    prompt = torch.tensor([tok("7:").input_ids])
    out = model.generate(input_ids=prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, eos_token_id=2)
    assert tok.decode(out[0, prompt.shape[1] :]) == "77</s>"
