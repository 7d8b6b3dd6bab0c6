"""``voltbus.connect(url)`` takes the rest of its bus settings from the environment, as every voltbus
process does: a runner started with ``VOLTBUS_NATS__NAMESPACE`` and a script connecting by URL meet."""

from __future__ import annotations

import pytest

import voltbus
from voltbus.services.settings import NatsSettings
from voltbus.store import connect


async def test_connect_by_url_uses_the_namespace_from_the_environment(
    nats_settings: NatsSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOLTBUS_NATS__NAMESPACE", nats_settings.namespace)
    by_url = await voltbus.connect(nats_settings.url)
    by_settings = await connect(settings=nats_settings)
    try:
        assert by_url.topology.namespace == nats_settings.namespace
        rollout = await by_url.enqueue_rollout({"q": 1})
        seen = await by_settings.get_rollout_by_id(rollout.rollout_id)
        assert seen is not None and seen.input == {"q": 1}
    finally:
        await by_url.close()
        await by_settings.close()
