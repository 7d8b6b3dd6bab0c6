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

import random
from pathlib import Path

from voltbus.model import Segment
from voltbus.model.sft import build_main
from voltbus.trainer.example import load_module

HERE = Path(__file__).resolve().parent


agent = load_module(HERE / "agent.py", "voltbus_example_math_tool_agent")


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


def main(argv: list[str] | None = None) -> Path:
    return build_main(__doc__, transcript, HERE / "model", 800, argv)


if __name__ == "__main__":
    main()
