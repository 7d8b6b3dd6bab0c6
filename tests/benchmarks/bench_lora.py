"""Learner step time with LoRA against full weights, in the same run: update, save, and the size of a version.

Run: ``python -m tests.benchmarks.bench_lora`` (the tiny model) or ``--model-dir DIR`` (e.g. SmolLM2 from
``voltbus model fetch smollm2``); ``--help``. Each side is the learner's own ``Policy`` + ``TorchActor``: one
GRPO update (``objective.update``) on the same rows, then ``Policy.save`` (a version's files). Sides alternate
over ``--reps``; medians. The ratio is LoRA's step rate over full weights' (above 1: LoRA is faster).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.benchmarks.bench_eventlog import CSV_PATH, Figure, write_csv
from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir, sequence_logprobs
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.objective import Row, group_advantages
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings


@dataclass
class Options:
    model_dir: Path | None = None
    rows: int = 16
    prompt: int = 32
    response: int = 32
    steps: int = 2
    reps: int = 2
    rank: int = 16
    csv: bool = True


@dataclass
class Side:
    update_s: float
    save_s: float
    version_bytes: int


def make_rows(model: torch.nn.Module, vocab: int, options: Options) -> tuple[list[Row], dict[str, float]]:
    rng, rows, rewards = random.Random(0), [], {}
    for i in range(options.rows):
        prompt = [rng.randrange(3, vocab) for _ in range(options.prompt)]
        response = [rng.randrange(3, vocab) for _ in range(options.response)]
        with torch.no_grad():
            logprobs = sequence_logprobs(model, prompt, response)
        rows.append(Row(f"r{i}", prompt, response, [1] * len(response), logprobs))
        rewards[f"r{i}"] = rng.random()
    return rows, group_advantages(rewards, {f"r{i}": f"t{i // 4}" for i in range(options.rows)})


def side(model_dir: Path, rank: int, rows: list[Row], adv: dict[str, float], options: Options, out: Path) -> Side:
    """``steps`` learner steps (update + save) of one kind; the model is loaded before the clock starts."""
    policy = Policy.load(LearnerSettings(model_dir=model_dir, weights_dir=out, lora_rank=rank, lr=1e-5))
    actor, update, save, size = TorchActor(policy), 0.0, 0.0, 0
    for step in range(options.steps):
        start = time.perf_counter()
        actor.update(rows, adv)
        middle = time.perf_counter()
        file, _ = actor.save("bench", step)
        save += time.perf_counter() - middle
        update += middle - start
        size = file.stat().st_size
    return Side(update / options.steps, save / options.steps, size)


def run(options: Options) -> list[Figure]:
    """Both kinds ``reps`` times, alternating; one figure (steps/s of LoRA, of full weights, ratio)."""
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as scratch:
        model_dir = options.model_dir or save_model_dir(build_tiny_model(0), build_tokenizer(), Path(scratch) / "tiny")
        policy = Policy.load(LearnerSettings(model_dir=model_dir, weights_dir=Path(scratch)))
        params = sum(p.numel() for p in policy.model.parameters())
        rows, adv = make_rows(policy.model, policy.model.config.vocab_size, options)
        del policy
        lora, full = [], []
        for rep in range(options.reps):
            kinds = [(options.rank, lora), (0, full)]
            for rank, found in kinds if rep % 2 == 0 else kinds[::-1]:
                found.append(side(model_dir, rank, rows, adv, options, Path(scratch) / f"w{rep}-{rank}"))
    step = {n: statistics.median(s.update_s + s.save_s for s in f) for n, f in (("lora", lora), ("full", full))}
    upd = {n: statistics.median(s.update_s for s in f) for n, f in (("lora", lora), ("full", full))}
    note = (
        f"{params / 1e6:.1f}M params, rank {options.rank} all-linear, {options.rows} rows x "
        f"({options.prompt}+{options.response}) tokens; update {upd['lora']:.2f}s vs {upd['full']:.2f}s; "
        f"version {lora[0].version_bytes / 1e6:.2f} MB vs {full[0].version_bytes / 1e6:.1f} MB"
    )
    figure = Figure(
        "learner_step_lora", options.steps, 1 / step["lora"], None, None, 1 / step["full"], None, None, note
    )
    print(
        f"learner step (update + save): LoRA {step['lora']:.2f}s vs full weights {step['full']:.2f}s -> "
        f"{step['full'] / step['lora']:.2f}x ({note})"
    )
    if options.csv:
        write_csv(CSV_PATH, [figure])
    return [figure]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    p.add_argument("--model-dir", type=Path, default=None, help="a model directory (default: the tiny model)")
    for name in ("rows", "prompt", "response", "steps", "reps", "rank"):
        p.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    p.add_argument("--no-csv", action="store_true", help="do not append to tests/benchmarks/results.csv")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    run(Options(**{k: v for k, v in vars(args).items() if k != "no_csv"}, csv=not args.no_csv))


if __name__ == "__main__":
    main()
