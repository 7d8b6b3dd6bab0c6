"""One learner update on a fixed batch, run by ``torchrun`` (the data-parallel test and bench_ranks.py), or alone.

Usage: ``torchrun --standalone --nproc-per-node N ranks_step.py MODEL_DIR OUT ROWS [EPOCHS KL REPEATS BACKEND
EXTRA THREADS]`` (``run_step`` below builds the command).
BACKEND (7th argument) is ``torch`` (default) or ``verl``. Rank 0 saves the version through the actor (a collective
save) and writes ``stats.json`` (the update's statistics, the seconds of each repeat, the saved weights' path);
with the CPU policy each other rank also writes its weights (``rank-<r>.safetensors``). WORLD_SIZE unset: one rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from voltbus.model import load_model_dir, sequence_logprobs
from voltbus.services.learner.backend import load_actor, rank_actor
from voltbus.services.learner.grpo import ranks
from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings, TorchrunEnvironment


def batch(model_dir: Path, n: int, extra: int = 0) -> tuple[list[Row], dict[str, float]]:
    """``n`` rows of varied lengths (``extra`` more tokens each), two per rollout, logprobs from the starting model
    (ratio 1 at first)."""
    model, tok = load_model_dir(model_dir)
    rows = []
    for i in range(n):
        prompt = tok(f"{i}+{i * 7 % 13}=").input_ids
        text = f"{i + i * 7 % 13}" + " ok" * (i % 4) + "x" * extra
        response = tok(text, add_special_tokens=False).input_ids
        mask = [0 if j == 1 else 1 for j in range(len(response))]  # a tool token in some rows
        lps = [lp * m for lp, m in zip(sequence_logprobs(model, prompt, response), mask, strict=True)]
        rows.append(Row(f"r{i // 2}", prompt, response, mask, lps))
    advantages = {r.rollout_id: (-1.0) ** k * (0.5 + k / n) for k, r in enumerate(rows)}
    return rows, advantages


def run_step(
    model_dir: Path, out: Path, ranks: int, rows: int, epochs: int, kl: float, backend: str = "torch", **more: int
) -> dict:
    """This script in a subprocess, under ``torchrun`` when ``ranks`` > 1; returns rank 0's report. ``more``:
    ``repeats`` (updates), ``extra`` (tokens added to each response), ``threads`` (torch threads per rank)."""
    out.mkdir()
    numbers = [str(more.get(k, d)) for k, d in (("repeats", 1), ("extra", 0), ("threads", 0))]
    command = [str(Path(__file__)), str(model_dir), str(out), str(rows), str(epochs), str(kl), numbers[0], backend]
    command += numbers[1:]
    if ranks > 1:
        command = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *command]
    torchrun = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in torchrun}  # a verl test of this process may set them
    done = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "stats.json").read_text())


def differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
    """``|a - b|`` of every element of two state dicts with the same names, flattened."""
    assert a.keys() == b.keys()
    return torch.cat([(a[k].float() - b[k].float()).abs().flatten() for k in a])


def weights(policy: Policy) -> dict[str, torch.Tensor]:
    """The policy's tensors, each its own copy (tied ones share memory, which safetensors refuses)."""
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def main() -> None:
    model_dir, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    epochs, kl, repeats = (int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (1, 0, 1)
    backend = sys.argv[7] if len(sys.argv) > 7 else "torch"
    extra, threads = (int(sys.argv[8]), int(sys.argv[9])) if len(sys.argv) > 9 else (0, 0)
    if threads:
        torch.set_num_threads(threads)
    if backend == "verl":
        from verl_cpu import use_cpu_if_no_gpu  # beside this file; before verl's engine is imported

        use_cpu_if_no_gpu()
    settings = LearnerSettings(
        model_dir=model_dir, weights_dir=out, epochs=epochs, kl_coef=kl, lr=1e-3, backend=backend, micro_batch_size=2
    )
    env = TorchrunEnvironment()
    ranks.start(env, settings)
    if env.rank > 0:
        actor = ranks.follow(settings, rank_actor)
        if isinstance(actor, ranks.TorchShare):
            save_file(weights(actor.policy), out / f"rank-{env.rank}.safetensors")
        return
    rows, advantages = batch(model_dir, n, extra)
    actor = ranks.DataParallelActor(settings, None, rank_actor) if env.world_size > 1 else load_actor(settings)
    seconds, stats = [], {}
    for _ in range(repeats):
        started = time.perf_counter()
        stats = actor.update(rows, advantages)
        seconds.append(time.perf_counter() - started)
    saved, _ = actor.save("run", 0)
    ranks.stop()
    report = {"stats": stats, "seconds": seconds, "threads": torch.get_num_threads(), "saved": str(saved)}
    (out / "stats.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
