"""Train the Agent Lightning 1.0-style agent of ``agent.py`` with GRPO through voltbus, on the CPU.

Every rollout runs in its own process (an isolated runner) that knows only ``AGL_OPENAI_BASE_URL``,
``AGL_EVENT_URL`` and ``AGL_KEY``; its model calls go through the gateway to the CPU inference
server serving ``examples/arith_rl/model``, which follows the weights the learner publishes.
Uses the bus at ``VOLTBUS_NATS__URL`` if one answers, else starts an embedded one.

    .venv/bin/python examples/agl_env_agent/run.py            # 6 GRPO steps of 8 tasks x 4 rollouts
    .venv/bin/python examples/agl_env_agent/run.py --eval     # the tasks once, no learning
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path
from typing import Any

from voltbus.schemas.resources import PromptTemplate
from voltbus.services.settings import RunnerSettings, Settings
from voltbus.trainer import GRPO, Baseline, Trainer

HERE = Path(__file__).resolve().parent
AGENT = f"{HERE / 'agent.py'}:agl_agent"  # a file path: each isolated rollout process loads it
MODEL = HERE.parent / "arith_rl" / "model"
TASKS = HERE.parent / "arith_rl" / "tasks.jsonl"


def tasks(limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def settings(namespace: str | None = None) -> Settings:
    s = Settings()
    s.nats.namespace = namespace or f"aglenv{uuid.uuid4().hex[:8]}"
    s.runner = RunnerSettings(isolate=True, heartbeat_s=1.0)  # gateway_url: set to the local gateway
    return s


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval", action="store_true", help="run the tasks once with the starting weights")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=None, help="use only the first N of the 100 tasks")
    parser.add_argument("--runners", type=int, default=16, help="rollouts at once (one process each)")
    args = parser.parse_args(argv)
    data = tasks(args.tasks)
    started = time.monotonic()
    if args.eval:
        trainer = Trainer(
            algorithm=Baseline(),
            n_runners=args.runners,
            settings=settings(),
            # voltbus pins every rollout to a resources version; this agent reads none of it
            initial_resources={"prompt": PromptTemplate(template="{a}+{b}=")},
        )
        s = trainer.settings
        s.learner = s.learner.model_copy(update={"model_dir": MODEL})  # serve the model (no learning)
        result = trainer.fit(AGENT, data)
        print(
            f"agl_env_agent: mean reward {result['train']['mean_reward']:.3f} over "
            f"{int(result['train']['rollouts'])} rollouts in {time.monotonic() - started:.0f}s"
        )
        return result
    algo = GRPO(
        model_dir=MODEL,
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=5e-4,
    )
    result = Trainer(algorithm=algo, n_runners=args.runners, settings=settings()).fit(AGENT, data)
    curve = [round(m["reward_mean"], 3) for m in result["steps"]]
    print(
        f"agl_env_agent: {len(curve)} GRPO steps, sampled reward per step {curve}, "
        f"{time.monotonic() - started:.0f}s; run {result['run_id']} in namespace {result['namespace']}"
    )
    return result


if __name__ == "__main__":
    main()
