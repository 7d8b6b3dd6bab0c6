"""One learner update on a fixed batch, run by ``torchrun`` (the data-parallel test and bench_ranks.py), or alone.

Usage: ``torchrun --standalone --nproc-per-node N ranks_step.py MODEL_DIR OUT OPTIONS`` (``run_step`` below builds
the command; OPTIONS is a JSON object of ``Options``' fields). Rank 0 saves the version through the actor (a
collective save) and writes ``stats.json`` (the update's statistics, the seconds of each repeat, the saved weights'
path); with the CPU policy each other rank also writes its weights, or with LoRA its adapter
(``rank-<r>.safetensors``). WORLD_SIZE unset: one rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from voltbus.model import load_model_dir, sequence_logprobs
from voltbus.services.learner.backend import load_actor, rank_actor
from voltbus.services.learner.grpo import lora, ranks
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


@dataclass
class Options:
    """What one ``ranks_step`` run does besides the batch's size (``rows``)."""

    epochs: int = 1
    kl: float = 0.0
    backend: str = "torch"
    repeats: int = 1
    """Updates on the batch, each timed."""
    extra: int = 0
    """Tokens added to each response."""
    threads: int = 0
    """Torch threads per rank (0: torch's default)."""
    lora: int = 0
    """``learner.lora_rank`` (0: full weights)."""
    resume: str = ""
    """A saved version to start from, optimizer included (as a resumed learner does)."""
    other_model: str = ""
    """The model directory ranks > 0 load (default: rank 0's)."""


def run_step(
    model_dir: Path, out: Path, ranks: int, rows: int, epochs: int, kl: float, backend: str = "torch", **more: Any
) -> dict:
    """This script in a subprocess, under ``torchrun`` when ``ranks`` > 1; returns rank 0's report, or with
    ``fails=True`` the output of a run that must fail (``{"output": ...}``). ``more``: the other ``Options``
    (``repeats``, ``extra``, ``threads``, ``lora``, ``resume``, ``other_model``)."""
    out.mkdir()
    fails = more.pop("fails", False)
    options = asdict(Options(epochs, kl, backend, **{k: v if isinstance(v, int) else str(v) for k, v in more.items()}))
    command = [str(Path(__file__)), str(model_dir), str(out), json.dumps({"rows": rows, **options})]
    if ranks > 1:
        command = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *command]
    torchrun = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in torchrun}  # a verl test of this process may set them
    done = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=400)
    if fails:
        assert done.returncode != 0
        return {"output": done.stdout + done.stderr}
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "stats.json").read_text())


def differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
    """``|a - b|`` of every element of two state dicts with the same names, flattened."""
    assert a.keys() == b.keys()
    return torch.cat([(a[k].float() - b[k].float()).abs().flatten() for k in a])


def weights(policy: Policy) -> dict[str, torch.Tensor]:
    """The policy's trained tensors, each its own copy (tied ones share memory, which safetensors refuses): the
    whole model, or with LoRA the adapter (what a version holds)."""
    if policy.settings.lora_rank:
        return lora.adapter_state(policy.model)
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def main() -> None:
    model_dir, out, given = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    n, o = given.pop("rows"), Options(**given)
    if o.threads:
        torch.set_num_threads(o.threads)
    if o.backend == "verl":
        from verl_cpu import use_cpu_if_no_gpu  # beside this file; before verl's engine is imported

        use_cpu_if_no_gpu()
    settings = LearnerSettings(
        model_dir=model_dir, weights_dir=out, epochs=o.epochs, kl_coef=o.kl, lr=1e-3, backend=o.backend,
        micro_batch_size=2, lora_rank=o.lora,
    )  # fmt: skip
    env = TorchrunEnvironment()
    ranks.start(env, settings)
    if env.rank > 0 and o.other_model:
        settings = settings.model_copy(update={"model_dir": Path(o.other_model)})
    if env.rank > 0:
        actor = ranks.follow(settings, rank_actor)
        if isinstance(actor, ranks.TorchShare):
            save_file(weights(actor.policy), out / f"rank-{env.rank}.safetensors")
        return
    rows, advantages = batch(model_dir, n, o.extra)
    checkpoint = Path(o.resume) if o.resume else None
    if env.world_size > 1:
        actor = ranks.DataParallelActor(settings, checkpoint, rank_actor)
    else:
        actor = load_actor(settings, checkpoint)
    seconds, stats = [], {}
    for _ in range(o.repeats):
        started = time.perf_counter()
        stats = actor.update(rows, advantages)
        seconds.append(time.perf_counter() - started)
    saved, _ = actor.save("run", 0)
    ranks.stop()
    report = {"stats": stats, "seconds": seconds, "threads": torch.get_num_threads(), "saved": str(saved)}
    (out / "stats.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
