"""What every GRPO example's ``run.py`` shares: load the example's modules from its folder, settings in
a fresh namespace, and the usual command line (steps, budget, batch shape, lr, weights dir,
validation size) that trains through the whole system in this process, validating before and after,
and ends with one line."""

from __future__ import annotations

import argparse
import importlib.util
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from voltbus.services.settings import Settings


def load_module(path: Path, name: str) -> ModuleType:
    """A module from a file outside any package (an example's ``agent.py``), under a unique ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_settings(prefix: str, namespace: str | None = None) -> Settings:
    """Settings from the environment, in ``namespace`` or a fresh ``<prefix><hex>`` one."""
    s = Settings()
    s.nats.namespace = namespace or f"{prefix}{uuid.uuid4().hex[:8]}"
    return s


def run_grpo_example(
    name: str,
    doc: str | None,
    model_dir: Path,
    agent: Any,
    tasks: Callable[[int, int], Sequence[Any]],
    settings: Settings,
    lr: float = 5e-4,
    argv: list[str] | None = None,
    train_count: int = 400,
    defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Parse the example's flags, train ``agent`` on ``tasks(train_count, seed=0)`` and validate on
    ``tasks(--val, seed=1)`` before and after; print and return the result. ``defaults``: the example's own
    flag defaults (``{"steps": 30, "budget_s": 420}``)."""
    from . import GRPO, Trainer

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--budget-s", type=float, default=None, help="stop training after this many seconds")
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--weights-dir", type=Path, default=None, help="keep each step's weights here")
    parser.add_argument("--val", type=int, default=100, help="validation tasks (scored before and after)")
    parser.set_defaults(**(defaults or {}))
    args = parser.parse_args(argv)
    algo = GRPO(
        model_dir=model_dir,
        steps=args.steps,
        time_budget_s=args.budget_s,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        **({"weights_dir": args.weights_dir} if args.weights_dir else {}),
    )
    started = time.monotonic()
    trainer = Trainer(algorithm=algo, n_runners=64, settings=settings)
    result = trainer.fit(agent, tasks(train_count, 0), tasks(args.val, 1))
    curve = [round(m["reward_mean"], 3) for m in result["steps"]]
    before, after = result["before"]["mean_reward"], result["after"]["mean_reward"]
    print(
        f"{name}: validation reward {before:.3f} -> {after:.3f} after {len(curve)} GRPO steps "
        f"(sampled reward per step {curve}); {time.monotonic() - started:.0f}s; "
        f"run {result['run_id']} in namespace {result['namespace']}"
    )
    return result
