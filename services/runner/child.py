"""The process an isolated rollout runs in: reads its job on stdin, runs the rollout, exits."""

from __future__ import annotations

import asyncio
import sys

import msgspec

from voltbus.agent.instrument import instrument_openai
from voltbus.agent.otel import LogTracer
from voltbus.agent.tracing import clear_active_tracer, set_active_tracer
from voltbus.services.log import configure_logging
from voltbus.services.settings import NatsSettings
from voltbus.store import connect

from .execute import run_rollout
from .isolate import ChildJob
from .loader import load_agent


async def main(job: ChildJob) -> None:
    """Run the job's rollout with this process's own connection and tracer."""
    agent = load_agent(job.agent)
    store = await connect(settings=NatsSettings.model_validate(job.nats), name="voltbus-isolated")
    tracer = LogTracer(store)
    set_active_tracer(tracer)
    instrument_openai(tracer)
    try:
        await run_rollout(store, tracer, agent, job.rollout, key=job.key)
    finally:
        clear_active_tracer()
        tracer.shutdown()
        await store.close()


if __name__ == "__main__":
    configure_logging()
    asyncio.run(main(msgspec.json.decode(sys.stdin.buffer.read(), type=ChildJob)))
