"""Build the example's starting policy: a fresh tiny Llama warm-started on transcripts of the tool format.

The warm-start transcripts teach the format, not the habit: half of them answer at once with a guess
(the model cannot multiply, so these are almost always wrong), the other half call the tool, and a
fifth of those calls miscopy one digit of the question (the tool then answers another problem). The
policy so made uses the tool about half of the time and is right about 40% of the time; GRPO has to
learn to call the tool, and to copy the question exactly. Tool output is context (no loss on it).

    .venv/bin/python examples/math_tool_agent/build_model.py            # writes examples/math_tool_agent/model
    .venv/bin/python examples/math_tool_agent/build_model.py --out /tmp/m --steps 20
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from voltbus.model import Segment, build_tiny_model, build_tokenizer, save_model_dir, train_on_samples

HERE = Path(__file__).resolve().parent


def load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("voltbus_example_math_tool_agent", HERE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agent = load_agent()


def miscopy(question: str, rng: random.Random) -> str:
    """``question`` with one digit changed (never a leading digit to 0)."""
    spots = [i for i, ch in enumerate(question) if ch.isdigit()]
    i = rng.choice(spots)
    first = i == 0 or not question[i - 1].isdigit()
    digit = rng.choice([d for d in "0123456789" if d != question[i] and not (first and d == "0")])
    return question[:i] + digit + question[i + 1 :]


def transcript(rng: random.Random) -> list[Segment]:
    """One warm-start sample: a direct guess, a correct tool call, or a miscopied tool call."""
    question, answer = agent.problem(rng)
    prompt: Segment = (f"Q:{question}\n", False)
    if rng.random() < 0.5:
        guess = rng.randint(10 ** (len(str(answer)) - 1), 10 ** len(str(answer)) - 1)
        return [prompt, (f"A:{guess}</s>", True)]
    expression = miscopy(question, rng) if rng.random() < 0.2 else question
    value = agent.calc(expression)
    return [prompt, (f"calc({expression})\n", True), (f"={value}\n", False), (f"A:{value}</s>", True)]


def build(out: Path, steps: int, seed: int = 0, say: Callable[[str], None] = print) -> Path:
    """Warm-start a fresh model for ``steps`` steps and write it to ``out``."""
    tok = build_tokenizer()
    model = build_tiny_model(seed)
    loss = train_on_samples(model, tok, transcript, steps=steps, batch=64, lr=3e-3, seed=seed, progress=say)
    say(f"last loss {loss:.3f}")
    return save_model_dir(model, tok, out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "model")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier on 2 shared cores
    started = time.monotonic()
    path = build(args.out, args.steps, args.seed)
    print(f"wrote {path} in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
