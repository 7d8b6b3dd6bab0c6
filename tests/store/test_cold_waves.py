"""``wait_for_rollouts`` of rollouts a client has not seen finished, answered from the projection (issue 25): one query
for the wave, the log's end after the projection's checkpoint read for what changed since, and the log itself for
those rollouts, or for all of them when no usable projector answers. Every answer is the log's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from voltbus.services.clients.store import coldwave
from voltbus.services.eventlog import EventLog
from voltbus.services.projector.app import Progress, Queries, build_app
from voltbus.services.projector.identity import bus_id
from voltbus.services.projector.projector import Projector
from voltbus.services.serving import build_server
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Rollout, Store, connect

from ..conftest import free_port, wait_for
from .conftest import projector

DIVERGED = {
    "stream": "control",
    "applied_to": 9,
    "good_to": 0,
    "log_end": 9,
    "reason": "replaced",
    "action": "stopped",
    "detected_at": 0.0,
}


def reads_of(store: Store) -> list[str]:
    """The rollouts whose history ``store`` reads from the log from now on (``EventLog.read``: its direct gets)."""
    reads: list[str] = []
    read = store.log.read

    async def counted(rollout_id: str, after_seq: int = 0) -> object:
        reads.append(rollout_id)
        return await read(rollout_id, after_seq)

    store.log.read = counted  # type: ignore[method-assign]
    return reads


async def finished(store: Store, n: int, status: str = "succeeded") -> list[str]:
    """``n`` rollouts whose one attempt ended with ``status``."""
    ids = []
    for i in range(n):
        r = await store.start_rollout({"n": i})
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status=status)  # type: ignore[arg-type]
        ids.append(r.rollout_id)
    return ids


async def projected(writer: Store, ids: list[str]) -> None:
    """Wait until the projector has applied everything ``writer`` wrote (its queries wait for its writes)."""
    assert (await writer.query_rollouts(rollout_id_in=ids)).total == len(ids)


def nowhere() -> str:
    """A projector URL at which nothing answers."""
    return f"http://127.0.0.1:{free_port()}"


async def from_log(nats: NatsSettings, ids: list[str]) -> tuple[list[Rollout], dict[str, int]]:
    """What a client that reads only the log answers, and each rollout's last sequence as its fold gives it."""
    plain = await connect(settings=nats, projector_url=nowhere())
    try:
        done = await plain.wait_for_rollouts(rollout_ids=ids, timeout=0)
        return done, {rid: (await plain._state_at(rid))[1] for rid in ids}
    finally:
        await plain.close()


@asynccontextmanager
async def frozen(nats: NatsSettings, db: Path) -> AsyncIterator[tuple[str, Projector]]:
    """The projector's SQL endpoint on ``db`` as it stands, following nothing: a projector as far behind the log as
    it was when ``db`` was last written. Yields its URL and the projection."""
    port = free_port()
    settings = Settings(nats=nats, projector=ProjectorSettings(db=db, port=port))
    log = await EventLog.connect(nats, name="frozen-projector")
    projection = Projector(db)
    queries = Queries(settings, projection)
    app = build_app(settings, projection, Progress(projection), queries, await bus_id(log.nc, nats))
    server = build_server(app, "127.0.0.1", port, settings.http, lifespan="off")
    serving = asyncio.create_task(server.serve())
    try:
        await wait_for(lambda: server.started, what="the SQL endpoint")
        yield f"http://127.0.0.1:{port}", projection
    finally:
        server.should_exit = True
        await serving
        queries.stop()
        projection.close()
        await log.close()


