"""The runner's tracer: a flush the bus did not take is published again as it was, so nothing is lost and nothing
already stored is stored twice (its SpanBatch ids are those of the first try)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from voltbus.schemas.errors import PublishFailed
from voltbus.schemas.spans import SpanBatch, SpanRecorded
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect


@contextlib.asynccontextmanager
async def capped(nats_settings: NatsSettings) -> AsyncIterator[tuple[Store, LogTracer]]:
    """A store on a spans stream capped at 16 KiB (a refused publish fails at once), and a tracer on it."""
    settings = nats_settings.model_copy(
        update={"spans_max_bytes": 16 * 1024, "publish_retries": 0, "request_timeout_s": 1}
    )
    store = await connect(settings=settings)
    tracer = LogTracer(store)
    try:
        yield store, tracer
    finally:
        tracer.shutdown()
        await store.close()


def too_big(tracer: LogTracer, rollout_id: str, prefix: str) -> None:
    """Six spans of ~4 KiB of the rollout's attempt at-1: ~24 KiB in all, over the stream's 16 KiB."""
    with tracer.attempt(rollout_id, "at-1"):
        for i in range(6):
            with tracer.otel.start_as_current_span(f"{prefix}{i}") as span:
                span.set_attribute("text", "x" * 4000)


async def test_a_refused_flush_is_published_again_as_it_was(nats_settings: NatsSettings) -> None:
    async with capped(nats_settings) as (store, tracer):
        too_big(tracer, "ro-1", "step")
        with pytest.raises(PublishFailed):
            await tracer.flush()
        unsent = tracer.unsent["ro-1"]
        assert [e.name for e in unsent] == [f"step{i}" for i in range(6)] and not tracer.pending  # type: ignore[union-attr]
        stream = store.topology.spans_stream
        config = (await store.log.js.stream_info(stream)).config
        config.max_bytes = -1  # room again
        await store.log.js.update_stream(config)
        await store.log.publish_spans(unsent, batch=True)  # as if the refused try had been stored after all
        assert await tracer.flush("ro-1") == 6 and "ro-1" not in tracer.unsent  # at once: a flush of it alone
        messages = [m async for m in store.log.replay("spans")]
        assert len(messages) == 1 and isinstance(messages[0].event, SpanBatch)  # type: ignore[union-attr]
        stored = [e.event async for e in store.log.telemetry()]  # type: ignore[union-attr]
        assert stored == unsent and all(isinstance(e, SpanRecorded) for e in stored)
        assert [e.sequence_id for e in stored] == [1, 2, 3, 4, 5, 6]  # numbered once, by the first try


async def test_spans_the_bus_refuses_do_not_hold_back_other_rollouts(nats_settings: NatsSettings) -> None:
    async with capped(nats_settings) as (store, tracer):
        too_big(tracer, "ro-big", "big")
        with tracer.attempt("ro-small", "at-1"), tracer.otel.start_as_current_span("small"):
            pass
        with pytest.raises(PublishFailed):  # the refusal is still reported...
            await tracer.flush()
        stored = [e.event async for e in store.log.telemetry()]  # type: ignore[union-attr]
        assert [(e.rollout_id, e.name) for e in stored] == [("ro-small", "small")]  # ...after the others went out
        assert [e.name for e in tracer.unsent["ro-big"]] == [f"big{i}" for i in range(6)]  # type: ignore[union-attr]
        with tracer.attempt("ro-small", "at-1"), tracer.otel.start_as_current_span("later"):
            pass
        assert await tracer.flush() == 1  # the refused rollout is paused: not tried again at once...
        assert tracer.backoff["ro-big"][1] == 0.2
        with pytest.raises(PublishFailed):
            await tracer.flush("ro-big")  # ...but a flush of it alone (the end of its attempt) tries it
        assert tracer.backoff["ro-big"][1] == 0.4  # each refusal doubles the pause
