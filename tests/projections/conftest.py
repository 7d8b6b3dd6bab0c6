"""Helpers to compare projections table by table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import pytest

from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect

TABLES = {
    "rollouts": "rollout_id",
    "attempts": "rollout_id, attempt_id",
    "spans": "seq, seq_index",
    "model_calls": "seq, seq_index",
    "rewards": "seq, seq_index",
    "attempt_activity": "rollout_id, attempt_id",
    "resources": "resources_id",
    "workers": "worker_id",
    "runs": "run_id",
    "steps": "seq",
    "step_batches": "seq",
    "run_checkpoints": "seq",
    "gateway_events": "seq",
    "quarantine": "stream, seq",
    "gaps": "stream, after_seq",
    "checkpoints": "stream",
    "triplets": "rollout_id, attempt_id, call_index, choice_index",
    "trajectories": "rollout_id, attempt_id, row_index",
    "training_attempts": "rollout_id, attempt_id",
    "training_meta": "settings_id",
}


def dump(db: Path | duckdb.DuckDBPyConnection) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows, ordered by key."""
    con = db if isinstance(db, duckdb.DuckDBPyConnection) else duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY {k}").fetchall() for t, k in TABLES.items()}
    finally:
        if con is not db:
            con.close()


async def projected(store: Store, path: Path) -> tuple[dict[str, int], dict[str, list[tuple[object, ...]]]]:
    """The log's ends and every table of a projection of the whole log into a fresh file at ``path``."""
    ends = await ends_at(store.log)
    projector = Projector(path)
    try:
        await project(projector, store.log, ends=ends, batch_size=500)
        return ends, dump(projector.con)
    finally:
        projector.close()


@pytest.fixture
async def store(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A connected store client in a fresh namespace."""
    client = await connect(settings=nats_settings)
    yield client
    await client.close()
