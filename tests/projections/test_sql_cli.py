"""`voltbus sql`, `voltbus export` and `voltbus replay` as a user runs them, against a live projector."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import pyarrow.parquet as pq

from voltbus.services.projector.app import run
from voltbus.services.projector.follow import ends_at
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store

from ..conftest import free_port, running
from .conftest import projected
from .workload import write

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


async def cli(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``voltbus ARGS`` in a new process, with ``stdin`` as its input."""
    return await asyncio.to_thread(
        subprocess.run,
        [*VOLTBUS, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


async def test_sql_export_and_replay_on_a_live_system(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 6)
    port = free_port()
    settings = Settings(nats=nats_settings, projector=ProjectorSettings(db=tmp_path / "live.duckdb", port=port))
    env = {
        "VOLTBUS_PROJECTOR__URL": f"http://127.0.0.1:{port}",
        "VOLTBUS_NATS__URL": nats_settings.url,
        "VOLTBUS_NATS__NAMESPACE": nats_settings.namespace,
    }
    async with running(run, settings, within=20):
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
    with duckdb.connect(str(tmp_path / "new.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM rollouts").fetchone() == (6,)
    offline = await cli("sql", "SELECT count(*) AS n FROM spans", "--db", str(tmp_path / "live.duckdb"), env=env)
    assert offline.returncode == 0 and "n" in offline.stdout
    nobody = await cli("sql", "SELECT 1", env={**env, "VOLTBUS_PROJECTOR__URL": "http://127.0.0.1:1"})
    assert nobody.returncode == 1 and "no projector answers at http://127.0.0.1:1/sql" in nobody.stderr


async def test_sql_as_json_parquet_and_at_the_prompt_on_a_file_no_one_writes(store: Store, tmp_path: Path) -> None:
    await write(store, 6)
    db = tmp_path / "p.duckdb"
    await projected(store, db)
    env: dict[str, str] = {}
    ids = "SELECT rollout_id, status, attempt_count FROM rollouts ORDER BY rollout_id"
    query = "SELECT * FROM model_calls ORDER BY seq, seq_index"
    with duckdb.connect(str(db), read_only=True) as con:
        expected, calls = con.sql(ids).to_arrow_table().to_pylist(), con.sql(query).to_arrow_table()
    as_json = await cli("sql", ids, "--db", str(db), "--format", "json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == expected and len(expected) == 6

    out = tmp_path / "calls.parquet"
    as_parquet = await cli("sql", query, "--db", str(db), "--format", "parquet", "--out", str(out), env=env)
    assert as_parquet.returncode == 0, as_parquet.stderr
    written = pq.read_table(out)
    assert written.column_names == calls.column_names and written.num_rows == calls.num_rows > 0
    assert written.to_pylist() == calls.to_pylist()
    no_out = await cli("sql", query, "--db", str(db), "--format", "parquet", env=env)
    assert no_out.returncode == 1 and no_out.stderr.strip() == "voltbus: error: --format parquet needs --out FILE"

    lines = ["SELECT count(*) AS total FROM rollouts", "SELECT nope FROM rollouts", "SELECT 40 + 2 AS answer", ".quit"]
    prompt = await cli("sql", "--db", str(db), env=env, stdin="\n".join([*lines, "SELECT 'after quit'"]) + "\n")
    assert prompt.returncode == 0, prompt.stderr
    banner, total, bad, answer, after = prompt.stdout.split("voltbus> ")  # what each line got, up to the next prompt
    assert banner == "voltbus: read-only SQL on the projection; end with Ctrl-D or .quit\n"
    assert "total" in total and re.search(r"│\s+6 │", total)
    assert bad.startswith("voltbus: error: SQL error: ") and 'column "nope" not found' in bad
    assert "answer" in answer and re.search(r"│\s+42 │", answer)  # the prompt went on after the error
    assert after == ""  # .quit ended it
    at_eof = await cli("sql", "--db", str(db), env=env, stdin="SELECT 7 * 6 AS product\n")
    assert at_eof.returncode == 0 and re.search(r"│\s+42 │", at_eof.stdout)  # the end of the input ends it too
    assert at_eof.stdout.endswith("voltbus> ")
