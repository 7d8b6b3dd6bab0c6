"""Improve the calculator agent's prompt template with APO through voltbus, on the CPU, offline.

By default the agent's model and APO's critic are the rule-based stand-ins of ``stand_ins.py``, served
over the OpenAI API on loopback. With ``--openai-base-url`` (or ``OPENAI_BASE_URL``) both are a real
model instead (``--model``, ``--critic-model``; the key from ``OPENAI_API_KEY``). Uses the bus at
``VOLTBUS_NATS__URL`` if one answers, else an embedded one; at the end the run's events are replayed
from the log into ``--db``, a DuckDB file for ``voltbus sql --db``.

    .venv/bin/python examples/apo_prompt/run.py
    .venv/bin/voltbus sql --db apo_prompt.duckdb "SELECT count(*) FROM spans"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import voltbus as agl
from voltbus.services.ops.embedded import answers, start_embedded
from voltbus.services.projector.client import rebuild
from voltbus.services.settings import Settings
from voltbus.trainer import APO, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the example is a package
from apo_prompt.agent import calc_agent  # noqa: E402
from apo_prompt.stand_ins import OPTIMIZER_MODEL, TASK_MODEL, StandIns  # noqa: E402
from apo_prompt.tasks import make_tasks  # noqa: E402

SEED_TEMPLATE = "Calculate {expression}."
DEFAULT_DB = Path("apo_prompt.duckdb")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--openai-base-url", default=os.environ.get("OPENAI_BASE_URL"), help="a real model's API")
    parser.add_argument("--model", default="gpt-4.1-mini", help="the agent's model (with --openai-base-url)")
    parser.add_argument("--critic-model", default=None, help="APO's critic (default: --model)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beam-width", type=int, default=2)
    parser.add_argument("--branch-factor", type=int, default=2)
    parser.add_argument("--gradient-batch-size", type=int, default=4)
    parser.add_argument("--val-batch-size", type=int, default=8)
    parser.add_argument("--train", type=int, default=24, help="training tasks")
    parser.add_argument("--val", type=int, default=16, help="validation tasks")
    parser.add_argument("--runners", type=int, default=8, help="rollouts at once")
    parser.add_argument("--seed", type=int, default=0, help="APO's batch draws")
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"projection to build ({DEFAULT_DB} is replaced)")
    return parser.parse_args(argv)


@contextmanager
def a_bus(settings: Settings) -> Iterator[Settings]:
    """The configured bus if one answers, else an embedded one until the block ends."""
    if asyncio.run(answers(settings)):
        yield settings
        return
    server = start_embedded(settings, print)
    try:
        yield settings.model_copy(update={"nats": settings.nats.model_copy(update={"url": server.url})})
    finally:
        server.stop()


def models(args: argparse.Namespace, stack: ExitStack) -> tuple[agl.LLM, agl.LLM, StandIns | None]:
    """The agent's model and the critic: a real one if a base URL is given, else the stand-ins."""
    if args.openai_base_url:
        key = os.environ.get("OPENAI_API_KEY")
        task = agl.LLM(endpoint=args.openai_base_url, model=args.model)  # published: no key in it
        return task, agl.LLM(endpoint=args.openai_base_url, model=args.critic_model or args.model, api_key=key), None
    stand_ins = stack.enter_context(StandIns())
    task = agl.LLM(endpoint=stand_ins.url, model=TASK_MODEL)
    return task, agl.LLM(endpoint=stand_ins.url, model=OPTIMIZER_MODEL), stand_ins


def main(argv: list[str] | None = None, settings: Settings | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.db.exists() and args.db != DEFAULT_DB:
        raise SystemExit(f"{args.db} exists: choose a new file for the projection")
    args.db.unlink(missing_ok=True)
    settings = (settings or Settings()).model_copy(deep=True)
    settings.nats.namespace = f"apo{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with ExitStack() as stack:
        task_llm, critic, stand_ins = models(args, stack)
        print(f"agent model {task_llm.model} and critic {critic.model} at {task_llm.endpoint}")
        bus = stack.enter_context(a_bus(settings))
        apo = APO(
            critic=critic,
            beam_width=args.beam_width,
            branch_factor=args.branch_factor,
            rounds=args.rounds,
            gradient_batch_size=args.gradient_batch_size,
            val_batch_size=args.val_batch_size,
            seed=args.seed,
        )
        resources = {"prompt_template": agl.PromptTemplate(template=SEED_TEMPLATE), "task_llm": task_llm}
        trainer = Trainer(algorithm=apo, n_runners=args.runners, initial_resources=resources, settings=bus)
        result = trainer.fit(calc_agent, make_tasks(args.train, seed=1), val_dataset=make_tasks(args.val, seed=2))
        took = time.monotonic() - started
        asyncio.run(rebuild(bus, args.db, print))
    result |= {"db": args.db, "seconds": took, "model_calls": dict(stand_ins.calls) if stand_ins else {}}
    result["critiques"] = list(stand_ins.critiques) if stand_ins else []
    report(result)
    return result


def report(result: dict[str, Any]) -> None:
    """Print the outcome and where to look at it."""
    curve = [round(step["best_val_reward_full"], 3) for step in result["steps"]]
    print(f"\nAPO run {result['run_id']} in namespace {result['namespace']}, {result['seconds']:.0f}s")
    print(f"validation reward {result['before']:.3f} -> {result['after']:.3f} (best after each round: {curve})")
    print(f"critic errors: {result['critic_errors'] or 'none'}; stand-in calls: {result['model_calls'] or '-'}")
    if result["critiques"]:
        print(f"first critique: {result['critiques'][0]}")
    print(f"chosen prompt template ({result['resources_id']}):\n    {result['template']}")
    print(f'query it: .venv/bin/voltbus sql --db {result["db"]} "SELECT count(*) FROM spans"')


if __name__ == "__main__":
    main()
