"""What a policy writes, in-process (no bus): the share of right, wrong (valid but another result, mostly
the twin's query) and invalid queries, sampled at temperature 1 on the 200 questions of seed 1.

    .venv/bin/python examples/sql_agent/probe.py examples/sql_agent/model
    .venv/bin/python examples/sql_agent/probe.py /tmp/sql/<run_id>/step-39    # a checkpoint of run.py
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

from voltbus.model import load_model_dir

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("voltbus_example_sql_agent", HERE / "agent.py")
assert _spec is not None and _spec.loader is not None
agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agent)


def probe(model_dir: Path, count: int = 200, seed: int = 0) -> dict[str, float]:
    """Shares of right, wrong and invalid queries over ``count`` sampled answers."""
    torch.manual_seed(seed)
    model, tok = load_model_dir(model_dir)
    tasks = agent.data.tasks(count, seed=1)
    encoded = [tok(agent.prompt(t["question"])).input_ids for t in tasks]
    width = max(len(e) for e in encoded)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in encoded])
    out = model.generate(
        input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), max_new_tokens=48, do_sample=True, top_k=None
    )
    counts = dict.fromkeys(("right", "wrong", "invalid"), 0.0)
    for task, row in zip(tasks, out[:, width:], strict=True):
        sql = tok.decode(row, skip_special_tokens=True)
        kind = "invalid" if agent.data.execute(sql) is None else "right" if agent.reward(sql, task["sql"]) else "wrong"
        counts[kind] += 1 / count
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    result = probe(parser.parse_args().model_dir)
    print(", ".join(f"{k} {v:.2f}" for k, v in result.items()))
