"""Train the SQL agent of ``agent.py`` with GRPO through voltbus, on the CPU.

The whole system runs in this process (a bus if none answers at ``VOLTBUS_NATS__URL``, coordinator,
projector, CPU inference serving ``model/``, gateway, runner, learner). The 100 validation questions
are scored before and after training, with the same sampling seeds.

    .venv/bin/python examples/sql_agent/run.py                  # 40 GRPO steps of 16 tasks x 8 rollouts, lr 2e-4
    .venv/bin/python examples/sql_agent/run.py --steps 5 --budget-s 60
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voltbus.services.settings import Settings
from voltbus.trainer.example import example_settings, load_module, run_grpo_example

HERE = Path(__file__).resolve().parent
MODEL = HERE / "model"


def settings(namespace: str | None = None) -> Settings:
    return example_settings("sqlagent", namespace)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    agent = load_module(HERE / "agent.py", "voltbus_example_sql_agent")
    tasks = lambda n, seed: agent.data.tasks(n, seed=seed)  # noqa: E731
    # lr 2e-4: 5e-4 broke the SQL syntax within 4 steps
    return run_grpo_example("sql_agent", __doc__, MODEL, agent.sql_agent, tasks, settings(), lr=2e-4, argv=argv)


if __name__ == "__main__":
    main()
