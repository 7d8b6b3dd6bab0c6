"""A step's training rows read while some are still on the way (issue 28: a step trained on 92 of 128 rollouts
while the projection had rows for all of them later): the learner waits for them with a deadline, and names
why the rollouts it leaves out have no rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest

from tests.projections.workload import telemetry
from voltbus.schemas.spans import ModelCalled
from voltbus.services.learner.grpo.rows import batch_rows
from voltbus.services.learner.session import Session
from voltbus.services.projector.app import run
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store, connect

from ...conftest import free_port, running


class ReadOnce(Session):
    """A session that tells when its first read of the rows is done (the test's condition, not a fake)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read = asyncio.Event()

    async def query(self, sql: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> pa.Table:
        table = await super().query(sql, params, timeout)
        self.read.set()
        return table


@asynccontextmanager
async def session_with_projector(nats: NatsSettings, db: Path) -> AsyncIterator[ReadOnce]:
    port = free_port()
    projector = ProjectorSettings(db=db, port=port, url=f"http://127.0.0.1:{port}")
    async with running(run, Settings(nats=nats, projector=projector), within=30):
        store = await connect(settings=nats)
        session = ReadOnce(store, "run-rows", projector)
        try:
            yield session
        finally:
            await session.close()
            await store.close()


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    client = await connect(settings=nats_settings)
    yield client
    await client.close()


async def ended(store: Store, n: int) -> list[tuple[str, str]]:
    """``n`` rollouts claimed and succeeded, with no telemetry yet: (rollout id, attempt id) each."""
    rollouts = [await store.enqueue_rollout({"q": i}, mode="train") for i in range(n)]
    out = []
    for _ in rollouts:
        claimed = await store.dequeue_rollout(worker_id="w")
        assert claimed is not None
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
        out.append((claimed.rollout_id, claimed.attempt.attempt_id))
    return out


def calls(rid: str, aid: str, tokens: bool = True) -> list[object]:
    """A span, a model call (with token ids, or without) and a reward of one attempt."""
    events = telemetry(rid, aid, 1)
    if not tokens:
        events = [
            msgspec.structs.replace(e, prompt_ids=[], response_ids=[], logprobs=[]) if isinstance(e, ModelCalled) else e
            for e in events
        ]
    return events


async def test_rows_that_arrive_after_the_read_are_waited_for(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    async with session_with_projector(nats_settings, tmp_path / "p.duckdb") as session:
        done = await ended(store, 4)
        for rid, aid in done[:2]:
            await store.log.publish_spans(calls(rid, aid))
        notes: list[str] = []

        async def late() -> None:  # the other half's model calls reach the bus once the rows were read
            await session.read.wait()
            for rid, aid in done[2:]:
                await store.log.publish_spans(calls(rid, aid))

        arriving = asyncio.create_task(late())
        records, counts = await batch_rows(session, 3, [r for r, _ in done], 60.0, notes.append, grace_s=60.0)
        await arriving
    assert sorted({r["rollout_id"] for r in records}) == sorted(r for r, _ in done)
    assert counts["rollouts_rows_late"] == 2 and notes == []


async def test_rollouts_without_rows_are_left_out_with_their_cause(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    async with session_with_projector(nats_settings, tmp_path / "p.duckdb") as session:
        done = await ended(store, 4)
        await store.log.publish_spans(calls(*done[0]))
        await store.log.publish_spans(calls(*done[1], tokens=False))  # e.g. the gateway's unscoped endpoint
        notes: list[str] = []
        records, counts = await batch_rows(session, 5, [r for r, _ in done], 30.0, notes.append)
    assert {r["rollout_id"] for r in records} == {done[0][0]}
    assert counts["rollouts_without_calls"] == 2 and counts["rollouts_without_token_ids"] == 1
    assert counts["rollouts_rows_not_ready"] == 0
    [note] = notes
    assert note.startswith("warning: step 5 trains without 3 of its 4 rollouts: 2 recorded no model call")
    assert "1 have model calls without token ids (the agent used the gateway's unscoped endpoint" in note
