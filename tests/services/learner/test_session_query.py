"""The learner's SQL query outlives a projector restart: it waits for the projector to answer again
(found by the kill -9 fault suite, where a learner died when its query met a restarting projector)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from voltbus.services.learner.session import Session
from voltbus.services.projector.app import run as run_projector
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import connect

from ...conftest import free_port, wait_for


async def test_a_query_waits_for_a_projector_that_is_not_up_yet(
    nats_settings: NatsSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    projector = ProjectorSettings(port=port, url=f"http://127.0.0.1:{port}", db=tmp_path / "p.duckdb")
    settings = Settings(nats=nats_settings, projector=projector)
    store = await connect(settings=nats_settings)
    session = Session(store, "run-q", projector)
    caplog.set_level(logging.WARNING, "voltbus.services.learner.session")
    query = asyncio.create_task(session.query("SELECT 42 AS answer", timeout=60))
    stop, ready = asyncio.Event(), asyncio.Event()
    try:
        await wait_for(lambda: "no projector answers" in caplog.text, what="a query refused by the missing projector")
        running = asyncio.create_task(run_projector(settings, stop, ready))
        table = await asyncio.wait_for(query, 60)
        assert table.to_pylist() == [{"answer": 42}]
    finally:
        stop.set()
        await session.close()
        await store.close()
    await running
