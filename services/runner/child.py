"""The process an isolated rollout runs in: reads its job on stdin, runs the rollout, exits.

It never connects to the bus: its store is a ``PipeStore`` that sends each write to the runner."""

from __future__ import annotations

import asyncio
import sys

import msgspec

from voltbus.services.clients.agent.global_spans import route_global_spans
from voltbus.services.clients.agent.instrument import instrument_openai
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, set_active_tracer
from voltbus.services.log import configure_logging

from .execute import run_rollout
from .isolate import ChildJob
from .loader import load_agent
from .pipe import PipeStore


async def main(job: ChildJob) -> None:
    """Run the job's rollout with a tracer whose spans go to the runner through the pipe."""
    agent = load_agent(job.agent)
    store = PipeStore(job.requests_fd, job.replies_fd, job.limits)
    tracer = LogTracer(store)
    set_active_tracer(tracer)
    instrument_openai(tracer)
    route_global_spans()
    try:
        await run_rollout(store, tracer, agent, job.rollout, key=job.key, resources=job.resources)  # type: ignore[arg-type]
    finally:
        clear_active_tracer()
        tracer.shutdown()
        await store.close()


if __name__ == "__main__":
    configure_logging()
    asyncio.run(main(msgspec.json.decode(sys.stdin.buffer.read(), type=ChildJob)))