async def test_a_new_client_answers_a_finished_wave_from_the_projection(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    """Finished rollouts (one with an undecodable message after its end, which the log's fold skips and counts) and
    one still running: the same answer and the same last sequences as the log's, no history read from the log."""
    async with projector(nats_settings, tmp_path / "p.duckdb") as url:
        writer = await connect(settings=nats_settings, projector_url=url)
        fresh = await connect(settings=nats_settings, projector_url=url)
        try:
            ids = [*await finished(writer, 3), *await finished(writer, 1, "failed")]
            running = (await writer.start_rollout({"n": "running"})).rollout_id
            await writer.log.js.publish(writer.topology.rollout_events(ids[0]), b"not an event")
            await projected(writer, [*ids, running, (await writer.enqueue_rollout("after")).rollout_id])
            reads = reads_of(fresh)
            wave = [running, *ids]
            done = await fresh.wait_for_rollouts(rollout_ids=wave, timeout=0)
            expected, last = await from_log(nats_settings, wave)
            assert done == expected and [r.rollout_id for r in done] == ids
            assert reads == []
            assert {rid: seq for rid, (_, seq) in fresh._finished_states.items()} == {rid: last[rid] for rid in ids}
            assert fresh.seen["control"] == max(last[rid] for rid in ids)  # saw_ended: the last end returned
            assert await fresh.wait_for_rollouts(rollout_ids=wave, timeout=0) == expected  # now from its cache
            assert reads == [running]  # unfinished when first read (from the projection): polled from the log
        finally:
            await writer.close()
            await fresh.close()


async def test_rollouts_changed_after_the_projection_are_read_from_the_log(
    nats_settings: NatsSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the projection's checkpoint: a finished rollout updated, a running one ended, a new one ended. Those three
    are read from the log, the unchanged one is not, and the answers are the log's. With more rollout messages after
    the checkpoint than ``TAIL_AT_MOST``, or a projection that found the control log replaced, the whole wave is read
    from the log."""
    db = tmp_path / "p.duckdb"
    writer = await connect(settings=nats_settings)
    try:
        async with projector(nats_settings, db) as url:
            writer.projector_url = url
            unchanged, updated = await finished(writer, 2)
            late = await writer.start_rollout({"n": "late"})
            await projected(writer, [unchanged, updated, late.rollout_id])
        await writer.update_rollout(updated, metadata={"after": "checkpoint"})
        await writer.update_attempt(late.rollout_id, late.attempt.attempt_id, status="succeeded")
        [new] = await finished(writer, 1)
        wave = [unchanged, updated, late.rollout_id, new]
        expected, last = await from_log(nats_settings, wave)
        assert len(expected) == 4 and expected[1].metadata == {"after": "checkpoint"}
        async with frozen(nats_settings, db) as (url, projection):
            for bound, read_from_log in ((coldwave.TAIL_AT_MOST, wave[1:]), (3, wave), ("diverged", wave)):
                if bound == "diverged":  # the projection found the control log replaced: it is not used
                    monkeypatch.undo()
                    projection.diverge(DIVERGED)
                else:
                    monkeypatch.setattr(coldwave, "TAIL_AT_MOST", bound)
                fresh = await connect(settings=nats_settings, projector_url=url)
                try:
                    reads = reads_of(fresh)
                    assert await fresh.wait_for_rollouts(rollout_ids=wave, timeout=0) == expected
                    assert sorted(reads) == sorted(read_from_log), bound
                    assert {rid: seq for rid, (_, seq) in fresh._finished_states.items()} == last
                finally:
                    await fresh.close()
    finally:
        await writer.close()


async def test_without_a_usable_projector_the_log_answers(
    nats_settings: NatsSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No projector, or one following another namespace: the log answers, the same; once the client's own projector
    answers (after ``RETRY_AFTER_S``), the next wave is read from it."""
    monkeypatch.setattr(coldwave, "RETRY_AFTER_S", 0.0)
    writer = await connect(settings=nats_settings)
    other = nats_settings.model_copy(update={"namespace": nats_settings.namespace + "x"})
    try:
        first, second = await finished(writer, 2), await finished(writer, 2)
        expected = (await from_log(nats_settings, first))[0]
        down = await connect(settings=nats_settings, projector_url=nowhere())
        async with projector(other, tmp_path / "other.duckdb") as url:
            elsewhere = await connect(settings=nats_settings, projector_url=url)
            for client in (down, elsewhere):
                reads = reads_of(client)
                assert await client.wait_for_rollouts(rollout_ids=first, timeout=0) == expected
                assert sorted(reads) == sorted(first)
                await client.close()
        async with projector(nats_settings, tmp_path / "p.duckdb") as url:
            writer.projector_url = url
            await projected(writer, first + second)
            back = await connect(settings=nats_settings, projector_url=nowhere())
            try:
                reads = reads_of(back)
                assert await back.wait_for_rollouts(rollout_ids=first, timeout=0) == expected
                assert sorted(reads) == sorted(first)
                back.projector_url = url  # the projector it was given starts answering
                assert (
                    await back.wait_for_rollouts(rollout_ids=second, timeout=0)
                    == (await from_log(nats_settings, second))[0]
                )
                assert sorted(reads) == sorted(first)
            finally:
                await back.close()
    finally:
        await writer.close()


async def test_a_rollout_in_flight_is_asked_of_the_projection_once(nats_settings: NatsSettings, tmp_path: Path) -> None:
    """An algorithm polls its rollouts in flight: the projection answers the first look at each, the log every later
    one (the projector is not queried at every poll), and the end is seen as soon as it is stored."""
    async with projector(nats_settings, tmp_path / "p.duckdb") as url:
        writer = await connect(settings=nats_settings, projector_url=url)
        poller = await connect(settings=nats_settings, projector_url=url)
        asked: list[list[str]] = []
        ask = poller._ask

        async def counted(rollout_ids: list[str]) -> list[dict[str, object]]:
            asked.append(list(rollout_ids))
            return await ask(rollout_ids)

        poller._ask = counted  # type: ignore[method-assign]
        try:
            r = await writer.start_rollout({"n": "in flight"})
            [old] = await finished(writer, 1)
            await projected(writer, [r.rollout_id, old])
            for _ in range(3):
                assert await poller.wait_for_rollouts(rollout_ids=[r.rollout_id], timeout=0) == []
            assert asked == [[r.rollout_id]]
            await writer.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
            got = await poller.wait_for_rollouts(rollout_ids=[r.rollout_id, old], timeout=0)
            assert [(x.rollout_id, x.status) for x in got] == [(r.rollout_id, "succeeded"), (old, "succeeded")]
            assert asked == [[r.rollout_id], [old]]  # the new one, not the one polled before
        finally:
            await writer.close()
            await poller.close()
