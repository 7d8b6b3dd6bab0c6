"""Train the OpenAI Agents SDK agent of ``agent.py`` with a few GRPO steps through voltbus, on the CPU.

The learner publishes the policy as a ``ProxyLLM`` resource; the agent hands its endpoint to the
SDK as the base_url, so the SDK's Responses API calls go through the gateway (translated to chat,
recorded with token ids) to the CPU inference server serving ``examples/arith_rl/model``. Uses the
bus at ``VOLTBUS_NATS__URL`` if one answers, else starts an embedded one.

    .venv/bin/python examples/openai_agents_sdk/run.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
import uuid
from pathlib import Path
from typing import Any

from voltbus.services.settings import Settings
from voltbus.trainer import GRPO, Trainer

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent / "arith_rl" / "model"
TASKS = HERE.parent / "arith_rl" / "tasks.jsonl"


def load_agent() -> Any:
    spec = importlib.util.spec_from_file_location("openai_agents_sdk_example", HERE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sdk_agent


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args(argv)
    tasks = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    settings = Settings()
    settings.nats.namespace = f"sdk{uuid.uuid4().hex[:8]}"
    algo = GRPO(model_dir=MODEL, steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group_size)
    started = time.monotonic()
    result = Trainer(algorithm=algo, n_runners=16, settings=settings).fit(load_agent(), tasks)
    elapsed = time.monotonic() - started
    curve = [round(m["reward_mean"], 3) for m in result["steps"]]
    # the learner trains on the token ids the gateway recorded for the SDK's calls
    print(
        f"openai_agents_sdk: {len(curve)} GRPO steps, sampled reward per step {curve}, "
        f"{elapsed:.0f}s; run {result['run_id']} in namespace {result['namespace']}"
    )
    return result


if __name__ == "__main__":
    main()
