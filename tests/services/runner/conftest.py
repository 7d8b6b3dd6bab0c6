"""A runner against the session's nats-server, resources published, and helpers to read results."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.services.settings import NatsSettings, RunnerSettings, Settings
from voltbus.store import Store, connect

from .calc_agent import UNSTUCK

RESOURCES = {
    "main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model="tiny-calc"),
    "prompt": PromptTemplate(template="Q: {question}\nA:", engine="f-string"),
}


@pytest.fixture(autouse=True)
def unstuck() -> Iterator[None]:
    """The stuck agent's first attempts stay stuck during a test and end after it (no thread left sleeping)."""
    UNSTUCK.clear()
    yield
    UNSTUCK.set()


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A store client with the calc agent's resources published."""
    client = await connect(settings=nats_settings)
    await client.add_resources(RESOURCES)
    yield client
    await client.close()


def runner_settings(nats: NatsSettings, **runner: object) -> Settings:
    """Settings for a runner in the test's namespace (fast claims and heartbeats unless ``runner`` says otherwise)."""
    return Settings(nats=nats, runner=RunnerSettings(**{"claim_wait_s": 0.2, "heartbeat_s": 0.2, **runner}))  # type: ignore[arg-type]
