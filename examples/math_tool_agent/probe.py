"""What a policy does with the tool, in-process (no bus): how often it calls the tool, how often the call
copies the question exactly, and its reward, sampled at temperature 1 on the 200 problems of seed 1.

    .venv/bin/python examples/math_tool_agent/probe.py examples/math_tool_agent/model
    .venv/bin/python examples/math_tool_agent/probe.py /tmp/mt/<run_id>/step-39    # a checkpoint of run.py
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

from voltbus.model import load_model_dir

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("voltbus_example_math_tool_agent", HERE / "agent.py")
assert _spec is not None and _spec.loader is not None
agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agent)


def sample(model: torch.nn.Module, tok, prompts: list[str], max_tokens: int) -> list[str]:
    """One sampled line per prompt (cut at the newline or ``</s>``), left-padded into one batch."""
    encoded = [tok(p).input_ids for p in prompts]
    width = max(len(e) for e in encoded)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in encoded])
    out = model.generate(
        input_ids=ids,
        attention_mask=(ids != tok.pad_token_id).long(),
        max_new_tokens=max_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return [tok.decode(row).replace("<pad>", "").split("</s>")[0].split("\n")[0] for row in out[:, width:].tolist()]


def probe(model_dir: Path, count: int = 200, seed: int = 0) -> dict[str, float]:
    """Tool use, exact tool calls (of those made) and reward of ``count`` sampled rollouts."""
    torch.manual_seed(seed)
    model, tok = load_model_dir(model_dir)
    tasks = agent.tasks(count, seed=1)
    firsts = sample(model, tok, [f"Q:{t['question']}\n" for t in tasks], 20)
    answers = {i: agent.answer_of(f) for i, f in enumerate(firsts)}
    tool = [i for i, f in enumerate(firsts) if agent.TOOL_CALL.fullmatch(f)]
    follow = [f"Q:{tasks[i]['question']}\n{firsts[i]}\n={agent.calc(firsts[i][5:-1])}\n" for i in tool]
    for i, line in zip(tool, sample(model, tok, follow, 8) if tool else [], strict=True):
        answers[i] = agent.answer_of(line)
    exact = sum(firsts[i] == f"calc({tasks[i]['question']})" for i in tool)
    right = sum(answers[i] == str(t["answer"]) for i, t in enumerate(tasks))
    return {"tool_use": len(tool) / count, "exact_calls": exact / max(1, len(tool)), "reward": right / count}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    result = probe(parser.parse_args().model_dir)
    print(", ".join(f"{k} {v:.2f}" for k, v in result.items()))
