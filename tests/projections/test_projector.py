"""The projector on a real bus and real DuckDB files: live equals rebuilt, time travel, poison, gaps."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import duckdb
import pytest

from voltbus.schemas.rollouts import AttemptStarted
from voltbus.services.eventlog import Envelope
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import PROJECTION_VERSION, Projector
from voltbus.services.settings import ProjectorSettings
from voltbus.store import Store

from .conftest import dump
from .workload import write

THREADS = "SELECT current_setting('threads')"


async def build(store: Store, path: Path, to_seq: int | None = None) -> dict[str, list[tuple[object, ...]]]:
    projector = Projector(path)
    try:
        await project(projector, store.log, ends=await ends_at(store.log, to_seq=to_seq), batch_size=50)
        return dump(projector.con)
    finally:
        projector.close()


async def test_live_projection_equals_a_full_rebuild(store: Store, tmp_path: Path) -> None:
    live = Projector(tmp_path / "live.duckdb")
    stop, advanced = asyncio.Event(), asyncio.Event()
    following = asyncio.create_task(
        project(live, store.log, stop=stop, batch_size=7, max_wait=0.01, progress=lambda *_: advanced.set())
    )
    await write(store, 40)  # events arrive while the projector follows the log
    await store.log.js.publish(store.topology.rollout_events("ro-poison"), b"\xffnot json")
    ends = await ends_at(store.log)
    async with asyncio.timeout(20):
        while live.positions != ends:
            await advanced.wait()
            advanced.clear()
    stop.set()
    await following
    live_tables = dump(live.con)
    live.close()
    rebuilt = await build(store, tmp_path / "rebuilt.duckdb")
    assert rebuilt == live_tables
    assert {r[1] for r in live_tables["rollouts"]} >= {"queuing", "preparing", "succeeded", "requeuing", "cancelled"}
    assert len(live_tables["spans"]) == len(live_tables["model_calls"]) == len(live_tables["rewards"]) == 30
    with duckdb.connect(str(tmp_path / "rebuilt.duckdb"), read_only=True) as con:
        query = "SELECT mode, rewritten, choices FROM model_calls WHERE choices::VARCHAR <> '[]' LIMIT 1"
        [row] = con.sql(query).fetchall()
    assert row[:2] == ("train", ["temperature"])
    assert [c["index"] for c in json.loads(row[2])] == [0, 1]
    with duckdb.connect(str(tmp_path / "rebuilt.duckdb"), read_only=True) as con:
        [(failed,)] = con.sql("SELECT error FROM model_calls WHERE status = 'error' LIMIT 1").fetchall()
    assert json.loads(failed)["type"] == "UpstreamTimeout"
    assert [(g[1], g[2]) for g in live_tables["gateway_events"]] == [("gw-w", "paused"), ("gw-w", "resumed")]
    versions = [json.loads(g[7]) if g[7] else None for g in live_tables["gateway_events"]]
    assert versions == [None, {"http://gpu-1:8000": "policy:2", "http://gpu-2:8000": None}]  # what each engine serves
    assert [q[:2] for q in live_tables["quarantine"]] == [("control", ends["control"])]
    assert dict((s, q) for s, q, _ in live_tables["checkpoints"]) == ends


async def test_replay_to_a_sequence_shows_the_world_as_it_was(store: Store, tmp_path: Path) -> None:
    await write(store, 12, tag="early")
    then = await ends_at(store.log)
    as_it_was = await build(store, tmp_path / "then.duckdb")
    await write(store, 12, tag="late")
    back_then = await build(store, tmp_path / "back.duckdb", to_seq=then["control"])
    assert back_then == as_it_was
    now = await build(store, tmp_path / "now.duckdb")
    assert len(now["rollouts"]) == 2 * len(as_it_was["rollouts"])


async def test_redelivered_batch_changes_nothing(store: Store, tmp_path: Path) -> None:
    await write(store, 8)
    projector = Projector(tmp_path / "p.duckdb")
    try:
        await project(projector, store.log, ends=await ends_at(store.log))
        before = dump(projector.con)
        again = [e async for e in store.log.replay("control")]
        projector.apply("control", again)
        spans_again = [e async for e in store.log.replay("spans")]
        projector.apply("spans", spans_again)
        assert dump(projector.con) == before
    finally:
        projector.close()


async def test_restart_resumes_at_the_checkpoint(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    await write(store, 10, tag="a")
    first = Projector(path)
    await project(first, store.log, ends=await ends_at(store.log))
    first.close()
    await write(store, 10, tag="b")
    second = Projector(path)  # a new process would do the same: load checkpoints and folds
    try:
        await project(second, store.log, ends=await ends_at(store.log))
        resumed = dump(second.con)
    finally:
        second.close()
    assert resumed == await build(store, tmp_path / "fresh.duckdb")


def test_a_gap_in_the_stream_is_recorded_and_logged_as_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="voltbus.projections")
    projector = Projector(tmp_path / "p.duckdb")
    try:
        event = AttemptStarted(event_id="e", rollout_id="r1", attempt_id="a1", at=1.0)
        items = [Envelope(seq=s, subject="vb.ro.r1.e", time=1.0, event=event) for s in (1, 2, 5)]
        projector.apply("control", items)  # type: ignore[arg-type]
        assert projector.con.execute("SELECT * FROM gaps").fetchall() == [("control", 2, 5)]
        assert projector.positions["control"] == 5
    finally:
        projector.close()
    errors = [(r.levelno, r.getMessage()) for r in caplog.records if "GAP" in r.getMessage()]
    assert errors == [(logging.ERROR, "GAP in control: after seq 2 came 5 (messages missing from the log)")]


def test_the_database_runs_with_the_threads_it_is_given(tmp_path: Path) -> None:
    for threads, expected in ((1, 1), (3, 3), (0, duckdb.connect(":memory:").execute(THREADS).fetchone()[0])):  # type: ignore[index]
        projector = Projector(tmp_path / f"t{threads}.duckdb", threads=threads)
        try:
            assert projector.con.execute(THREADS).fetchone() == (expected,)
            assert projector.con.cursor().execute(THREADS).fetchone() == (expected,)  # queries share it
        finally:
            projector.close()
    assert ProjectorSettings().duckdb_threads == 1


def test_an_older_database_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "p.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE projection_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("INSERT INTO projection_meta VALUES ('version', '0')")
        con.execute("CREATE TABLE rollouts (old_column INTEGER)")
    projector = Projector(path)
    try:
        version = projector.con.execute("SELECT value FROM projection_meta WHERE key = 'version'").fetchone()
        assert version == (str(PROJECTION_VERSION),)
        assert projector.positions == {"control": 0, "spans": 0}
    finally:
        projector.close()
    assert (tmp_path / "p.duckdb.v0.bak").exists()


@pytest.mark.parametrize("bad", [b"{not json", b'{"type":"EventFromTheFuture","event_id":"x"}'])
async def test_poison_goes_to_quarantine_and_does_not_block(store: Store, tmp_path: Path, bad: bytes) -> None:
    await store.log.js.publish(store.topology.rollout_events("ro-x"), bad)
    await write(store, 3)
    tables = await build(store, tmp_path / "p.duckdb")
    assert len(tables["quarantine"]) == 1 and tables["quarantine"][0][1] == 1
    assert len(tables["rollouts"]) == 3
