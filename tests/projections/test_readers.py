"""Reader processes (services/projector/reader.py) on a real bus and real DuckDB files: the tables they build equal
the ones this process builds; a refused batch is applied here, a reader that dies is replaced, one that
cannot start leaves the stream to this process, and a nats-server restart is survived, with nothing lost or
doubled."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from voltbus.projections import prepare
from voltbus.services.eventlog import EventLog
from voltbus.services.projector.client import rebuild
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.forks import Forks
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import Store, connect

from ..conftest import start_server, wait_for
from . import training_workload
from .conftest import dump
from .test_lean import EVENTS, call_with
from .workload import write


@pytest.fixture
def forks() -> Iterator[Forks]:
    """A fork server of the test's own, whose readers the test sees (``Forks.live``); stopped at its end."""
    server = Forks()
    yield server
    server.stop()


async def build(
    log_: EventLog, path: Path, readers: int, batch_size: int = 50, forks: Forks | None = None
) -> dict[str, list[tuple[object, ...]]]:
    """The projection of the whole log, with ``readers`` reader processes per stream (0: none)."""
    projector = Projector(path)
    try:
        ends = await ends_at(log_)
        await project(projector, log_, ends=ends, batch_size=batch_size, readers=readers, forks=forks)
        assert projector.positions == await ends_at(log_)
        return dump(projector.con)
    finally:
        projector.close()


class Live:
    """A live projection into ``path`` with reader processes, waited on through its progress callback."""

    def __init__(self, log_: EventLog, path: Path, readers: int, **kwargs: object) -> None:
        self.log, self.projector = log_, Projector(path)
        self.stop, self.advanced = asyncio.Event(), asyncio.Event()
        progress = lambda *_: self.advanced.set()  # noqa: E731
        self.task = asyncio.create_task(
            project(self.projector, log_, stop=self.stop, max_wait=0.01, readers=readers, progress=progress, **kwargs)
        )

    async def reach(self, timeout: float = 30) -> None:
        """Wait until the projection has applied everything the log holds now."""
        ends = await ends_at(self.log)
        async with asyncio.timeout(timeout):
            while self.projector.positions != ends:
                await self.advanced.wait()
                self.advanced.clear()

    async def tables(self) -> dict[str, list[tuple[object, ...]]]:
        """Stop following; every table."""
        self.stop.set()
        try:
            await self.task
            return dump(self.projector.con)
        finally:
            self.projector.close()


async def test_readers_build_the_tables_this_process_builds(store: Store, tmp_path: Path, forks: Forks) -> None:
    await write(store, 30)
    await training_workload.write(store, 6)
    await store.log.js.publish(store.topology.rollout_events("ro-poison"), b"\xffnot json")
    here = await build(store.log, tmp_path / "here.duckdb", readers=0)
    for count in (1, 2, 3):
        assert await build(store.log, tmp_path / f"readers-{count}.duckdb", readers=count, forks=forks) == here
    assert len(here["triplets"]) > 0 and len(here["quarantine"]) == 1 and len(here["spans"]) > 30
    assert not forks.live  # every reader process was stopped


async def test_a_live_projection_with_readers_equals_a_rebuild(store: Store, tmp_path: Path) -> None:
    live = Live(store.log, tmp_path / "live.duckdb", readers=2, batch_size=7)
    try:
        await write(store, 25)  # events arrive while the readers follow the log
        await live.reach()
    finally:
        tables = await live.tables()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)


