"""Learner update throughput against a plain torch training loop of the same model, in the same run.

Run: ``python -m tests.benchmarks.bench_learner`` (``--help``) or ``pytest -m bench tests/benchmarks``.

voltbus side: ``services.learner.grpo.objective.update`` on GRPO rows (rollouts in groups, recorded logprobs,
per-rollout token weights, PPO-clip) — everything the learner does per step after the rows are read.
Raw side: the same model, the same padded token tensors, a plain policy-gradient step
(forward, log-softmax gather, ``-(logp * advantage).mean()``, backward, clip, AdamW) with nothing else.
Tokens/s counts trained (response) tokens. Each side runs ``--reps`` times, alternating order; medians.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tests.benchmarks.bench_eventlog import CSV_PATH, Figure, Run, write_csv
from voltbus.model import build_tiny_model, build_tokenizer, sequence_logprobs
from voltbus.services.learner.grpo.objective import Row, collate, group_advantages, update


@dataclass
class Options:
    rows: int = 64
    prompt: int = 16
    response: int = 48
    group: int = 8
    steps: int = 5
    reps: int = 3
    csv: bool = True


def make_rows(model: torch.nn.Module, options: Options, rng: random.Random) -> tuple[list[Row], dict[str, float]]:
    rows, rewards = [], {}
    for i in range(options.rows):
        prompt = [rng.randrange(3, 60) for _ in range(options.prompt)]
        response = [rng.randrange(3, 60) for _ in range(options.response)]
        rid = f"r{i}"
        rows.append(Row(rid, prompt, response, [1] * len(response), sequence_logprobs(model, prompt, response)))
        rewards[rid] = rng.random()
    groups = {f"r{i}": f"t{i // options.group}" for i in range(options.rows)}
    return rows, group_advantages(rewards, groups)


def voltbus_side(model, rows: list[Row], adv: dict[str, float], pad: int, steps: int) -> Run:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    tokens, start = 0, time.perf_counter()
    for _ in range(steps):
        tokens += int(update(model, optimizer, rows, adv, pad)["tokens"])
    return Run(tokens, time.perf_counter() - start)


def raw_side(model, rows: list[Row], adv: dict[str, float], pad: int, steps: int) -> Run:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = collate(rows, adv, pad)  # the same padded tensors; building them is not timed here
    tokens, start = 0, time.perf_counter()
    for _ in range(steps):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]
        loss = -(logp * batch.advantages[:, None] * batch.targets).sum() / batch.targets.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens += int(batch.targets.sum())
    return Run(tokens, time.perf_counter() - start)


def run(options: Options) -> list[Figure]:
    """Both sides ``reps`` times, alternating; one figure (tokens/s, ratio to raw)."""
    rng = random.Random(0)
    model, tok = build_tiny_model(0), build_tokenizer()
    rows, adv = make_rows(model, options, rng)
    ours, raws = [], []
    for rep in range(options.reps):
        sides = [("ours", voltbus_side), ("raw", raw_side)]
        for name, side in sides if rep % 2 == 0 else sides[::-1]:
            out = side(build_tiny_model(0), rows, adv, tok.pad_token_id, options.steps)
            (ours if name == "ours" else raws).append(out)
    rate, raw = statistics.median(r.rate for r in ours), statistics.median(r.rate for r in raws)
    note = f"{options.rows} rows x ({options.prompt}+{options.response}) tokens, {options.steps} steps, 1M params"
    figure = Figure("learner_update", ours[0].events, rate, None, None, raw, None, None, note)
    print(f"learner update: {rate:,.0f} trained tokens/s vs plain torch loop {raw:,.0f} -> {rate / raw:.0%} ({note})")
    if options.csv:
        write_csv(CSV_PATH, [figure])
    return [figure]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    for name in ("rows", "prompt", "response", "group", "steps", "reps"):
        p.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    p.add_argument("--no-csv", action="store_true", help="do not append to tests/benchmarks/results.csv")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    run(Options(**{k: v for k, v in vars(args).items() if k != "no_csv"}, csv=not args.no_csv))


if __name__ == "__main__":
    main()
