"""A store client on the session's nats-server, in a fresh namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A connected store client."""
    client = await connect(settings=nats_settings)
    yield client
    await client.close()