async def test_control_readers_keep_the_folds_of_recent_rollouts_only(
    store: Store, tmp_path: Path, forks: Forks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A control reader keeps about ``STATES_KEPT`` folds however many rollouts ran (issue 25): it asks the projector
    for the others when their events come, and the projection equals one built in this process."""
    monkeypatch.setattr(prepare, "STATES_KEPT", 3)
    batch = 3
    live = Live(store.log, tmp_path / "live.duckdb", readers={"control": 2, "spans": 0}, batch_size=batch, forks=forks)
    try:
        first = (await write(store, 60))[0]  # 30 rollouts a share
        await live.reach()
        await store.update_rollout(first, metadata={"late": True})  # long forgotten by its reader
        await live.reach()
        readers = [r for r in forks.live if r.stream == "control"]
        assert len(readers) == 2 and all(r.folds > 0 for r in readers)
        assert max(r.most for r in readers) <= 3 + 4 * batch  # kept + the rollouts of the cuts not yet committed
    finally:
        tables = await live.tables()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)
    assert '"late"' in next(str(row) for row in tables["rollouts"] if row[0] == first)


async def test_a_batch_from_a_reader_that_the_database_refuses_is_applied_here(store: Store, tmp_path: Path) -> None:
    await write(store, 4)
    shard = store.topology.span_shard("ro-1")
    poison = [call_with(prompt_ids=f"[1,{2**31}]"), call_with(response_ids=f"[{2**63}]")]
    seqs = [(await store.log.js.publish(shard, data)).seq for data in poison]
    await store.log.publish_spans(EVENTS[3:6])
    readers = await build(store.log, tmp_path / "readers.duckdb", readers=2, batch_size=500)
    assert [(q[1], q[4]) for q in readers["quarantine"]] == list(zip(seqs, poison, strict=True))
    assert readers == await build(store.log, tmp_path / "here.duckdb", readers=0, batch_size=3)


async def test_a_killed_reader_is_replaced_and_nothing_is_lost(store: Store, tmp_path: Path, forks: Forks) -> None:
    await write(store, 10)
    live = Live(store.log, tmp_path / "live.duckdb", readers=2, forks=forks)
    try:
        await live.reach()
        shares = sorted((r.stream, r.part) for r in forks.live)
        assert shares == [("control", (0, 2)), ("control", (1, 2)), ("spans", (0, 2)), ("spans", (1, 2))]
        killed = next(r.pid for r in forks.live if r.part == (1, 2) and r.stream == "spans")
        os.kill(killed, signal.SIGKILL)
        await write(store, 10, tag="late")  # more of both streams after a spans reader died
        await live.reach()
        assert sorted((r.stream, r.part) for r in forks.live) == shares  # the spans readers started again
        assert killed not in {r.pid for r in forks.live}
    finally:
        tables = await live.tables()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)
    assert not forks.live


async def test_a_reader_that_cannot_reach_the_bus_leaves_the_stream_here(store: Store, tmp_path: Path) -> None:
    await write(store, 5)
    elsewhere = store.log.settings.model_copy(update={"url": "nats://127.0.0.1:1", "connect_timeout_s": 0.2})
    misled = EventLog(store.log.nc, elsewhere)  # this process is connected; its readers are sent nowhere
    assert await build(misled, tmp_path / "misled.duckdb", readers=2) == await build(
        store.log, tmp_path / "here.duckdb", readers=0
    )


@pytest.mark.timeout(120)
async def test_readers_survive_a_server_restart(tmp_path: Path, forks: Forks) -> None:
    server = start_server(tmp_path / "nats")
    settings = NatsSettings(url=server.url, namespace="rr", request_timeout_s=2.0, connect_timeout_s=1.0)
    store = await connect(settings=settings)
    live = Live(store.log, tmp_path / "live.duckdb", readers=1, forks=forks)
    try:
        await write(store, 10)
        await live.reach(timeout=40)
        before = {r.pid for r in forks.live}
        server.kill()  # kill -9: the spans stream may lose what it had not yet written
        server.start()
        await write(store, 10, tag="after")  # the clients reconnect; new events past the restart
        await live.reach(timeout=40)
        assert {r.pid for r in forks.live}.isdisjoint(before)  # the readers stopped at the restart, started anew
    finally:
        tables = await live.tables()
    try:
        assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)
    finally:
        await store.close()
        server.stop()


def test_the_fork_server_ends_quietly() -> None:
    """The fork server freezes its imports out of collection; when its projector goes, it ends without DuckDB's
    bindings reporting the frozen objects as leaked on stderr."""
    script = (
        "import socket\n"
        "from voltbus.services.projector.forks import Forks\n"
        "forks = Forks()\n"
        "ours, theirs = socket.socketpair()\n"
        "print(forks.fork(theirs) > 0)\n"
        "ours.close()\n"
        "forks.stop()\n"
    )  # its owner stops it: closes its end of the fork server's socket, and waits for the fork server to end
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
    assert "leaked" not in done.stderr, done.stderr


def fork_servers() -> list[int]:
    """This process's children that are readers' fork servers (read from /proc)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                if b"serve_forks" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except FileNotFoundError:  # it ended meanwhile
                pass
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads this process's children from /proc")
async def test_a_run_without_a_fork_server_of_its_callers_stops_its_own(store: Store, tmp_path: Path) -> None:
    """``project`` and ``rebuild`` given no fork server start one for their readers and stop it by their end: none
    outlives them (there is no module-level one)."""
    await write(store, 5)
    here = await build(store.log, tmp_path / "here.duckdb", readers=0)
    assert await build(store.log, tmp_path / "own.duckdb", readers=1) == here
    assert fork_servers() == []
    settings = Settings(nats=store.log.settings)
    assert settings.projector.forks  # the defaults start reader processes
    await rebuild(settings, tmp_path / "rebuilt.duckdb", lambda _: None)
    assert fork_servers() == []


def backlog_lines(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    """The streams named by the projector's log lines about backlog readers (``what``: "a backlog", "caught up at")."""
    return sorted(r.getMessage().split(":")[0].split(" caught")[0] for r in caplog.records if what in r.getMessage())


async def test_a_backlog_is_read_by_a_reader_until_it_is_caught_up(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture, forks: Forks
) -> None:
    caplog.set_level("INFO", logger="voltbus.services.projector.follow")
    await write(store, 30)
    ends = await ends_at(store.log)
    assert min(ends.values()) > 40, ends
    live = Live(store.log, tmp_path / "live.duckdb", readers=0, batch_size=7, backlog=20, forks=forks)
    try:
        await live.reach()
        assert backlog_lines(caplog, "a backlog") == ["control", "spans"]
        # once less than a batch is left, each stream is read here again
        await wait_for(lambda: not forks.live, 30, "the backlog readers stopped")
        assert backlog_lines(caplog, "caught up at") == ["control", "spans"]
        await write(store, 3, tag="late")  # a trickle: read here
        await live.reach()
        assert not forks.live
    finally:
        tables = await live.tables()
    assert tables == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)


async def test_a_rebuild_keeps_its_backlog_reader_to_the_end(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture, forks: Forks
) -> None:
    caplog.set_level("INFO", logger="voltbus.services.projector.follow")
    await write(store, 30)
    here = await build(store.log, tmp_path / "here.duckdb", readers=0)
    projector = Projector(tmp_path / "backlog.duckdb")
    try:
        await project(projector, store.log, ends=await ends_at(store.log), batch_size=7, backlog=20, forks=forks)
        assert dump(projector.con) == here
    finally:
        projector.close()
    assert backlog_lines(caplog, "a backlog") == ["control", "spans"]
    assert backlog_lines(caplog, "caught up at") == []  # a bounded run keeps its readers
    assert not forks.live


async def test_a_backlog_reader_of_a_grown_database_asks_for_the_folds_it_needs(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader gets no fold at start: one of a database holding more rollouts than its backlog asks the projector
    for the folds of the rollouts its events change, and the projection equals a rebuild."""
    caplog.set_level("INFO", logger="voltbus.services.projector.follow")
    await write(store, 30)
    path = tmp_path / "grown.duckdb"
    late = (await build(store.log, path, readers=0))["rollouts"][0][0]
    await write(store, 2, tag="late")  # a few more events of each stream than the backlog needs
    await store.update_rollout(late, metadata={"late": True})  # an event of a rollout folded before
    projector = Projector(path)
    try:
        behind = {s: end - projector.positions[s] for s, end in (await ends_at(store.log)).items()}
        rollouts = projector.state_count()
        assert 3 <= behind["control"] < rollouts and behind["spans"] >= 3, (behind, rollouts)
        await project(projector, store.log, ends=await ends_at(store.log), batch_size=7, backlog=3)
        assert dump(projector.con) == await build(store.log, tmp_path / "rebuilt.duckdb", readers=0)
        [(metadata,)] = projector.con.execute("SELECT metadata FROM rollouts WHERE rollout_id = ?", [late]).fetchall()
        assert '"late"' in metadata
    finally:
        projector.close()
    assert backlog_lines(caplog, "a backlog") == ["control", "spans"]
