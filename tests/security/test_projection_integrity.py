"""A projection proves it equals the log (issue 24, finding 3): a table lost from the file is rebuilt from the log,
never recreated empty while /health says ok, and ``voltbus verify`` names every table whose rows the log does not
give."""

from __future__ import annotations

from pathlib import Path

import duckdb
import httpx
import pytest

from tests.conftest import running
from tests.projections.conftest import dump, projected
from tests.projections.workload import write
from tests.test_cli import one_line_error, run
from voltbus.projections import integrity
from voltbus.services.projector.app import run as run_projector
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.projector.verify import verify
from voltbus.services.serving import free_port
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store, connect


@pytest.fixture
async def store(nats_settings: NatsSettings) -> Store:
    client = await connect(settings=nats_settings)
    await write(client, 10)
    yield client  # type: ignore[misc]
    await client.close()


def tamper(db: Path, sql: str) -> None:
    """Change the file behind the projector's back (someone with access to the disk)."""
    with duckdb.connect(str(db)) as con:
        con.execute(sql)


async def test_a_dropped_table_is_rebuilt_from_the_log_not_recreated_empty(store: Store, tmp_path: Path) -> None:
    db = tmp_path / "p.duckdb"
    _, original = await projected(store, db)
    assert len(original["spans"]) > 5
    tamper(db, "DROP TABLE spans")
    projector = Projector(db)  # was: CREATE TABLE IF NOT EXISTS gave it back empty, checkpoints kept
    try:
        assert projector.positions == {"control": 0, "spans": 0}  # the file was moved aside: a rebuild
        await project(projector, store.log, ends=await ends_at(store.log), batch_size=500)
        assert dump(projector.con) == original
    finally:
        projector.close()
    assert (tmp_path / "p.duckdb.missing-tables.bak").exists()  # kept for a look


async def test_verify_names_the_tables_the_log_does_not_give(store: Store, tmp_path: Path) -> None:
    db = tmp_path / "p.duckdb"
    await projected(store, db)
    settings = Settings(nats=store.log.settings, projector=ProjectorSettings(db=db))
    assert await verify(settings, db, lambda line: None) == []
    tamper(db, "UPDATE rewards SET value = 100 WHERE seq = (SELECT min(seq) FROM rewards)")
    tamper(db, "DELETE FROM attempts WHERE attempt_id = (SELECT min(attempt_id) FROM attempts)")
    different = await verify(settings, db, lambda line: None)
    assert [line.split(":")[0] for line in different] == ["attempts", "rewards"], different
    assert "the log gives" in different[0]
    env = {"VOLTBUS_NATS__URL": store.log.settings.url, "VOLTBUS_NATS__NAMESPACE": store.log.settings.namespace}
    result = run("verify", "--db", str(db), env=env, timeout=120)
    assert "differs: rewards:" in result.stdout and "differs: attempts:" in result.stdout, result.stdout
    assert "2 tables of the projection differ from the log" in one_line_error(result)


async def test_verify_of_a_live_projector_and_its_health(store: Store, tmp_path: Path) -> None:
    port = free_port()
    token = "verify-token"
    projector = ProjectorSettings(db=tmp_path / "p.duckdb", port=port, url=f"http://127.0.0.1:{port}", token=token)
    settings = Settings(nats=store.log.settings, projector=projector)
    async with running(run_projector, settings, within=60):
        lines: list[str] = []
        assert await verify(settings, None, lines.append) == []
        assert any("verify: control" in line for line in lines), lines
        async with httpx.AsyncClient(base_url=projector.url) as http:
            health = (await http.get("/health")).json()
        assert health["status"] == "ok" and health["missing_tables"] == []


def test_every_table_has_a_digest() -> None:
    with duckdb.connect(":memory:") as con:
        for name in integrity.expected_tables():
            con.execute(f'CREATE TABLE "{name}" (a INT)')
        rows = con.execute(integrity.digests_sql()).fetchall()
    assert [r[0] for r in rows] == sorted(integrity.expected_tables()) and len(rows) > 15
    assert integrity.missing_tables(duckdb.connect(":memory:")) == list(integrity.expected_tables())
