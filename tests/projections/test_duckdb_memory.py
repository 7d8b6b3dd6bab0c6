"""DuckDB's memory limit (``projector.duckdb_memory_limit``): it reaches every connection to the projection (the
projector's, its SQL endpoint's, ``voltbus replay``'s and ``voltbus sql --db``'s), and a bad value is refused
when the settings load, saying why."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import msgspec
import pytest
from pydantic import ValidationError

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import QueryRefused
from voltbus.schemas.rollouts import RolloutQueued
from voltbus.services.eventlog import Envelope
from voltbus.services.projector import follow
from voltbus.services.projector.app import run
from voltbus.services.projector.client import run_sql
from voltbus.services.projector.follow import Following, ends_at
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store

from ..conftest import free_port, running, wait_for
from .workload import write

LIMIT = "SELECT current_setting('memory_limit') AS limit_"
HUNGRY = "SELECT length(string_agg(repeat('x', 1000), '')) FROM range(400000)"
"""A query that holds 400 MB at once (one string): more than any limit here."""


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("1000", "expected a size with a unit"),
        ("lots", "expected a size with a unit"),
        ("-1GB", "expected a size with a unit"),
        ("1PB", "expected a size with a unit"),
        ("0%", "a percentage must be above 0 and at most 100"),
        ("150%", "a percentage must be above 0 and at most 100"),
        ("10MB", "below 64 MiB"),
    ],
)
def test_a_bad_memory_limit_is_refused_when_the_settings_load(
    bad: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOLTBUS_PROJECTOR__DUCKDB_MEMORY_LIMIT", bad)
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "duckdb_memory_limit" in str(refused.value) and why in str(refused.value)


def test_the_checkpoint_threshold_is_a_size_and_reaches_the_projectors_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past DuckDB's default 16 MiB of write-ahead log a commit checkpoints, writing every index of the tables it
    touched whole; the projector's database waits for ``duckdb_checkpoint_threshold`` (BENCHMARKS.md, issue 25)."""
    assert ProjectorSettings().duckdb_checkpoint_threshold == "256MiB"
    monkeypatch.setenv("VOLTBUS_PROJECTOR__DUCKDB_CHECKPOINT_THRESHOLD", "256")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "duckdb_checkpoint_threshold" in str(refused.value) and "expected a size with a unit" in str(refused.value)
    wal = tmp_path / "p.duckdb.wal"
    for threshold, checkpointed in (("16MiB", True), ("256MiB", False)):
        wal.unlink(missing_ok=True)
        (tmp_path / "p.duckdb").unlink(missing_ok=True)
        projector = Projector(tmp_path / "p.duckdb", checkpoint_threshold=threshold)
        try:
            assert projector.con.execute("SELECT current_setting('checkpoint_threshold')").fetchone() == (
                threshold.replace("MiB", ".0 MiB"),
            )
            projector.con.execute("CREATE TABLE filler (s VARCHAR)")
            for _ in range(24):  # commits of about 1 MiB each
                projector.con.execute("INSERT INTO filler SELECT repeat('x', 1000) || i FROM range(1000) t(i)")
            logged = wal.stat().st_size if wal.exists() else 0
            assert (logged < 16 << 20) is checkpointed, (threshold, logged)  # ~24 MiB logged, or written out
        finally:
            projector.close()


def test_the_default_limit_and_good_values() -> None:
    assert ProjectorSettings().duckdb_memory_limit == "1GiB"
    for good in ("512MiB", "2GB", "2 gb", "25%", "12.5%", "1TB"):
        assert ProjectorSettings(duckdb_memory_limit=good).duckdb_memory_limit == good


async def test_the_limit_reaches_the_projector_its_endpoint_replay_and_sql_on_a_file(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 3)
    port = free_port()
    projector = ProjectorSettings(db=tmp_path / "live.duckdb", port=port, duckdb_memory_limit="96MiB")
    settings = Settings(nats=nats_settings, projector=projector)
    async with running(run, settings, within=20):
        body = {"sql": LIMIT, "min_seq": await ends_at(store.log), "timeout": 20}
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"http://127.0.0.1:{port}/sql", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        assert "96.0 MiB" in answer.text
        async with httpx.AsyncClient() as client:  # a query that cannot fit: refused, saying why; the projector goes on
            answer = await client.post(f"http://127.0.0.1:{port}/sql", json={"sql": HUNGRY}, timeout=30)
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "out_of_memory" and "projector.duckdb_memory_limit" in answer.json()["error"]
    assert run_sql(settings, LIMIT, db=tmp_path / "live.duckdb").to_pylist() == [{"limit_": "96.0 MiB"}]
    with pytest.raises(QueryRefused) as refused:
        run_sql(settings, HUNGRY, db=tmp_path / "live.duckdb")
    assert refused.value.code == "out_of_memory"
    direct = Projector(tmp_path / "replayed.duckdb", memory_limit="80MiB")  # as ``voltbus replay`` opens one
    try:
        assert direct.con.execute(LIMIT).fetchone() == ("80.0 MiB",)
        assert direct.con.cursor().execute(LIMIT).fetchone() == ("80.0 MiB",)  # the endpoint's queries share it
    finally:
        direct.close()


async def test_a_batch_duckdb_has_no_memory_for_waits_and_lands_once_memory_is_freed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails for lack of memory under the limit (here a query's result held beside it) is neither
    skipped nor fatal: the projector says so, naming the setting, and applies the batch once memory is free."""
    monkeypatch.setattr(follow, "MEMORY_PAUSE_S", (0.05, 0.2))
    caplog.set_level(logging.ERROR, logger="voltbus.services.projector.follow")
    projector = Projector(tmp_path / "p.duckdb", memory_limit="64MiB")
    big = msgspec.Raw(b'"' + b"x" * (4 << 20) + b'"')  # a 4 MiB input: fits in 64 MiB, not beside 40 MiB held
    queued = RolloutQueued(event_id=derive_id("q", 1), rollout_id="r1", input=big, queued_at=1.0)
    hold = projector.con.cursor()
    try:
        hold.execute("SELECT string_agg(repeat('x', 1000), '') AS s FROM range(8000)")  # ~40 MiB held

        async def release() -> None:
            await wait_for(lambda: caplog.records, 60, "the out-of-memory error was logged")
            hold.close()

        releasing = asyncio.create_task(release())
        following = Following(projector, None, None, None, None, 100, 0.1, 0)  # type: ignore[arg-type]
        await asyncio.wait_for(
            following.apply_short_of_memory("control", [Envelope(seq=1, subject="vb.ro.r1.q", time=1.0, event=queued)]),
            60,
        )
        await releasing
        assert projector.positions["control"] == 1
        assert projector.con.execute("SELECT length(input) FROM rollouts").fetchall() == [((4 << 20) + 2,)]
    finally:
        hold.close()
        projector.close()
    message = caplog.records[0].getMessage()
    assert "out of memory under projector.duckdb_memory_limit (64MiB" in message and "after seq 0" in message
