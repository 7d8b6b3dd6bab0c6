"""Agent Lightning 0.3's store-benchmark agent (``tests/benchmark/benchmark_store.py:make_agent``), on voltbus.

The agent is written as AL writes it, with only the import swapped: for ``randint(1, max_rounds)``
rounds it opens span ``agent{i}`` holding two nested spans ``round{i}_1`` and ``round{i}_2``. Each
nested span sleeps ``U(0, sleep)`` and carries a random nested dict of attributes, flattened (depth
1-3, breadth 2-6, keys 3-20 characters, string values 5-300 characters). One randomly chosen round
puts ``task=<task>`` on its ``round{i}_1``. After each round, with probability 0.5, it emits a reward
``U(0, 1)``. Then a span ``final`` with more attributes, and a final reward ``U(1, 2)``.

Two deliberate differences, neither changing the work done:
- The random generator is seeded from the task, so the benchmark knows each rollout's span count
  beforehand (``expected_spans``) and can count lost spans exactly. The values still differ per task.
- Random strings are hex from ``randbytes`` (C speed), so generating them costs little of the
  two cores; AL's helper is not in the stored sources, so its generator is not known.

With ``BENCH_AGL=agentlightning`` in the environment it imports ``agentlightning`` instead (Agent Lightning's side
of ``bench_al_pattern``). The scenario knobs come from the environment of the runner process (``BENCH_MAX_ROUNDS``,
``BENCH_SLEEP_S``), read when this module is imported, or from :func:`configure` in-process.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer as OtelTracer

if os.environ.get("BENCH_AGL") == "agentlightning":  # the same agent on Agent Lightning itself (bench_al_pattern)
    import agentlightning as agl
    from agentlightning.utils.otel import get_tracer as _al_tracer
else:
    import voltbus as agl  # was: import agentlightning as agl

    _al_tracer = None

MAX_ROUNDS = int(os.environ.get("BENCH_MAX_ROUNDS", "4"))
SLEEP_S = float(os.environ.get("BENCH_SLEEP_S", "0.1"))

_unexported = TracerProvider().get_tracer("store-bench")
"""An OpenTelemetry SDK tracer with no span processor: spans are built, then dropped (the no-store run)."""


def configure(max_rounds: int, sleep_s: float) -> None:
    """Set the scenario knobs in this process (the no-store run calls the agent in-process)."""
    global MAX_ROUNDS, SLEEP_S
    MAX_ROUNDS, SLEEP_S = max_rounds, sleep_s


def get_tracer() -> OtelTracer:
    """AL's ``agentlightning.utils.otel.get_tracer()``: OpenTelemetry's global API, whose provider the runner (or
    Agent Lightning's tracer) installs; with no store (no SDK provider installed) an SDK tracer that exports nothing.
    """
    if _al_tracer is not None:
        return _al_tracer()
    if isinstance(otel_trace.get_tracer_provider(), TracerProvider):  # a runner's: the spans reach its attempt
        return otel_trace.get_tracer("store-bench")
    return _unexported


def _text(rng: random.Random, low: int, high: int) -> str:
    n = rng.randint(low, high)
    return rng.randbytes((n + 1) // 2).hex()[:n]


def random_dict(rng: random.Random, depth: int, breadth: tuple[int, int]) -> dict[str, Any]:
    """A nested dict ``depth`` levels deep, ``breadth`` children per node, string leaves."""
    out: dict[str, Any] = {}
    for _ in range(rng.randint(*breadth)):
        key = _text(rng, 3, 20)
        out[key] = _text(rng, 5, 300) if depth <= 1 else random_dict(rng, depth - 1, breadth)
    return out


def flatten_dict(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        out.update(flatten_dict(v, key) if isinstance(v, dict) else {key: v})
    return out


def generate_attributes(rng: random.Random) -> dict[str, Any]:
    return flatten_dict(random_dict(rng, rng.randint(1, 3), (2, 6)))


def expected_spans(task: str, max_rounds: int) -> int:
    """How many spans the agent records for ``task`` (OpenTelemetry spans + reward spans).

    It makes the agent's random draws in the same order without running it.
    """
    rng = random.Random(task)
    rounds = rng.randint(1, max_rounds)
    rng.randint(0, rounds - 1)
    spans = 0
    for _ in range(rounds):
        for _nested in range(2):
            rng.random()  # the sleep
            generate_attributes(rng)
        spans += 3
        if rng.uniform(0, 1) < 0.5:
            rng.random()  # the reward
            spans += 1
    return spans + 2  # final, final reward


@agl.rollout
async def agent(task: str, llm: agl.LLM) -> None:
    """The benchmark agent (AL's ``make_agent`` body; ``llm`` is injected as in AL, never called)."""
    rng = random.Random(task)
    tracer = get_tracer()
    rounds = rng.randint(1, MAX_ROUNDS)
    selected_round = rng.randint(0, rounds - 1)

    for i in range(rounds):
        with tracer.start_as_current_span(f"agent{i}"):
            # Nested Span
            with tracer.start_as_current_span(f"round{i}_1") as span:
                await asyncio.sleep(rng.uniform(0.0, SLEEP_S))
                span.set_attributes(generate_attributes(rng))
                if i == selected_round:
                    span.set_attribute("task", task)

            # Nested Span
            with tracer.start_as_current_span(f"round{i}_2") as span:
                await asyncio.sleep(rng.uniform(0.0, SLEEP_S))
                span.set_attributes(generate_attributes(rng))

        if rng.uniform(0, 1) < 0.5:
            agl.emit_reward(rng.uniform(0.0, 1.0))

    # Final Span
    with tracer.start_as_current_span("final") as span:
        await asyncio.sleep(rng.uniform(0.0, SLEEP_S))
        span.set_attributes(generate_attributes(rng))

    agl.emit_reward(rng.uniform(1.0, 2.0))
