"""A runner's span flush without the bus: OpenTelemetry spans of the store-benchmark agent to checked event bytes.

    python -m tests.benchmarks.bench_spans [--rollouts N] [--reps N]

The agent (``store_agent.py``, no sleeps) runs ``--rollouts`` rollouts under a LogTracer that never
publishes; the ended spans are then converted as ``LogTracer.flush`` converts them: ``span_from_otel``,
``events_of`` (size limits, reward events) and ``codec.encode_checked`` of each event. Raw = only
``codec.encode`` of the same events (the bytes have to be made). No bus, no DuckDB: this is the
per-span Python work a runner adds to its agent's.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from tests.benchmarks import store_agent
from tests.benchmarks.bench_eventlog import Figure, Run, summarize, table
from voltbus.schemas import codec
from voltbus.schemas.resources import LLM
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.clients.store.spans import events_of, span_from_otel
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, set_active_tracer
from voltbus.services.settings import NatsSettings

LIMITS = NatsSettings()


def ended_spans(rollouts: int) -> list[tuple[str, str, Any]]:
    """The agent's spans for ``rollouts`` tasks, as the tracer's collector queues them."""

    class NoStore:
        settings = LIMITS

    tracer = LogTracer(NoStore())
    store_agent.configure(4, 0.0)
    resources = {"llm": LLM(endpoint="http://localhost/v1", model="m")}

    async def agents() -> None:
        for i in range(rollouts):
            with tracer.attempt(f"ro-{i}", f"at-{i}"):
                await store_agent.agent.rollout_async(f"task-{i}", resources=resources, rollout=None)  # type: ignore[arg-type]

    set_active_tracer(tracer)
    try:
        asyncio.run(agents())
    finally:
        clear_active_tracer()
        tracer.shutdown()
    tracer._drain()
    return [(rid, aid, s) for rid, queued in tracer.pending.items() for aid, s in queued]


def convert(spans: list[tuple[str, str, Any]]) -> tuple[Run, list[Any]]:
    start = time.perf_counter()
    records = [span_from_otel(s, rid, aid, i + 1) for i, (rid, aid, s) in enumerate(spans)]
    events = events_of(records, LIMITS)
    data = [codec.encode_checked(e) for e in events]
    seconds = time.perf_counter() - start
    assert len(data) >= len(spans)
    return Run(len(spans), seconds), events


def encode_only(events: list[Any], spans: int) -> Run:
    start = time.perf_counter()
    for e in events:
        codec.encode(e)
    return Run(spans, time.perf_counter() - start)


def run(rollouts: int = 300, reps: int = 5) -> list[Figure]:
    spans = ended_spans(rollouts)
    events = convert(spans)[1]
    ours: list[Run] = []
    raws: list[Run] = []
    for rep in range(reps):  # alternating which side goes first
        sides = [lambda: ours.append(convert(spans)[0]), lambda: raws.append(encode_only(events, len(spans)))]
        for side in sides if rep % 2 == 0 else reversed(sides):
            side()
    note = f"span_from_otel + events_of + encode_checked vs encode alone; {len(spans)} spans of {rollouts} rollouts"
    return [summarize("flush_convert", ours, raws, note)]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_spans", description=__doc__.split("\n")[0])
    p.add_argument("--rollouts", type=int, default=300, help="agent rollouts whose spans are converted (%(default)s)")
    p.add_argument("--reps", type=int, default=5, help="runs per side; medians (%(default)s)")
    a = p.parse_args(argv)
    figures = run(a.rollouts, a.reps)
    print(table(figures))
    for f in figures:
        print(f"{f.case}: {1e6 / f.rate:.1f} µs per span, encode alone {1e6 / f.raw_rate:.1f}")


if __name__ == "__main__":
    import logging

    logging.getLogger("opentelemetry.attributes").setLevel(logging.ERROR)  # the agent's wide spans hit OTel's cap
    main()
