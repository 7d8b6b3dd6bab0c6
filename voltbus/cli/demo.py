"""The main job on embedded defaults: a bus (the configured one, or an embedded one), then the whole
system in one process (coordinator, projector, CPU inference, gateway, a 64-slot runner, learner)
training the arith_rl example's 1M-parameter policy with GRPO, ending with how much it improved.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from voltbus.schemas.errors import VoltbusError
from voltbus.services.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arith_rl"


def load_example() -> ModuleType:
    """The arith_rl example's agent module (from the repository's examples/ folder)."""
    path = EXAMPLE / "agent.py"
    if not path.is_file():
        raise VoltbusError(f"the demo needs the repository's examples/ folder ({path} not found)")
    spec = importlib.util.spec_from_file_location("voltbus_demo_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_demo(
    settings: Settings, steps: int, budget_s: float, tasks_per_step: int, group_size: int, say: Callable[[str], None]
) -> None:
    """Train the example's policy with GRPO through the whole system (at most ``steps`` steps, stopping
    after ``budget_s`` seconds of training) and say how much it improved."""
    from voltbus.trainer import GRPO, Trainer

    example = load_example()
    settings.nats.namespace = f"demo{uuid.uuid4().hex[:8]}"
    tasks = example.tasks()
    algo = GRPO(
        model_dir=EXAMPLE / "model",
        steps=steps,
        time_budget_s=budget_s,
        tasks_per_step=tasks_per_step,
        group_size=group_size,
        lr=5e-4,
    )
    say(
        f"training {EXAMPLE.name}: up to {steps} GRPO steps of {tasks_per_step} tasks x {group_size} rollouts, "
        f"for at most {budget_s:.0f}s"
    )
    started = time.monotonic()
    result = Trainer(algorithm=algo, n_runners=64, settings=settings, say=say).fit(example.arith_agent, tasks, tasks)
    curve = [m["reward_mean"] for m in result["steps"]]
    k = max(1, min(5, len(curve) // 3))
    first, last = sum(curve[:k]) / k, sum(curve[-k:]) / k
    before, after = result["before"]["mean_reward"], result["after"]["mean_reward"]
    say(
        f"greedy accuracy on the {len(tasks)} problems {before:.2f} -> {after:.2f}; sampled reward "
        f"{first:.2f} (first {k} steps) -> {last:.2f} (last {k}), {after - before:+.2f} / {last - first:+.2f} "
        f"after {len(curve)} steps; {time.monotonic() - started:.0f}s in all"
    )
    say(f"demo finished: run {result['run_id']} in namespace {result['namespace']}; every step is in the log")
