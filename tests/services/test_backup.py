"""Backup and restore on real servers: a restored log replays to the same projections, table by table;
history is never overwritten unless asked; a damaged backup is caught by its checksum."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import start_server
from tests.projections import training_workload, workload
from tests.projections.conftest import dump
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.connection import connect as connect_bus
from voltbus.services.ops.backup import BackupError, backup, list_streams
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.ops.restore import restore
from voltbus.services.projector.client import rebuild
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import Store, connect

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


def voltbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VOLTBUS, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    client = await connect(settings=nats_settings)
    yield client
    await client.close()


@pytest.fixture
def other_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A second, fresh nats-server with its own store directory."""
    server = start_server(tmp_path / "other-store")
    yield server
    server.stop()


async def replayed(nats: NatsSettings, db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every projection table rebuilt from the log by ``voltbus replay``'s function."""
    await rebuild(Settings(nats=nats), db, lambda _: None)
    return dump(db)


async def test_a_restored_log_replays_to_the_same_projections(
    store: Store, nats_settings: NatsSettings, other_server: NatsServer, tmp_path: Path
) -> None:
    await workload.write(store, 16)
    await training_workload.write(store, 6)
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(bytes(range(256)) * 1200)  # 300 KB: several object chunks
    uri = await store.log.put_weights("run-1/step-1.safetensors", weights)
    ns = nats_settings.namespace

    made = voltbus("backup", "--to", str(tmp_path / "bk"), "--nats-url", nats_settings.url, "--namespace", ns)
    assert made.returncode == 0, made.stderr
    assert "backed up 5 streams" in made.stdout
    restored = voltbus("restore", "--from", str(tmp_path / "bk"), "--nats-url", other_server.url, "--namespace", ns)
    assert restored.returncode == 0, restored.stderr

    copy = nats_settings.model_copy(update={"url": other_server.url})
    original = await replayed(nats_settings, tmp_path / "original.duckdb")
    again = await replayed(copy, tmp_path / "restored.duckdb")
    assert again == original
    assert len(original["rollouts"]) == 22 and len(original["triplets"]) > 0 and len(original["spans"]) > 0
    moved = await EventLog.connect(copy)
    try:
        path = await moved.fetch_weights(uri, tmp_path / "cache", hashlib.sha256(weights.read_bytes()).hexdigest())
        assert path.read_bytes() == weights.read_bytes()
        control, dispatch = moved.topology.control_stream, moved.topology.dispatch_consumer
        kept = await moved.js.consumer_info(control, dispatch)
        was = await store.log.js.consumer_info(control, dispatch)
        position = [(c.delivered.stream_seq, c.ack_floor.stream_seq, c.num_pending) for c in (kept, was)]
        assert position[0] == position[1] and position[0][0] > 0  # the runners' position in the queue came along
    finally:
        await moved.close()


async def test_restore_refuses_streams_that_hold_messages(store: Store, tmp_path: Path) -> None:
    await workload.write(store, 4)
    manifest = await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)
    control = store.topology.control_stream
    before = (await store.log.js.stream_info(control)).state.last_seq
    with pytest.raises(BackupError, match=f"refusing to restore over streams that hold messages: {control}"):
        await restore(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)
    await workload.write(store, 2, tag="after")  # the refusal changed nothing: the live log goes on
    assert (await store.log.js.stream_info(control)).state.last_seq > before
    await restore(store.log.nc, store.topology, tmp_path / "bk", lambda _: None, force=True)
    [saved] = [e for e in manifest["streams"] if e["name"] == control]  # type: ignore[attr-defined]
    assert (await store.log.js.stream_info(control)).state.last_seq == saved["state"]["last_seq"] == before


async def test_a_damaged_backup_is_refused_before_anything_is_written(
    store: Store, other_server: NatsServer, tmp_path: Path
) -> None:
    await workload.write(store, 4)
    await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)
    spans = tmp_path / "bk" / f"{store.topology.spans_stream}.snap"
    data = bytearray(spans.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    spans.write_bytes(bytes(data))
    ns = store.topology.namespace
    refused = voltbus("restore", "--from", str(tmp_path / "bk"), "--nats-url", other_server.url, "--namespace", ns)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"voltbus: error: backup file {spans} is corrupt: sha256" in refused.stderr
    copy = NatsSettings(url=other_server.url, namespace=ns)
    nc = await connect_bus(copy)
    try:
        assert await list_streams(nc, 5.0) == []  # nothing was written
    finally:
        await nc.close()


async def test_backup_refuses_a_directory_holding_a_backup(store: Store, tmp_path: Path) -> None:
    await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)
    with pytest.raises(BackupError, match="already holds a backup"):
        await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_single_server_backup_restores_into_a_three_node_cluster(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    from tests.test_cluster import retried, start_cluster

    await workload.write(store, 8)
    await backup(store.log.nc, store.topology, tmp_path / "bk", lambda _: None)
    (tmp_path / "cluster").mkdir()
    nodes = start_cluster(tmp_path / "cluster")
    try:
        urls = ",".join(n.url for n in nodes.values())
        cluster = nats_settings.model_copy(update={"url": urls, "replicas": 3})
        nc = await retried(lambda: connect_bus(cluster))
        try:
            await retried(lambda: list_streams(nc, 2.0))  # the cluster has elected its JetStream leader
            await restore(nc, store.topology, tmp_path / "bk", lambda _: None, replicas=3)
        finally:
            await nc.close()
        log = await retried(lambda: EventLog.connect(cluster))  # a service with replicas=3 accepts the streams
        try:
            spans = (await log.js.stream_info(log.topology.spans_stream)).config
            assert spans.num_replicas == 3 and spans.persist_mode in (None, "default")
        finally:
            await log.close()
        assert await replayed(cluster, tmp_path / "cluster.duckdb") == await replayed(nats_settings, tmp_path / "o.db")
    finally:
        for node in nodes.values():
            node.kill()
