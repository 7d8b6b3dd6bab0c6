"""`voltbus sql`, `voltbus export` and `voltbus replay` as a user runs them, against a live projector."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pyarrow.parquet as pq

from voltbus.projections.follow import ends_at
from voltbus.services.projector.app import run
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store

from ..conftest import free_port
from .workload import write

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


async def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [*VOLTBUS, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


async def test_sql_export_and_replay_on_a_live_system(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 6)
    port = free_port()
    settings = Settings(nats=nats_settings, projector=ProjectorSettings(db=tmp_path / "live.duckdb", port=port))
    stop, ready = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(run(settings, stop, ready))
    env = {
        "VOLTBUS_PROJECTOR__URL": f"http://127.0.0.1:{port}",
        "VOLTBUS_NATS__URL": nats_settings.url,
        "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace,
    }
    try:
        await asyncio.wait_for(ready.wait(), 20)
        ends = await ends_at(store.log)
        async with httpx.AsyncClient() as client, asyncio.timeout(20):
            while True:  # the endpoint waits until the projection has applied the log's current end
                r = await client.post(
                    env["VOLTBUS_PROJECTOR__URL"] + "/sql", json={"sql": "SELECT 1", "min_seq": ends, "timeout": 5}
                )
                if r.status_code == 200:
                    break
        table = await cli("sql", "SELECT status, count(*) AS n FROM rollouts GROUP BY status ORDER BY status", env=env)
        assert table.returncode == 0, table.stderr
        assert "succeeded" in table.stdout and "queuing" in table.stdout
        as_csv = await cli("sql", "SELECT rollout_id FROM rollouts ORDER BY rollout_id", "--format", "csv", env=env)
        assert len(as_csv.stdout.strip().splitlines()) == 1 + 6
        refused = await cli("sql", "DELETE FROM rollouts", env=env)
        assert refused.returncode == 1 and "read-only" in refused.stderr and "Traceback" not in refused.stderr
        locked = await cli("sql", "SELECT 1", "--db", str(tmp_path / "live.duckdb"), env=env)
        assert locked.returncode == 1 and "open by a running projector" in locked.stderr
        exported = await cli("export", "--to", str(tmp_path / "parquet"), env=env)
        assert exported.returncode == 0, exported.stderr
        assert pq.read_table(tmp_path / "parquet" / "rollouts.parquet").num_rows == 6
        assert not (tmp_path / "parquet" / "rollout_states.parquet").exists()
        paged = await cli("export", "--to", str(tmp_path / "paged"), env=env | {"VOLTBUS_PROJECTOR__MAX_ROWS": "4"})
        assert paged.returncode == 0, paged.stderr  # pages of 4 rows: a table larger than one answer, whole
        ids = [
            sorted(pq.read_table(d / "rollouts.parquet").column("rollout_id").to_pylist())
            for d in (tmp_path / "paged", tmp_path / "parquet")
        ]
        assert ids[0] == ids[1] and len(ids[0]) == 6
        assert "export: " in paged.stdout and " rows in " in paged.stdout
        replayed = await cli("replay", "--db", str(tmp_path / "new.duckdb"), env=env)
        assert replayed.returncode == 0, replayed.stderr
        assert "rebuilt" in replayed.stdout and f"control seq {ends['control']}" in replayed.stdout
        again = await cli("replay", "--db", str(tmp_path / "new.duckdb"), env=env)
        assert again.returncode == 1 and "already exists" in again.stderr
    finally:
        stop.set()
        await serving
    with duckdb.connect(str(tmp_path / "new.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM rollouts").fetchone() == (6,)
    offline = await cli("sql", "SELECT count(*) AS n FROM spans", "--db", str(tmp_path / "live.duckdb"), env=env)
    assert offline.returncode == 0 and "n" in offline.stdout
    nobody = await cli("sql", "SELECT 1", env={**env, "VOLTBUS_PROJECTOR__URL": "http://127.0.0.1:1"})
    assert nobody.returncode == 1 and "no projector answers at http://127.0.0.1:1/sql" in nobody.stderr
