"""The task: evaluate a short arithmetic expression (``7 + 3 * 4``, ``9 / 4 - 2``) and reply with its
exact value, as a bare number, rounded to 2 decimals when it is not whole. The grader is strict, as
exact-match benchmarks are: the bare right number earns 1.0, the right number inside a sentence 0.5,
anything else 0.

>>> with_precedence("7 + 3 * 4"), left_to_right("7 + 3 * 4"), show(9 / 4 - 2)
(19.0, 40.0, '0.25')
>>> reward("19", "19"), reward("The result is 19.", "19"), reward("40", "19"), reward("3.5", "3.50")
(1.0, 0.5, 0.0, 1.0)
"""

from __future__ import annotations

import random
import re
from typing import Any

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
EXPRESSION = re.compile(r"\d+(?:\s*[-+*/]\s*\d+)+")
TOLERANCE = 0.006
"""How far a reply may be from the answer (the answer is rounded to 2 decimals)."""


def apply(op: str, a: float, b: float) -> float:
    """``a op b``."""
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else float("nan")}[op]


def pairs(expression: str) -> tuple[float, list[tuple[str, float]]]:
    """The first number and the (operator, number) pairs after it."""
    tokens = re.findall(r"\d+|[-+*/]", expression)
    return float(tokens[0]), [(op, float(n)) for op, n in zip(tokens[1::2], tokens[2::2], strict=True)]


def left_to_right(expression: str) -> float:
    """The value when every operator is applied in reading order (the careless way)."""
    value, rest = pairs(expression)
    for op, n in rest:
        value = apply(op, value, n)
    return value


def with_precedence(expression: str) -> float:
    """The value with ``*`` and ``/`` before ``+`` and ``-`` (the right way)."""
    first, rest = pairs(expression)
    terms, signs = [first], []
    for op, n in rest:
        if op in "*/":
            terms[-1] = apply(op, terms[-1], n)
        else:
            terms.append(n)
            signs.append(op)
    value = terms[0]
    for op, term in zip(signs, terms[1:], strict=True):
        value = apply(op, value, term)
    return value


def is_whole(value: float) -> bool:
    """True when ``value`` has no fraction (to the grader's tolerance)."""
    return abs(value - round(value)) < 1e-9


def show(value: float) -> str:
    """The answer as the grader writes it: a whole number, or 2 decimals."""
    return str(round(value)) if is_whole(value) else f"{value:.2f}"


def make_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` tasks ``{"expression", "answer"}`` from three numbers between 2 and 12, seeded: a third where
    reading order gives another value (``5 + 3 * 4``), a third with a fraction (``7 / 2 - 3``), a third
    drawn freely."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b, c = (rng.randint(2, 12) for _ in range(3))
        if i % 3 == 0:
            expression = f"{a} {rng.choice('+-')} {b} * {c}"
        elif i % 3 == 1:
            b = b if a % b else b + 1 if a % (b + 1) else 7  # a fraction
            expression = f"{a} / {b} {rng.choice('+-')} {c}"
        else:
            expression = f"{a} {rng.choice('+-*/')} {b} {rng.choice('+-*/')} {c}"
        tasks.append({"expression": expression, "answer": show(with_precedence(expression))})
    rng.shuffle(tasks)
    return tasks


def last_number(reply: str) -> float | None:
    """The last number written in ``reply``, or None."""
    numbers = NUMBER.findall(reply.replace(",", ""))
    return float(numbers[-1]) if numbers else None


def reward(reply: str, answer: str) -> float:
    """1.0 for the bare right number, 0.5 for the right number at the end of a sentence, else 0."""
    got = last_number(reply)
    if got is None or abs(got - float(answer)) > TOLERANCE:
        return 0.0
    return 1.0 if NUMBER.fullmatch(reply.strip()) else 0.5
