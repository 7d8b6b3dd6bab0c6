"""Run the Agent Lightning 0.3-style calculator agent once over its 20 tasks through voltbus (no learning).

Uses the bus at ``VOLTBUS_NATS__URL`` if one answers, else starts an embedded one; the coordinator,
projector, gateway and an 8-slot runner run in this process (``Trainer.dev``).

    .venv/bin/python examples/calc_agent/run.py
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from voltbus.schemas.resources import PromptTemplate
from voltbus.services.settings import Settings
from voltbus.trainer import Trainer

HERE = Path(__file__).resolve().parent
PROMPT = PromptTemplate(template="Compute {question} with the calculator.", engine="f-string")


def tasks() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (HERE / "tasks.jsonl").read_text().splitlines() if line.strip()]


def main(namespace: str | None = None) -> dict[str, Any]:
    from agent import agent  # examples/calc_agent/agent.py (this file's folder is on sys.path)

    settings = Settings()
    settings.nats.namespace = namespace or f"calc{uuid.uuid4().hex[:8]}"
    trainer = Trainer(n_runners=8, initial_resources={"prompt": PROMPT}, settings=settings)
    result = trainer.dev(agent, tasks())
    train = result["train"]
    print(f"calc_agent: {int(train['rollouts'])} rollouts, mean reward {train['mean_reward']:.2f}")
    return result


if __name__ == "__main__":
    main()
