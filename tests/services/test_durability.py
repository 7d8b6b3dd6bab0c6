"""Durability settings as the server really runs them: fsync on every write, file storage, history that a
full stream refuses to extend rather than silently drops (docs/operations.md, "Durability")."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import PublishFailed, StreamConfigMismatch
from voltbus.schemas.resources import PromptTemplate, ResourcesPublished
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings


@pytest.mark.parametrize("sync_always", [True, False])
def test_the_embedded_server_fsyncs_every_write_unless_told(tmp_path: Path, sync_always: bool) -> None:
    monitor = free_port()
    bus = BusSettings(data_dir=tmp_path, port=0, monitor_port=monitor, sync_always=sync_always)
    server = NatsServer(bus, max_payload=1024 * 1024).start()
    try:
        config = httpx.get(f"http://127.0.0.1:{monitor}/varz", timeout=5).json()["jetstream"]["config"]
    finally:
        server.stop()
    assert config.get("sync_always", False) is sync_always  # what the running server reports, not our text
    assert config["store_dir"] == str((tmp_path / "jetstream").resolve())
    assert BusSettings().sync_always  # the default every service and `voltbus nats` start with


async def test_streams_are_file_backed_with_the_documented_settings(eventlog: EventLog) -> None:
    settings, topo, js = eventlog.settings, eventlog.topology, eventlog.js
    ctrl = (await js.stream_info(topo.control_stream)).config
    assert (ctrl.storage, ctrl.retention, ctrl.discard) == ("file", "limits", "new")
    assert (ctrl.deny_delete, ctrl.deny_purge, ctrl.allow_atomic, ctrl.allow_direct) == (True, True, True, True)
    assert ctrl.duplicate_window == settings.dedup_window_s == 1800
    assert (ctrl.max_age, ctrl.max_msgs, ctrl.max_bytes) == (0, -1, settings.control_max_bytes)
    assert ctrl.persist_mode in (None, "default")  # every control write is in the fsynced path
    spans = (await js.stream_info(topo.spans_stream)).config
    assert (spans.storage, spans.discard, spans.persist_mode) == ("file", "new", "async")
    assert spans.duplicate_window == settings.spans_dedup_window_s and spans.max_age == 0
    for name in (topo.counters_stream, topo.advisories_stream):
        assert (await js.stream_info(name)).config.storage == "file"


def _resources(n: int) -> ResourcesPublished:
    prompt = PromptTemplate(template="x" * 2000)
    return ResourcesPublished(
        event_id=derive_id("limit", n),
        resources_id=f"res-{n}",
        name="p",
        version=n,
        resources={"p": prompt},
        created_at=n,
    )


async def test_a_full_control_stream_refuses_appends_and_keeps_its_history(nats_settings: NatsSettings) -> None:
    tight = nats_settings.model_copy(update={"control_max_bytes": 32 * 1024, "publish_retries": 0})
    log = await EventLog.connect(tight)
    try:
        kept = 0
        with pytest.raises(PublishFailed, match="maximum bytes"):
            for n in range(1, 100):
                await log.append([_resources(n)])
                kept = n
        versions = [e.event.version async for e in log.replay() if isinstance(e, Envelope)]  # type: ignore[union-attr]
        assert 0 < kept < 99 and versions == list(range(1, kept + 1))  # nothing dropped to make room
    finally:
        await log.close()


async def test_spans_sync_creates_an_fsynced_spans_stream_and_refuses_the_other_mode(eventlog: EventLog) -> None:
    synced = eventlog.settings.model_copy(update={"namespace": eventlog.settings.namespace + "s", "spans_sync": True})
    log_ = await EventLog.connect(synced)
    try:
        spans = (await log_.js.stream_info(log_.topology.spans_stream)).config
        assert spans.persist_mode in (None, "default")  # acknowledged only once written, like control
    finally:
        await log_.close()
    refused = eventlog.settings.model_copy(update={"spans_sync": True})  # the fixture's stream is async
    with pytest.raises(StreamConfigMismatch, match="persist_mode"):
        await EventLog.connect(refused)
