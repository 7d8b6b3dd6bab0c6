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

import argparse
import importlib.util
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from voltbus.model import Segment, build_tiny_model, build_tokenizer, save_model_dir, train_on_samples

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("voltbus_example_sql_agent", HERE / "agent.py")
assert _spec is not None and _spec.loader is not None
agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agent)
data = agent.data

CONFUSION = 0.4
"""Share of warm-start pairs whose SQL is the twin question's."""


def pair(rng: random.Random) -> list[Segment]:
    """One warm-start sample: a question and its SQL, or its twin's SQL."""
    index, value = data.question(rng)
    question, _ = data.render(index, value)
    _, sql = data.render(data.twin(index) if rng.random() < CONFUSION else index, value)
    return [(agent.prompt(question), False), (f"{sql}</s>", True)]


def build(out: Path, steps: int, seed: int = 0, say: Callable[[str], None] = print) -> Path:
    """Warm-start a fresh model for ``steps`` steps and write it to ``out``."""
    tok = build_tokenizer()
    model = build_tiny_model(seed)
    loss = train_on_samples(model, tok, pair, steps=steps, batch=64, lr=3e-3, seed=seed, progress=say)
    say(f"last loss {loss:.3f}")
    return save_model_dir(model, tok, out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "model")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier on 2 shared cores
    started = time.monotonic()
    path = build(args.out, args.steps, args.seed)
    print(f"wrote {path} in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
