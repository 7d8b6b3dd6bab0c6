"""Weights kept in the bus's object store: stored, fetched once per digest, refused on a wrong digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.objects import ObjectMissing


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
