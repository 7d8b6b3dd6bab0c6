"""Build the example's starting policy: a fresh tiny Llama warm-started on templated question/SQL pairs.

For 40% of the pairs the SQL is that of the question's twin (``oldest`` answered with ``min(age)``,
``over`` with ``<``, ``how many`` with ``select name``, ...), so the starting policy writes valid SQL
with the right table, columns and values but picks the wrong one of the twins about 40% of the time;
GRPO, rewarded by the query's result, has to learn which twin each question means. The question is
context (no loss on it).

    .venv/bin/python examples/sql_agent/build_model.py                  # writes examples/sql_agent/model
    .venv/bin/python examples/sql_agent/build_model.py --out /tmp/m --steps 20
"""

from __future__ import annotations

import random
from pathlib import Path

from voltbus.model import Segment
from voltbus.model.sft import build_main
from voltbus.trainer.example import load_module

HERE = Path(__file__).resolve().parent
agent = load_module(HERE / "agent.py", "voltbus_example_sql_agent")
data = agent.data

CONFUSION = 0.4
"""Share of warm-start pairs whose SQL is the twin question's."""


def pair(rng: random.Random) -> list[Segment]:
    """One warm-start sample: a question and its SQL, or its twin's SQL."""
    index, value = data.question(rng)
    question, _ = data.render(index, value)
    _, sql = data.render(data.twin(index) if rng.random() < CONFUSION else index, value)
    return [(agent.prompt(question), False), (f"{sql}</s>", True)]


def main(argv: list[str] | None = None) -> Path:
    return build_main(__doc__, pair, HERE / "model", 600, argv)


if __name__ == "__main__":
    main()
