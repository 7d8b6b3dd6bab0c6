"""One learner update on a fixed batch, run by ``torchrun`` (the data-parallel test and bench_ranks.py), or alone.

Usage: ``torchrun --standalone --nproc-per-node N ranks_step.py MODEL_DIR OUT_DIR ROWS [EPOCHS KL_COEF REPEATS]``.
Every rank writes its weights after the update (``rank-<r>.safetensors``); rank 0 writes ``stats.json`` (the
update's statistics and the seconds of each repeat). With WORLD_SIZE unset it is the one-rank update.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from voltbus.model import load_model_dir, sequence_logprobs
from voltbus.services.learner.grpo import ranks
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings, TorchrunEnvironment


def batch(model_dir: Path, n: int) -> tuple[list[Row], dict[str, float]]:
    """``n`` rows of varied lengths, two per rollout, logprobs from the starting model (ratio 1 at first)."""
    model, tok = load_model_dir(model_dir)
    rows = []
    for i in range(n):
        prompt = tok(f"{i}+{i * 7 % 13}=").input_ids
        response = tok(f"{i + i * 7 % 13}" + " ok" * (i % 4), add_special_tokens=False).input_ids
        mask = [0 if j == 1 else 1 for j in range(len(response))]  # a tool token in some rows
        lps = [lp * m for lp, m in zip(sequence_logprobs(model, prompt, response), mask, strict=True)]
        rows.append(Row(f"r{i // 2}", prompt, response, mask, lps))
    advantages = {r.rollout_id: (-1.0) ** k * (0.5 + k / n) for k, r in enumerate(rows)}
    return rows, advantages


def weights(policy: Policy) -> dict[str, torch.Tensor]:
    """The policy's tensors, each its own copy (tied ones share memory, which safetensors refuses)."""
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def main() -> None:
    model_dir, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    epochs, kl, repeats = (int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (1, 0, 1)
    settings = LearnerSettings(model_dir=model_dir, weights_dir=out, epochs=epochs, kl_coef=kl, lr=1e-3)
    env = TorchrunEnvironment()
    ranks.start(env, settings)
    if env.rank > 0:
        policy = ranks.follow(settings)
        assert policy is not None
        save_file(weights(policy), out / f"rank-{env.rank}.safetensors")
        return
    rows, advantages = batch(model_dir, n)
    actor = ranks.DataParallelActor(settings) if env.world_size > 1 else TorchActor(Policy.load(settings))
    seconds, stats = [], {}
    for _ in range(repeats):
        started = time.perf_counter()
        stats = actor.update(rows, advantages)
        seconds.append(time.perf_counter() - started)
    ranks.stop()
    save_file(weights(actor.policy), out / "rank-0.safetensors")
    (out / "stats.json").write_text(
        json.dumps({"stats": stats, "seconds": seconds, "threads": torch.get_num_threads()})
    )


if __name__ == "__main__":
    main()
