"""`voltbus replay` to a point in the past and on from a checkpoint, against a live projection of the same log:
a replay to sequence N or time T equals what the live projection showed when the log was at N (T), and
``--from-seq`` goes on with a copy whose checkpoint it names, or is refused before it touches anything."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import duckdb
import pytest

from voltbus.schemas.errors import InvalidCommand
from voltbus.services.projector.client import rebuild
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import PROJECTION_VERSION, Projector
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import EnqueueRolloutRequest, Store

from ..conftest import free_port, wait_for
from .conftest import dump, projected
from .test_projector_crash import health, projector_env, start
from .test_sql_cli import cli
from .workload import telemetry, write

Tables = dict[str, list[tuple[object, ...]]]
PROGRESS = re.compile(r"^voltbus: replay: [\d,]+/[\d,]+ events, [\d,]+/s, ETA \d+s$", re.M)
"""A progress line of `voltbus replay` (services/progress.py Meter): done/total, a rate and an ETA."""


def names(folder: Path) -> list[str]:
    """The files in ``folder``."""
    return sorted(p.name for p in folder.iterdir())


class Observed(NamedTuple):
    """What a live projection showed when the log ended with a first group of events."""

    then: dict[str, int]
    """The log's ends then."""
    tables: Tables
    """Every table of the live projection then."""
    cut: float
    """A wall-clock time after every message of the first group was stored, before any of the second."""


async def settled(store: Store, projector: Projector) -> dict[str, int]:
    """Wait until ``projector`` has applied everything the log holds now, the training rows of every ended
    attempt included (none held for telemetry), as a query of the live projection would; returns the ends."""
    ends = await ends_at(store.log)
    await wait_for(lambda: projector.positions == ends and not projector.held.ends, 30, f"live projection at {ends}")
    return ends


async def observe(store: Store, path: Path) -> Observed:
    """Write two groups of events while a live projector follows the log; its tables between the groups."""
    live = Projector(path)
    stop = asyncio.Event()
    following = asyncio.create_task(project(live, store.log, stop=stop, batch_size=7, max_wait=0.01))
    try:
        await write(store, 12, tag="early")
        then = await settled(store, live)
        snapshot = live.con.cursor()  # its own connection: the follower's may be in a thread
        try:
            tables = dump(snapshot)
        finally:
            snapshot.close()
        cut = time.time()  # after every message of the first group was stored, before any of the second
        await write(store, 12, tag="late")
        assert (await settled(store, live))["control"] > then["control"]
    finally:
        stop.set()
        await following
        live.close()
    assert len(tables["rollouts"]) == 12 and len(tables["training_attempts"]) > 0
    return Observed(then, tables, cut)


