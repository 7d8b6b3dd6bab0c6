"""A real gateway (uvicorn, real bus) in front of the stub engine, and a started rollout to attribute to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from voltbus.schemas import ModelCalled
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import build_app
from voltbus.services.settings import GatewaySettings, NatsSettings, Settings
from voltbus.store import AttemptedRollout, Store, connect

from .stub_llm import StubControl, serve, stub_app


@dataclass
class Setup:
    """One gateway under test: its URL, the engine stub's control, and the started rollout."""

    url: str
    engine: StubControl
    rollout: AttemptedRollout

    @property
    def rid(self) -> str:
        return self.rollout.rollout_id

    @property
    def aid(self) -> str:
        return self.rollout.attempt.attempt_id


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A store client in the test's namespace."""
    client = await connect(settings=nats_settings)
    yield client
    await client.close()


GatewayFactory = Callable[..., Awaitable[Setup]]


@pytest.fixture
async def make_gateway(nats_settings: NatsSettings, store: Store) -> AsyncIterator[GatewayFactory]:
    """Start the stub engine and a gateway in front of it, with gateway settings overridden by keywords."""
    async with AsyncExitStack() as stack:

        async def make(upstream: str | None = None, **gateway: Any) -> Setup:
            engine = StubControl()
            engine_url = await stack.enter_async_context(serve(stub_app(engine)))
            cfg = GatewaySettings(upstream_url=upstream or f"{engine_url}/v1", **gateway)
            url = await stack.enter_async_context(serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on"))
            rollout = await store.start_rollout({"question": "2+2"}, mode="train")
            return Setup(url, engine, rollout)

        yield make


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> Setup:
    """A gateway with default settings."""
    return await make_gateway()


async def model_calls(eventlog: EventLog, count: int, timeout: float = 10.0) -> list[ModelCalled]:
    """The ModelCalled events on the spans stream, waiting (by following the log) until there are ``count``
    (a streamed call is recorded just after its last byte is sent)."""
    found: list[ModelCalled] = []
    replay = eventlog.replay("spans", follow=True)
    try:
        async with asyncio.timeout(timeout):
            async for item in replay:
                if isinstance(getattr(item, "event", None), ModelCalled):
                    found.append(item.event)  # type: ignore[union-attr]
                    if len(found) == count:
                        break
    except TimeoutError:
        pass
    finally:
        await replay.aclose()  # type: ignore[attr-defined]
    assert len(found) == count, f"expected {count} ModelCalled events, found {len(found)}"
    return found
