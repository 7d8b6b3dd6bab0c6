"""The ids the store makes sort by creation time (milliseconds, then random digits), on a real bus, and why: DuckDB
checkpoints of an index over time-ordered keys write a fraction of what random keys make them write."""

from __future__ import annotations

import re
import time
from pathlib import Path

import duckdb
import pytest

from voltbus.services.clients.store.base import ID_EPOCH, TIME_HEX, new_id
from voltbus.store import Store

SHAPE = re.compile(rf"^(ro-[0-9a-f]{{{TIME_HEX + 10}}}|at-[0-9a-f]{{{TIME_HEX + 8}}})$")


def made_at(id_: str) -> float:
    """The creation time an id carries, in seconds since the epoch (to the millisecond)."""
    return ID_EPOCH + int(id_.split("-", 1)[1][:TIME_HEX], 16) / 1000


def test_ids_sort_by_the_millisecond_they_were_made() -> None:
    times = [ID_EPOCH + 3600 * h + (s + 0.5) / 1000 for h in (0, 1, 24 * 400) for s in (0, 1, 999)]  # mid-millisecond
    ids = [new_id("ro", 10, now=t) for t in times]
    assert ids == sorted(ids)
    assert [made_at(i) for i in ids] == [pytest.approx(t - 0.0005, abs=1e-6) for t in times]


def test_ids_made_one_after_another_in_a_process_only_grow_and_never_repeat() -> None:
    ids = [new_id("at", 8) for _ in range(100_000)]  # many in each millisecond
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False))
    assert len(set(ids)) == len(ids)
    assert made_at(ids[0]) <= made_at(ids[-1]) <= time.time()


async def test_rollout_and_attempt_ids_carry_the_time_they_were_made(store: Store) -> None:
    before = time.time()
    queued = [await store.enqueue_rollout({"n": n}) for n in range(3)]
    claimed = await store.dequeue_many_rollouts(limit=3, worker_id="w-ids")
    after = time.time()
    ids = [r.rollout_id for r in queued] + [c.attempt.attempt_id for c in claimed]
    assert all(SHAPE.match(i) for i in ids), ids
    assert all(before - 0.001 <= made_at(i) <= after for i in ids)
    rollout_times = [made_at(r.rollout_id) for r in queued]
    assert rollout_times == sorted(rollout_times)  # enqueued one after another: never an earlier id later


def index_growth(path: Path, keys: str) -> int:
    """Blocks a checkpoint adds to a file holding 200,000 keys under a primary key, after 5,000 new keys."""
    con = duckdb.connect(str(path), config={"checkpoint_threshold": "1GB", "threads": 1})
    con.execute("CREATE TABLE t (id VARCHAR PRIMARY KEY)")
    con.execute(f"INSERT INTO t SELECT {keys} FROM range(200000) r(i)")
    con.execute("CHECKPOINT")
    before = con.execute("SELECT total_blocks FROM pragma_database_size()").fetchall()[0][0]
    for batch in range(50):  # commits of 100 new keys, as a projector's batches bring them
        con.execute(f"INSERT INTO t SELECT {keys} FROM range({200000 + 100 * batch}, {200100 + 100 * batch}) r(i)")
    con.execute("CHECKPOINT")
    after = con.execute("SELECT total_blocks FROM pragma_database_size()").fetchall()[0][0]
    con.close()
    return after - before


def test_a_checkpoint_after_new_time_ordered_keys_writes_a_fraction_of_what_random_keys_make_it_write(
    tmp_path: Path,
) -> None:
    ordered = index_growth(tmp_path / "ordered.duckdb", f"'ro-' || lpad(to_hex(i), {TIME_HEX}, '0') || 'a1b2c3d4'")
    random = index_growth(tmp_path / "random.duckdb", "'ro-' || substr(md5(i::VARCHAR), 1, 18)")
    assert random >= 8 and ordered * 3 <= random, (ordered, random)  # 6 against 38 blocks with DuckDB 2.0