async def test_replay_to_a_sequence_equals_the_live_projection_when_the_log_was_there(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    seen = await observe(store, tmp_path / "live.duckdb")
    said: list[str] = []
    db = tmp_path / "then.duckdb"
    positions = await rebuild(Settings(nats=nats_settings), db, said.append, to_seq=seen.then["control"])
    assert positions == seen.then
    assert dump(db) == seen.tables
    assert said[0] == f"replay: control 1..{seen.then['control']} and spans 1..{seen.then['spans']} into {db}"


async def test_replay_to_a_time_on_the_command_line_equals_the_live_projection_then(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    seen = await observe(store, tmp_path / "live.duckdb")
    now = await ends_at(store.log)
    env = {"VOLTBUS_NATS__URL": nats_settings.url, "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace}
    iso = dt.datetime.fromtimestamp(seen.cut, dt.UTC).isoformat()
    db = tmp_path / "then.duckdb"
    replayed = await cli("replay", "--db", str(db), "--to-time", iso, "--progress-every", "0", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert f"control seq {seen.then['control']}, spans seq {seen.then['spans']}" in replayed.stdout
    assert now["control"] > seen.then["control"] and now["spans"] > seen.then["spans"]  # the log went on past T
    assert dump(db) == seen.tables
    lines = PROGRESS.findall(replayed.stdout)  # a line after each batch: done/total, rate, ETA
    assert lines, replayed.stdout
    assert lines[-1].startswith(f"voltbus: replay: {sum(seen.then.values()):,}/{sum(seen.then.values()):,} events")
    assert "voltbus: replay: training rows: " in replayed.stdout
    again = await cli("replay", "--db", str(db), "--from-seq", "2", env=env)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.strip().splitlines()[-1] == (
        f"voltbus: error: --from-seq 2 does not continue {db}: its control checkpoint is {seen.then['control']}, "
        f"so it goes on with --from-seq {seen.then['control'] + 1}"
    )


async def test_replay_from_seq_goes_on_with_a_copy_to_the_tables_of_a_full_rebuild(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 12, tag="early")
    await store.enqueue_many_rollouts([EnqueueRolloutRequest(input={"q": 1})])
    [claimed] = await store.dequeue_many_rollouts(limit=1, worker_id="w-cut")
    key = (claimed.rollout_id, claimed.attempt.attempt_id)
    await store.update_attempt(*key, status="succeeded")
    middle = (await ends_at(store.log))["control"]  # the cut: that attempt has ended, its telemetry comes after
    await store.log.publish_spans(telemetry(*key, 1))
    await write(store, 12, tag="late")  # rollouts in the middle of their lives at the cut
    ends, everything = await projected(store, tmp_path / "reference.duckdb")
    settings = Settings(nats=nats_settings)
    cut = tmp_path / "cut.duckdb"
    assert (await rebuild(settings, cut, lambda _: None, to_seq=middle))["control"] == middle
    copy = tmp_path / "copy.duckdb"
    shutil.copy(cut, copy)
    said: list[str] = []
    assert await rebuild(settings, copy, said.append, from_seq=middle + 1) == ends
    assert said[0].startswith(f"replay: control {middle + 1}..{ends['control']} and spans ")
    assert dump(copy) == everything
    assert dump(cut) != everything  # the copy went on, not the file it was copied from
    calls = "SELECT calls, triplets FROM training_attempts WHERE rollout_id = $1 AND attempt_id = $2"
    with duckdb.connect(str(cut), read_only=True) as before, duckdb.connect(str(copy), read_only=True) as after:
        assert before.execute(calls, key).fetchall() == [(0, 0)]  # made at the cut, without its telemetry
        assert after.execute(calls, key).fetchall() == [(1, 1)]  # made again once its telemetry was applied
    fresh = tmp_path / "fresh.duckdb"  # --from-seq 1 on a new file: a rebuild from the start
    assert await rebuild(settings, fresh, lambda _: None, from_seq=1) == ends
    assert dump(fresh) == everything


async def test_replay_from_seq_is_refused_where_it_would_build_wrong_tables(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 8)
    end = (await ends_at(store.log))["control"]
    at = end - 10
    settings = Settings(nats=nats_settings)
    db = tmp_path / "cut.duckdb"
    await rebuild(settings, db, lambda _: None, to_seq=at)
    before = dump(db)

    async def refused(path: Path, **kwargs: int) -> str:
        with pytest.raises(InvalidCommand) as caught:
            await rebuild(settings, path, lambda _: None, **kwargs)  # type: ignore[arg-type]
        return str(caught.value)

    missing = tmp_path / "new.duckdb"
    assert await refused(missing, from_seq=5) == (
        f"--from-seq 5 goes on with an existing database whose control checkpoint is 4, and {missing} does not "
        "exist: replay without --from-seq builds it from the start"
    )
    assert not missing.exists()
    for wrong in (at, at + 2, 1):
        message = await refused(db, from_seq=wrong)
        assert message.endswith(f"its control checkpoint is {at}, so it goes on with --from-seq {at + 1}")
    assert "past where this replay stops (control seq 5" in await refused(db, from_seq=at + 1, to_seq=5)
    assert "give one of them" in await refused(db, from_seq=at + 1, to_seq=end, to_time=1)  # type: ignore[arg-type]
    assert dump(db) == before  # nothing applied

    other = tmp_path / "other.duckdb"  # a copy of another log: its checkpoint's message is not this log's
    shutil.copy(db, other)
    with duckdb.connect(str(other)) as con:
        con.execute("UPDATE checkpoints SET updated_at = updated_at - 60 WHERE stream = 'control'")
    assert f"is not a projection of this log (control: seq {at} holds a message stored at " in await refused(
        other, from_seq=at + 1
    )
    older = tmp_path / "older.duckdb"
    shutil.copy(db, older)
    files = names(tmp_path)
    with duckdb.connect(str(older)) as con:
        con.execute("UPDATE projection_meta SET value = '0' WHERE key = 'version'")
    message = await refused(older, from_seq=at + 1)
    assert f"built by projection version 0, not {PROJECTION_VERSION}: it cannot be continued" in message
    assert names(tmp_path) == files  # not moved aside (to <file>.v0.bak) as opening it for writing would
    plain = tmp_path / "plain.duckdb"  # a DuckDB file that is no projection, and a file that is no database
    with duckdb.connect(str(plain)) as con:
        con.execute("CREATE TABLE t (a INT)")
    assert "is not a projection (it has no projection_meta version)" in await refused(plain, from_seq=at + 1)
    text = tmp_path / "notes.duckdb"
    text.write_text("not a database")
    assert "is not a DuckDB database" in await refused(text, from_seq=at + 1)
    assert text.read_text() == "not a database"

    assert await rebuild(settings, db, lambda _: None, from_seq=at + 1) == await ends_at(store.log)


@pytest.mark.timeout(120)
async def test_replay_from_seq_is_refused_on_the_file_of_a_running_projector(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 3)
    db, port = tmp_path / "live.duckdb", free_port()
    ends, proc = await ends_at(store.log), start(projector_env(nats_settings, db, port))

    async def caught_up() -> bool:
        assert proc.poll() is None, "the projector exited"
        return await health(f"http://127.0.0.1:{port}") == ends

    try:
        await wait_for(caught_up, 60, f"the projector at {ends}", every=0.05)
        with pytest.raises(InvalidCommand, match="is open by a running projector: continue a copy of it, or stop it"):
            await rebuild(Settings(nats=nats_settings), db, lambda _: None, from_seq=ends["control"] + 1)
        assert await health(f"http://127.0.0.1:{port}") == ends  # the projector goes on, its file untouched
    finally:
        proc.terminate()
        proc.wait(timeout=30)
