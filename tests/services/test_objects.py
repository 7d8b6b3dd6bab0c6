"""Weights kept in the bus's object store: stored, fetched once per digest, refused on a wrong digest."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.objects import ObjectMissing
from voltbus.services.settings import NatsSettings

from ..conftest import start_server, wait_for


async def test_weights_round_trip_through_the_bus(eventlog: EventLog, tmp_path: Path) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB: more than one NATS message
    source = tmp_path / "model.safetensors"
    source.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    uri = await eventlog.put_weights("run-1/v2.safetensors", source)
    assert uri == f"nats-obj://{eventlog.weights_bucket}/run-1/v2.safetensors"
    local = await eventlog.fetch_weights(uri, tmp_path / "cache", digest)
    assert local.read_bytes() == data and local.name == f"{digest}.safetensors"
    assert await eventlog.fetch_weights(uri, tmp_path / "cache", digest) == local  # kept: not fetched again
    with pytest.raises(ObjectMissing, match="sha256"):
        await eventlog.fetch_weights(uri, tmp_path / "other", "0" * 64)
    with pytest.raises(ObjectMissing, match="no such object"):
        await eventlog.fetch_weights(f"nats-obj://{eventlog.weights_bucket}/nope", tmp_path / "c2", digest)


@pytest.mark.timeout(60)
async def test_a_put_cut_off_by_a_restart_is_made_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The learner's checkpoint upload died with nats' timeout when nats-server was killed under it (kill -9 suite)."""
    server = start_server(tmp_path / "nats")
    settings = NatsSettings(url=server.url, namespace="objects", request_timeout_s=1.0)
    log = await EventLog.connect(settings)
    try:
        await log.put_weights("warm.bin", b"first")  # the bucket exists
        server.kill()
        put = asyncio.create_task(log.put_weights("run-1/checkpoint-0.tar", b"x" * 300_000))
        await wait_for(lambda: "storing it again" in caplog.text, 30, "a put that failed and is made again")
        server.start()
        uri = await asyncio.wait_for(put, 30)
        data = b"x" * 300_000
        local = await log.fetch_weights(uri, tmp_path / "cache", hashlib.sha256(data).hexdigest(), ".tar")
        assert local.read_bytes() == data
    finally:
        await log.close()
        server.stop()
