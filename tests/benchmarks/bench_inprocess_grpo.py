"""The arith_rl example's policy trained by the same GRPO update with no system around it (sampling with
HF ``generate`` in this process): the curve the demo's curve is compared with.

Run: ``python -m tests.benchmarks.bench_inprocess_grpo [--lr 5e-4] [--steps 40]``.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from voltbus.model import greedy_accuracy, load_model_dir
from voltbus.services.learner.grpo.objective import Row, group_advantages, update

MODEL = Path(__file__).resolve().parents[2] / "examples" / "arith_rl" / "model"


def sample_rows(model, tok, tasks: list[tuple[int, int]], group: int) -> tuple[list[Row], dict, dict]:
    """``group`` samples per task at temperature 1, with their logprobs and exact-sum rewards."""
    prompts = [tok(f"{a}+{b}=").input_ids for a, b in tasks for _ in range(group)]
    ids = torch.tensor(prompts)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=True, temperature=1.0,
            top_k=0, pad_token_id=tok.pad_token_id, return_dict_in_generate=True, output_scores=True,
        )  # fmt: skip
    sampled = out.sequences[:, ids.shape[1] :]
    logps = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1)
    rows, rewards, groups = [], {}, {}
    for i, (a, b) in enumerate(t for t in tasks for _ in range(group)):
        resp = sampled[i].tolist()
        if tok.eos_token_id in resp:
            resp = resp[: resp.index(tok.eos_token_id) + 1]
        rid = f"r{i}"
        rewards[rid] = float(tok.decode(resp, skip_special_tokens=True).strip() == str(a + b))
        groups[rid] = f"t{i // group}"
        rows.append(Row(rid, prompts[i], resp, [1] * len(resp), [float(logps[i, j, t]) for j, t in enumerate(resp)]))
    return rows, rewards, groups


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    args = p.parse_args()
    torch.manual_seed(0)
    model, tok = load_model_dir(MODEL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng, curve, started = random.Random(0), [], time.perf_counter()
    print(f"greedy accuracy before: {greedy_accuracy(model, tok):.2f}")
    for step in range(args.steps):
        tasks = [(rng.randrange(10), rng.randrange(10)) for _ in range(args.tasks)]
        rows, rewards, groups = sample_rows(model, tok, tasks, args.group)
        update(model, optimizer, rows, group_advantages(rewards, groups), tok.pad_token_id)
        curve.append(sum(rewards.values()) / len(rewards))
        if (step + 1) % 10 == 0:
            print(f"step {step + 1}: sampled reward (last 10) {sum(curve[-10:]) / 10:.3f}")
    k = min(5, len(curve))
    print(
        f"greedy accuracy after: {greedy_accuracy(model, tok):.2f}; sampled reward first {k} steps "
        f"{sum(curve[:k]) / k:.2f} -> last {k} {sum(curve[-k:]) / k:.2f}; {time.perf_counter() - started:.0f}s"
    )


if __name__ == "__main__":
    main()
