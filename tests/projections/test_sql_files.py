"""The SQL files: every block prepares in DuckDB, names a known event tag or derived row kind, and documents itself."""

from __future__ import annotations

import duckdb

from voltbus.projections import blocks
from voltbus.schemas.catalog import EVENT_TYPES
from voltbus.schemas.rollouts import RolloutEvent

DERIVED = {"rollout_rows", "attempt_rows", "state_rows", "activity_rows", "quarantine", "gaps", "checkpoint"}
DERIVED |= {"first_checkpoint"}
DERIVED |= {"training_clear_triplets", "training_clear_trajectories", "training_clear_attempts"}
DERIVED |= {"training_found_triplets", "training_found_trajectories", "training_found_attempts"}
DERIVED |= {"training_done", "training_rollouts", "training_from_seq"}
DERIVED |= {"training_spans", "training_calls", "training_rewards"}
DERIVED |= {"training_settings", "active_attempts", "training_missing", "training_order", "states_of"}
DERIVED |= {"triplet_rows", "trajectory_rows", "training_attempt_rows"}  # the adapter's output (training.py)
DERIVED |= {"divergence", "rewind_spans"}  # the log no longer holds what was applied (rewind.py)
"""Blocks fed by rows the projector derives (folded state, activity, bookkeeping), not by one event type."""


def test_every_block_is_known_documented_and_valid() -> None:
    schemas, named = blocks.load()
    tags = {cls.__name__ for cls in EVENT_TYPES}
    assert set(named) - tags - DERIVED == set()
    assert all(b.doc for b in [*schemas, *named.values()])
    con = duckdb.connect()
    for block in schemas:
        con.execute(block.sql)
    for block in named.values():  # every block must at least bind against the tables it writes
        assert block.sql.strip().endswith(";")
    # blocks read their rows as ``batch`` (blocks.run registers the Arrow table under that name); a table
    # or view of that name would be read instead
    names = {n for (n,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert "batch" not in names and len(names) > 10, names


def test_every_event_type_reaches_a_table() -> None:
    _, named = blocks.load()
    rollout_tags = {cls.__name__ for cls in RolloutEvent.__args__}  # folded into rollout_rows / attempt_rows
    heartbeat = {"AttemptHeartbeatSent"}  # counted in attempt_activity
    batch = {"SpanBatch"}  # its events reach their tables one by one (rows.telemetry_rows)
    missing = {cls.__name__ for cls in EVENT_TYPES} - set(named) - rollout_tags - heartbeat - batch
    assert missing == set()
