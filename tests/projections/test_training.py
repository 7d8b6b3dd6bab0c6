"""Training tables on a real bus and real DuckDB files: live equals rebuilt, late telemetry is
included, and a re-projection with other adapter settings changes the rewards without any agent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import msgspec
import pytest

from tests.benchmarks.bench_projector import read_all
from voltbus.projections import prepare, training
from voltbus.projections.adapter import AdapterOutput, AdapterSettings, AttemptInput, settings_id
from voltbus.schemas.rollouts import RolloutQueued
from voltbus.services.eventlog import Envelope
from voltbus.services.projector import client
from voltbus.services.projector.app import Progress
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import Settings
from voltbus.store import Store

from .training_workload import write

TABLES = {
    "triplets": "rollout_id, attempt_id, call_index, choice_index",
    "trajectories": "rollout_id, attempt_id, row_index",
    "training_attempts": "rollout_id, attempt_id",
    "training_meta": "settings_id",
}


def dump(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[object, ...]]]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY {k}").fetchall() for t, k in TABLES.items()}


async def rebuild(store: Store, path: Path, adapter: AdapterSettings | None = None) -> duckdb.DuckDBPyConnection:
    projector = Projector(path, adapter)
    await project(projector, store.log, ends=await ends_at(store.log), batch_size=13)
    projector.close()
    return duckdb.connect(str(path), read_only=True)


async def test_live_training_tables_equal_a_rebuild(store: Store, tmp_path: Path) -> None:
    live = Projector(tmp_path / "live.duckdb")
    stop, advanced = asyncio.Event(), asyncio.Event()
    following = asyncio.create_task(
        project(live, store.log, stop=stop, batch_size=5, max_wait=0.01, progress=lambda *_: advanced.set())
    )
    await write(store, 12)
    ends = await ends_at(store.log)
    async with asyncio.timeout(20):
        while live.positions != ends:
            await advanced.wait()
            advanced.clear()
    stop.set()
    await following
    live_tables = dump(live.con)
    live.close()
    with await rebuild(store, tmp_path / "rebuilt.duckdb") as con:
        assert dump(con) == live_tables
        sums = "SELECT count(*), sum(paired), sum(prefix_mismatches), sum(rewards) FROM training_attempts"
        assert con.execute(sums).fetchone() == (12, 36, 3, 24)  # each call counted once; 3 broken prefixes
        rows = con.execute("SELECT count(*), count(DISTINCT task_id), bool_or(mixed_versions) FROM trajectories")
        assert rows.fetchone() == (15, 4, True)
        one = con.execute("SELECT response_mask, reward, dimensions FROM trajectories WHERE NOT after_mismatch LIMIT 1")
        mask, reward, dims = one.fetchone()
        assert mask[:3] == [1, 1, 0] and reward is not None and "correct" in dims


async def test_reprojection_with_another_policy_changes_rewards_not_tokens(store: Store, tmp_path: Path) -> None:
    await write(store, 6)
    other = AdapterSettings(reward_policy="final_to_last", gamma=0.5, aggregation="call")
    with await rebuild(store, tmp_path / "a.duckdb") as a, await rebuild(store, tmp_path / "b.duckdb", other) as b:
        query = "SELECT call_id, response_ids, reward, return_value, settings_id FROM triplets ORDER BY call_id"
        first, second = a.execute(query).fetchall(), b.execute(query).fetchall()
        assert [r[:2] for r in first] == [r[:2] for r in second]  # same calls, same tokens
        assert [r[2] for r in first] != [r[2] for r in second]  # other rewards
        assert {r[4] for r in second} == {settings_id(other)}
        assert b.execute("SELECT count(*) FROM trajectories").fetchone() == (18,)  # one row per call
        assert b.execute("SELECT settings_id FROM training_meta").fetchall() == [(settings_id(other),)]


async def test_telemetry_read_from_first_seq_on_is_all_of_it(store: Store, tmp_path: Path) -> None:
    """A refresh reads the telemetry tables from its attempts' lowest ``first_seq`` on; reading them whole (the bound
    taken away) gives the same training rows, and ``first_seq`` is at or below every telemetry row of its attempt."""
    await write(store, 12)
    tables = []
    for name, bounded in (("bounded", True), ("whole", False)):
        projector = Projector(tmp_path / f"{name}.duckdb")
        if not bounded:
            projector.blocks["training_from_seq"] = msgspec.structs.replace(
                projector.blocks["training_from_seq"], sql="SELECT 0 + 0 * len($attempt_ids)"
            )
        await project(projector, store.log, ends=await ends_at(store.log), batch_size=5)  # an attempt over batches
        tables.append(dump(projector.con))
        if bounded:
            low = """SELECT x.first_seq, min(t.seq) FROM attempt_activity AS x JOIN (
                SELECT rollout_id, attempt_id, seq FROM spans
                UNION ALL SELECT rollout_id, attempt_id, seq FROM model_calls
                UNION ALL SELECT rollout_id, attempt_id, seq FROM rewards
            ) AS t USING (rollout_id, attempt_id) GROUP BY ALL"""
            pairs = projector.con.execute(low).fetchall()
            assert len(pairs) == 12 and all(first <= seq for first, seq in pairs)
            assert any(first == seq for first, seq in pairs)
        projector.close()
    assert tables[0] == tables[1] and len(tables[0]["training_attempts"]) == 12


async def written(store: Store, tmp_path: Path) -> dict[str, list[tuple[object, ...]]]:
    """The training workload of 8 attempts written, and the training tables a projection of it makes."""
    await write(store, 8)
    with await rebuild(store, tmp_path / "expected.duckdb") as con:
        return dump(con)


@pytest.fixture
def adapted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The attempt ids the adapter is called for during the test (``clear`` it to count from a point on)."""
    calls: list[str] = []
    real_adapt = training.adapt

    def counting(attempt: AttemptInput, settings: AdapterSettings) -> AdapterOutput:
        calls.append(attempt.attempt_id)
        return real_adapt(attempt, settings)

    monkeypatch.setattr(training, "adapt", counting)
    return calls


