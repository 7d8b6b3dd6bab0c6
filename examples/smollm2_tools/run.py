"""Multi-turn, tool-calling conversations of ``agent.py`` with SmolLM2-135M-Instruct through voltbus, on the CPU, and
one GRPO step (LoRA) on them; then a report read by SQL from the live projection: conversations, turns, tool calls,
the projection's prefix-mismatch count, and how many tokens of the training rows were sampled (mask 1) or
observations (mask 0: turn separators, tool output, user messages).

The whole system runs in this process (a bus if none answers at ``VOLTBUS_NATS__URL``, coordinator, projector,
CPU inference serving the model, gateway, runner, learner).

    voltbus model fetch smollm2                               # once: converts the model (~1 min)
    .venv/bin/python examples/smollm2_tools/run.py            # 8 tasks x 4 conversations, one GRPO step
    .venv/bin/python examples/smollm2_tools/run.py --tasks-per-step 2 --group-size 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from voltbus.services.learner.session import Session
from voltbus.services.settings import Settings
from voltbus.trainer import GRPO, Trainer
from voltbus.trainer.example import example_settings, load_module

HERE = Path(__file__).resolve().parent
REPORT_SQL = (HERE / "report.sql").read_text()
LR = 2e-4
"""For the LoRA adapter, as in examples/smollm2_format."""
LORA_RANK = 16
PASS_TOKENS = 1024
"""The update in passes of at most this many padded tokens (a conversation is 150-250 tokens)."""


def settings(namespace: str | None = None) -> Settings:
    s = example_settings("smollm2tools", namespace)
    if "lora_rank" not in s.learner.model_fields_set:
        s.learner.lora_rank = LORA_RANK
    if "max_tokens_per_pass" not in s.learner.model_fields_set:
        s.learner.max_tokens_per_pass = PASS_TOKENS
    return s


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1, help="GRPO steps (each one batch of conversations)")
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4, help="conversations per task")
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--weights-dir", type=Path, default=None, help="keep each step's adapter here")
    return parser.parse_args(argv)


def summary(report: dict[str, Any]) -> str:
    """The report as one line.

    >>> print(summary({"conversations": 4, "turns": 9, "tool_calls": 1, "prefix_mismatches": 1, "training_rows": 5,
    ...     "sampled_tokens": 150, "observation_tokens": 60}).replace("; ", ";\\n"))
    4 conversations, 9 turns, 1 tool calls;
    prefix mismatches 1 of 5 continuations (20.0%);
    5 training rows: 150 sampled tokens (mask 1), 60 observation tokens (mask 0)
    """
    continuations = report["turns"] - report["conversations"]
    share = 100 * report["prefix_mismatches"] / continuations if continuations else 0.0
    return (
        f"{report['conversations']} conversations, {report['turns']} turns, {report['tool_calls']} tool calls; "
        f"prefix mismatches {report['prefix_mismatches']} of {continuations} continuations ({share:.1f}%); "
        f"{report['training_rows']} training rows: {report['sampled_tokens']} sampled tokens (mask 1), "
        f"{report['observation_tokens']} observation tokens (mask 0)"
    )


def main(argv: list[str] | None = None, model_dir: Path | None = None) -> dict[str, Any]:
    """Converse and train from ``model_dir`` (default: SmolLM2-135M-Instruct, from ``voltbus model fetch smollm2``);
    returns the training result with the report under ``inspected``."""
    args = parse(argv)
    if model_dir is None:
        from voltbus.model import fetch_model

        model_dir = fetch_model("smollm2")
    agent = load_module(HERE / "agent.py", "voltbus_example_smollm2_tools_agent")
    weights = {"weights_dir": args.weights_dir} if args.weights_dir else {}
    algo = GRPO(
        model_dir=model_dir,
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        **weights,
    )

    async def inspect(session: Session) -> dict[str, Any]:
        params = {"run": session.run_id, "tool_call": agent.TOOL_CALL.pattern}
        [row] = (await session.query(REPORT_SQL, params)).to_pylist()
        return row

    algo.inspect = inspect
    started = time.monotonic()
    result = Trainer(algorithm=algo, n_runners=64, settings=settings()).fit(agent.tool_agent, agent.tasks(400))
    curve = [round(m["reward_mean"], 3) for m in result["steps"]]
    print(
        f"smollm2_tools: {summary(result['inspected'])}; reward per step {curve}; "
        f"{time.monotonic() - started:.0f}s; run {result['run_id']} in namespace {result['namespace']}"
    )
    return result


if __name__ == "__main__":
    main()
