"""Supervised warm start on any text format: samples made of segments, the loss on the chosen segments only.

A sample is a list of ``(text, trained)`` segments. Its tokens are ``<s>`` followed by each segment's
characters; the literal ``</s>`` inside a segment is the end-of-answer token. Only the tokens of
``trained`` segments carry a loss, so a prompt, or a tool's output in the middle of a transcript, is
context the model reads but is never taught to write (the same masking GRPO applies to tool tokens).

>>> from voltbus.services.clients.model import build_tokenizer
>>> tok = build_tokenizer()
>>> ids, mask, labels = segments_batch(tok, [[("Q:1\\n", False), ("A:1</s>", True)]])
>>> ids[0].tolist(), labels[0].tolist()[:5], labels[0].tolist()[5:]
([1, 53, 30, 21, 99, 37, 30, 21, 2], [-100, -100, -100, -100, -100], [37, 30, 21, 2])
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

IGNORE = -100
Segment = tuple[str, bool]
"""Text, and whether the model is trained to write it."""


def segments_batch(
    tok: PreTrainedTokenizerBase, samples: Sequence[Sequence[Segment]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, labels)`` for ``samples``, right-padded; labels only on trained segments."""
    rows, targets = [], []
    for sample in samples:
        row, target = [tok.bos_token_id], [IGNORE]
        for text, trained in sample:
            ids = tok(text, add_special_tokens=False).input_ids
            row += ids
            target += ids if trained else [IGNORE] * len(ids)
        rows.append(row)
        targets.append(target)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)], mask[i, : len(row)], labels[i, : len(row)] = torch.tensor(row), 1, torch.tensor(target)
    return ids, mask, labels


def train_on_samples(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    sample: Callable[[random.Random], Sequence[Segment]],
    steps: int = 600,
    batch: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> float:
    """Train ``model`` in place for ``steps`` AdamW steps on batches of ``sample(rng)``; returns the last
    loss (nan for 0 steps). The learning rate decays linearly to a tenth; the same seed gives the same data."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - 0.9 * s / max(1, steps))
    model.train()
    loss_value, started = float("nan"), time.perf_counter()
    every = max(1, steps // 10)
    for step in range(1, steps + 1):
        ids, mask, labels = segments_batch(tok, [sample(rng) for _ in range(batch)])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if progress and (step % every == 0 or step == steps):
            progress(f"warm start step {step}/{steps} loss {loss_value:.3f} ({time.perf_counter() - started:.1f} s)")
    model.eval()
    return loss_value


def build_warm_started(
    sample: Callable[[random.Random], list[Segment]], out: Path, steps: int, seed: int = 0,
    say: Callable[[str], None] = print,
) -> Path:  # fmt: skip
    """A fresh tiny model warm-started for ``steps`` steps on ``sample``'s transcripts, written to ``out``."""
    from .tiny import build_tiny_model, save_model_dir
    from .tokenizer import build_tokenizer

    tok = build_tokenizer()
    model = build_tiny_model(seed)
    loss = train_on_samples(model, tok, sample, steps=steps, batch=64, lr=3e-3, seed=seed, progress=say)
    say(f"last loss {loss:.3f}")
    return save_model_dir(model, tok, out)


def build_main(
    doc: str | None, sample: Callable[[random.Random], list[Segment]], out: Path, steps: int,
    argv: list[str] | None = None,
) -> Path:  # fmt: skip
    """The command line of an example's ``build_model.py``: ``--out``, ``--steps``, ``--seed``."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier on 2 shared cores
    started = time.monotonic()
    path = build_warm_started(sample, args.out, args.steps, args.seed)
    print(f"wrote {path} in {time.monotonic() - started:.0f}s")
    return path