async def test_a_replay_adapts_once_and_equals_live(store: Store, tmp_path: Path, adapted: list[str]) -> None:
    live_tables = await written(store, tmp_path)
    adapted.clear()  # count from here: the replay only
    said: list[str] = []
    await client.rebuild(Settings(nats=store.log.settings), tmp_path / "replay.duckdb", said.append)
    assert sorted(adapted) == sorted(set(adapted)) and len(adapted) == 8  # each ended attempt once
    assert any("training rows: 8 attempts" in line for line in said), said
    with duckdb.connect(str(tmp_path / "replay.duckdb"), read_only=True) as con:
        assert dump(con) == live_tables


async def test_a_training_pass_cut_off_is_finished_when_the_database_is_opened(store: Store, tmp_path: Path) -> None:
    live_tables = await written(store, tmp_path)
    path = tmp_path / "cut.duckdb"
    cut = Projector(path, defer_training=True)
    await project(cut, store.log, ends=await ends_at(store.log), batch_size=5)

    def stop_after_first_chunk(done: int, total: int) -> None:
        raise KeyboardInterrupt  # the process is stopped between two chunks

    missing = training.without_rows(cut.con, cut.blocks)
    assert len(missing) == 8
    with pytest.raises(KeyboardInterrupt):
        training.catch_up(cut.con, cut.blocks, cut.adapter, missing, stop_after_first_chunk, chunk=3)
    assert cut.con.execute("SELECT count(*) FROM training_attempts").fetchone() == (3,)  # the first chunk landed
    cut.close()
    reopened = Projector(path)  # computes the 5 attempts still without rows
    assert dump(reopened.con) == live_tables
    reopened.close()


async def stored(store: Store, stream: str) -> list[Envelope]:
    """Every message of ``stream``, as the projector's feed reads it."""
    return await read_all(store.log, stream, (await ends_at(store.log))[stream])


async def test_an_attempt_ended_before_its_spans_are_applied_is_adapted_once(
    store: Store, tmp_path: Path, adapted: list[str]
) -> None:
    expected = await written(store, tmp_path)
    adapted.clear()  # count from here: this projector only
    projector = Projector(tmp_path / "live.duckdb")
    projector.apply("control", await stored(store, "control"))  # the ends first, as when the spans reader lags
    assert adapted == [] and len(projector.held.ends) == 8
    projector.apply("spans", await stored(store, "spans"))
    projector.release_held()  # what the follower does once the spans stream has nothing more for now
    assert sorted(adapted) == sorted(set(adapted)) and len(adapted) == 8  # once each, with all its telemetry
    assert not projector.held.ends and dump(projector.con) == expected
    projector.close()


async def test_refreshes_due_within_the_interval_are_done_together(
    store: Store, tmp_path: Path, adapted: list[str]
) -> None:
    expected = await written(store, tmp_path)
    adapted.clear()
    projector = Projector(tmp_path / "live.duckdb", refresh_interval=3600.0)
    projector.apply("spans", await stored(store, "spans"))  # the telemetry first: each end is due at once
    held_at: list[int] = []
    for event in await stored(store, "control"):  # one commit per event, as on a trickle
        projector.apply("control", [event])
        if projector.held.ends:
            held_at.append(event.seq)
            assert projector.held.blocks(event.seq)  # a query for training rows up to here waits for them
    assert held_at and len(set(adapted)) < 8  # some ends wait for the refresh after the interval
    projector.release_held()  # (or the first commit past the interval)
    assert not projector.held.ends and len(set(adapted)) == 8 and dump(projector.con) == expected
    projector.close()
    adapted.clear()
    eager = Projector(tmp_path / "eager.duckdb")  # refresh_interval 0: every end refreshed in its commit
    eager.apply("spans", await stored(store, "spans"))
    for event in await stored(store, "control"):
        eager.apply("control", [event])
        assert not eager.held.ends
    assert len(set(adapted)) == 8 and dump(eager.con) == expected
    eager.close()


