"""Warm start: short supervised pretraining on single-digit addition, so the policy is right only sometimes.

The prompt is ``<s>a+b=`` and the answer ``str(a+b)</s>``; for half of the samples the answer is the
distractor ``a+b+1``. The model learns the format and both answers, so a sampled answer is right
about half of the time and RL has something to improve (research: cpu-learner.md §3a).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

IGNORE = -100


def addition_batch(
    tok: PreTrainedTokenizerBase, size: int, rng: random.Random, distractor: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, labels)`` for ``size`` samples, right-padded; loss on the answer only."""
    rows, labels = [], []
    for _ in range(size):
        a, b = rng.randrange(10), rng.randrange(10)
        answer = a + b + (1 if rng.random() < distractor else 0)
        prompt = tok(f"{a}+{b}=").input_ids
        reply = tok(str(answer), add_special_tokens=False).input_ids + [tok.eos_token_id]
        rows.append(prompt + reply)
        labels.append([IGNORE] * len(prompt) + reply)
    width = max(len(r) for r in rows)
    ids = torch.full((size, width), tok.pad_token_id)
    mask = torch.zeros((size, width), dtype=torch.long)
    target = torch.full((size, width), IGNORE)
    for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(row)], mask[i, : len(row)], target[i, : len(row)] = torch.tensor(row), 1, torch.tensor(label)
    return ids, mask, target


def warm_start(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    steps: int = 400,
    batch: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> float:
    """Train ``model`` in place for ``steps`` AdamW steps; returns the last loss (nan for 0 steps)."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss_value, started = float("nan"), time.perf_counter()
    every = max(1, steps // 10)
    for step in range(1, steps + 1):
        ids, mask, labels = addition_batch(tok, batch, rng)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = float(loss.detach())
        if progress and (step % every == 0 or step == steps):
            progress(f"warm start step {step}/{steps} loss {loss_value:.3f} ({time.perf_counter() - started:.1f} s)")
    model.eval()
    return loss_value


@torch.no_grad()
def greedy_accuracy(model: PreTrainedModel, tok: PreTrainedTokenizerBase) -> float:
    """Share of the 100 problems ``a+b=`` whose greedy answer is exactly ``str(a+b)</s>``."""
    prompts = [(a, b) for a in range(10) for b in range(10)]
    ids = torch.tensor([tok(f"{a}+{b}=").input_ids for a, b in prompts])  # all prompts are 5 tokens
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=3,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    right = 0
    for (a, b), row in zip(prompts, out[:, ids.shape[1] :].tolist(), strict=True):
        want = tok(str(a + b), add_special_tokens=False).input_ids + [tok.eos_token_id]
        right += row[: len(want)] == want
    return right / len(prompts)
