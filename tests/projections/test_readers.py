"""Reader processes (projections/reader.py) on a real bus and real DuckDB files: the tables they build equal
the ones this process builds; a refused batch, a reader that dies or one that cannot start leave the stream
to this process, with nothing lost or doubled."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from voltbus.projections import reader
from voltbus.projections.follow import ends_at, project
from voltbus.projections.projector import Projector
from voltbus.services.eventlog import EventLog
from voltbus.store import Store

from . import training_workload
from .conftest import dump
from .test_lean import EVENTS, call_with
from .workload import write


async def build(log_: EventLog, path: Path, readers: int, batch_size: int = 50) -> dict[str, list[tuple[object, ...]]]:
    """The projection of the whole log, with ``readers`` reader processes per stream (0: none)."""
    projector = Projector(path)
    try:
        await project(projector, log_, ends=await ends_at(log_), batch_size=batch_size, readers=readers)
        assert projector.positions == await ends_at(log_)
        return dump(projector.con)
    finally:
        projector.close()


async def follow_until(projector: Projector, log_: EventLog, ends: dict[str, int], **kwargs: object) -> None:
    """A live ``project`` (with readers) until the projector reached ``ends``."""
    stop, advanced = asyncio.Event(), asyncio.Event()
    following = asyncio.create_task(
        project(projector, log_, stop=stop, max_wait=0.01, readers=2, progress=lambda *_: advanced.set(), **kwargs)
    )
    try:
        async with asyncio.timeout(30):
            while projector.positions != ends:
                await advanced.wait()
                advanced.clear()
    finally:
        stop.set()
        await following


async def test_readers_build_the_tables_this_process_builds(store: Store, tmp_path: Path) -> None:
    await write(store, 30)
    await training_workload.write(store, 6)
    await store.log.js.publish(store.topology.rollout_events("ro-poison"), b"\xffnot json")
    here = await build(store.log, tmp_path / "here.duckdb", readers=0)
    for count in (1, 2, 3):
        assert await build(store.log, tmp_path / f"readers-{count}.duckdb", readers=count) == here
    assert len(here["triplets"]) > 0 and len(here["quarantine"]) == 1 and len(here["spans"]) > 30
    assert not reader.LIVE  # every reader process was stopped


async def test_a_live_projection_with_readers_equals_a_rebuild(store: Store, tmp_path: Path) -> None:
    live = Projector(tmp_path / "live.duckdb")
    try:
        writing = asyncio.create_task(write(store, 25))  # events arrive while the readers follow the log
        await asyncio.sleep(0)
        await writing
        await follow_until(live, store.log, await ends_at(store.log), batch_size=7)
        tables = dump(live.con)
    finally:
        live.close()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)


async def test_a_batch_from_a_reader_that_the_database_refuses_is_applied_here(store: Store, tmp_path: Path) -> None:
    await write(store, 4)
    shard = store.topology.span_shard("ro-1")
    poison = [call_with(prompt_ids=f"[1,{2**31}]"), call_with(response_ids=f"[{2**63}]")]
    seqs = [(await store.log.js.publish(shard, data)).seq for data in poison]
    await store.log.publish_spans(EVENTS[3:6])
    readers = await build(store.log, tmp_path / "readers.duckdb", readers=2, batch_size=500)
    assert [(q[1], q[4]) for q in readers["quarantine"]] == list(zip(seqs, poison, strict=True))
    assert readers == await build(store.log, tmp_path / "here.duckdb", readers=0, batch_size=3)


async def test_a_killed_reader_leaves_its_stream_to_the_projector(store: Store, tmp_path: Path) -> None:
    await write(store, 10)
    live = Projector(tmp_path / "live.duckdb")
    stop, advanced = asyncio.Event(), asyncio.Event()

    async def reach(ends: dict[str, int]) -> None:
        async with asyncio.timeout(20):
            while live.positions != ends:
                await advanced.wait()
                advanced.clear()

    try:
        following = asyncio.create_task(
            project(live, store.log, stop=stop, max_wait=0.01, readers=2, progress=lambda *_: advanced.set())
        )
        await reach(await ends_at(store.log))
        shares = sorted((r.stream, r.part) for r in reader.LIVE)
        assert shares == [("control", (0, 2)), ("control", (1, 2)), ("spans", (0, 2)), ("spans", (1, 2))]
        os.kill(next(r.pid for r in reader.LIVE if r.part == (1, 2) and r.stream == "spans"), signal.SIGKILL)
        await write(store, 10, tag="late")  # more of both streams after a spans reader died
        await reach(await ends_at(store.log))
        assert sorted(r.stream for r in reader.LIVE) == ["control", "control"]  # spans read here since
        stop.set()
        await following
        tables = dump(live.con)
    finally:
        live.close()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)
    assert not reader.LIVE


async def test_a_reader_that_cannot_reach_the_bus_leaves_the_stream_here(store: Store, tmp_path: Path) -> None:
    await write(store, 5)
    elsewhere = store.log.settings.model_copy(update={"url": "nats://127.0.0.1:1", "connect_timeout_s": 0.2})
    misled = EventLog(store.log.nc, elsewhere)  # this process is connected; its readers are sent nowhere
    assert await build(misled, tmp_path / "misled.duckdb", readers=2) == await build(
        store.log, tmp_path / "here.duckdb", readers=0
    )