async def test_attempts_held_when_the_projector_stopped_get_their_rows_when_it_opens(
    store: Store, tmp_path: Path
) -> None:
    expected = await written(store, tmp_path)
    path = tmp_path / "live.duckdb"
    first = Projector(path)
    first.apply("control", await stored(store, "control"))
    assert len(first.held.ends) == 8
    first.close()  # stopped while holding them: nothing of that is in the file
    second = Projector(path)
    assert second.con.execute("SELECT count(*) FROM training_attempts").fetchone() == (8,)
    second.apply("spans", await stored(store, "spans"))  # late telemetry of ended attempts: refreshed again
    second.release_held()
    assert dump(second.con) == expected
    second.close()


async def test_a_query_naming_both_streams_waits_for_held_rows_and_one_naming_control_does_not(
    tmp_path: Path,
) -> None:
    projector = Projector(tmp_path / "p.duckdb")
    progress = Progress(projector)
    projector.held.keep({("ro-1", "at-1"): (1767225600.0, 5)})  # ended at control seq 5, its spans not yet applied
    projector.positions = {"control": 5, "spans": 3}
    assert await progress.reach({"control": 5}, timeout=0.1)  # read-your-writes of the control stream alone
    assert await progress.reach({"control": 4, "spans": 3}, timeout=0.1)  # ended after what it waits for
    assert not await progress.reach({"control": 5, "spans": 3}, timeout=0.1)  # its training rows are not there yet
    waiting = asyncio.ensure_future(progress.reach({"control": 5, "spans": 3}, timeout=10))
    with pytest.raises(TimeoutError):  # it waits ...
        await asyncio.wait_for(asyncio.shield(waiting), 0.1)
    projector.held.keep({})  # released (as release_held does), then the follower reports progress
    progress("spans", 3, 0)
    assert await waiting  # ... until then
    projector.close()


async def test_the_projector_keeps_in_memory_only_the_attempts_in_progress(store: Store, tmp_path: Path) -> None:
    """Telemetry of an attempt in progress needs no training rows; the projector keeps those attempts (as many as run
    at once), not every attempt that ever ended, and still retrains an ended attempt on late telemetry."""
    expected = await written(store, tmp_path)
    running = await store.start_rollout({"q": "still running"})
    key = {(running.rollout_id, running.attempt.attempt_id)}
    projector = Projector(tmp_path / "live.duckdb")
    for event in await stored(store, "control"):
        projector.apply("control", [event])
    projector.apply("spans", await stored(store, "spans"))
    projector.release_held()
    assert projector.active == key  # the 8 ended attempts are not kept
    assert dump(projector.con) == expected  # late rewards of ended attempts retrained all the same
    projector.close()
    reopened = Projector(tmp_path / "live.duckdb")
    assert reopened.active == key
    reopened.close()


async def test_the_control_folds_kept_in_memory_are_bounded_and_read_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live projector keeps the most recently changed rollout folds only; an event of a rollout whose fold it
    forgot reads the fold from the database again, and the projection equals one that kept them all."""
    await write(store, 8)
    control = await stored(store, "control")
    first = next(e.event.rollout_id for e in control if isinstance(e.event, RolloutQueued))
    await store.update_rollout(first, metadata={"late": True})  # the first rollout, after all the others
    monkeypatch.setattr(prepare, "STATES_KEPT", 2)
    projector = Projector(tmp_path / "live.duckdb")
    for event in await stored(store, "control"):
        projector.apply("control", [event])
        assert len(projector.preparer("control").states) <= 2
    projector.apply("spans", await stored(store, "spans"))
    projector.release_held()
    kept_all = await rebuild(store, tmp_path / "all.duckdb")
    for table, key in {
        **TABLES,
        "rollouts": "rollout_id",
        "attempts": "attempt_id",
        "rollout_states": "rollout_id",
    }.items():
        sql = f"SELECT * FROM {table} ORDER BY {key}"
        assert projector.con.execute(sql).fetchall() == kept_all.execute(sql).fetchall(), table
    [(metadata,)] = projector.con.execute("SELECT metadata FROM rollouts WHERE rollout_id = ?", [first]).fetchall()
    assert '"late"' in metadata
    projector.close()
    kept_all.close()
