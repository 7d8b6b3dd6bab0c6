"""A short GRPO run on a CUDA GPU (``bash .ci/gpu``): the learner on verl's engine (``backend=verl``), the policy
served by ``voltbus inference`` on ``cuda``, through the whole system; prints tokens/s and the validation reward
before and after. Task: "What is a + b?" answered as "The answer is N." (1 for the right sum in that form, 0.2
for the form with another number, 0 otherwise: an instruct model gets some of it right at once)."""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from typing import Any

import voltbus as agl
from voltbus.services.settings import Settings
from voltbus.trainer import GRPO, Trainer
from voltbus.trainer.example import example_settings

ANSWER = re.compile(r"The answer is (-?\d+)\.")


@agl.rollout
async def sum_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """One chat call; the reward of its reply."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5)
    question = f"What is {task['a']} + {task['b']}? Reply with one sentence: 'The answer is N.'"
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": question}], max_tokens=24
    )
    found = ANSWER.search(reply.choices[0].message.content or "")
    if found is None:
        return 0.0
    return 1.0 if int(found.group(1)) == task["a"] + task["b"] else 0.2


def tasks(count: int, seed: int) -> list[dict[str, int]]:
    """``count`` sums of two numbers below 50."""
    rng = random.Random(seed)
    return [{"id": f"{seed}-{i}", "a": rng.randrange(50), "b": rng.randrange(50)} for i in range(count)]


def model_dir(given: str, lora_rank: int) -> Path:
    """``given``, or for ``auto`` the largest model whose run fits the GPU (``gpu_models.py``, beside this file)."""
    if given != "auto":
        return Path(given)
    from voltbus.services.clients.model.pretrained import MODELS, default_models_dir
    from voltbus.trainer.example import load_module

    models = load_module(Path(__file__).with_name("gpu_models.py"), "voltbus_ci_gpu_models")
    smollm2 = default_models_dir() / MODELS["smollm2"]  # voltbus model fetch smollm2's, when converted
    return models.pick([smollm2] if smollm2.is_dir() else [], "lora" if lora_rank else "full")


def main(argv: list[str] | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """Train, print the figures' line, and return the figures (``settings``: a test's bus; default: a fresh one)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory, or auto: the largest that fits")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=180.0, help="stop training after this many seconds")
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--val", type=int, default=64, help="validation tasks, scored before and after")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    parser.add_argument("--backend", default="verl", help="the learner's backend (torch: a CPU smoke test)")
    parser.add_argument("--device", default="cuda", help="voltbus inference's torch device")
    parser.add_argument("--runners", type=int, default=64)
    args = parser.parse_args(argv)
    args.model = model_dir(args.model, args.lora_rank)
    settings = settings or example_settings("gpu")
    settings.inference.device = args.device
    settings.inference.max_batch_rows = 256
    algo = GRPO(
        model_dir=args.model, backend=args.backend, steps=args.steps, time_budget_s=args.budget_s,
        tasks_per_step=args.tasks_per_step, group_size=args.group_size, lr=args.lr, lora_rank=args.lora_rank,
        micro_batch_size=16, weights_in_bus_mb=0,
    )  # fmt: skip
    started = time.monotonic()
    trainer = Trainer(algorithm=algo, n_runners=args.runners, settings=settings)
    result = trainer.fit(sum_agent, tasks(800, 0), tasks(args.val, 1))
    steps = list(result["steps"])
    tokens = sum(m["tokens"] for m in steps)
    figures = {
        "model": str(args.model),
        "steps": len(steps),
        "lora_rank": args.lora_rank,
        "reward_before": result["before"]["mean_reward"],
        "reward_after": result["after"]["mean_reward"],
        "sampled_reward_per_step": [round(m["reward_mean"], 3) for m in steps],
        "trained_tokens": tokens,
        "sampling_tokens_per_s": tokens / max(sum(m["time_sample_s"] for m in steps), 1e-9),
        "update_tokens_per_s": tokens / max(sum(m["time_update_s"] for m in steps), 1e-9),
        "step_s_mean": sum(m["time_step_s"] for m in steps) / max(len(steps), 1),
        "wall_s": time.monotonic() - started,
    }
    what = f"LoRA rank {args.lora_rank}" if args.lora_rank else "full weights"
    print(
        f"gpu run: {args.model.name}, {what}: validation reward {figures['reward_before']:.3f} -> "
        f"{figures['reward_after']:.3f} after {len(steps)} GRPO steps; sampling {figures['sampling_tokens_per_s']:.0f} "
        f"tokens/s, update {figures['update_tokens_per_s']:.0f} tokens/s, {figures['step_s_mean']:.1f} s/step, "
        f"{figures['wall_s']:.0f} s in all"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
