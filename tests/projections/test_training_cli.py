"""`voltbus reproject`, `voltbus data check` and `voltbus export-training` as a user runs them: real bus,
real DuckDB files, real processes; the live projector's endpoint and a --db file give the same report."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import msgspec
import pyarrow.parquet as pq

from voltbus.projections.adapter import AdapterSettings, settings_id
from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled
from voltbus.services.projector.app import run
from voltbus.services.projector.follow import ends_at
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import EnqueueRolloutRequest, Store

from ..conftest import free_port, running
from .test_training import dump, rebuild
from .training_workload import write

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]
CHAT = {"messages": [{"role": "user", "content": "2+2?"}], "tools": [{"type": "function", "function": {"name": "f"}}]}
REPLY = {"id": "x", "choices": [{"message": {"role": "assistant", "content": "4", "refusal": None}}]}


async def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [*VOLTBUS, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def env_of(nats: NatsSettings, port: int = 1) -> dict[str, str]:
    return {
        "VOLTBUS_NATS__URL": nats.url,
        "VOLTBUS_NATS__NAMESPACE": nats.namespace,
        "VOLTBUS_PROJECTOR__URL": f"http://127.0.0.1:{port}",
    }


async def write_chat(store: Store) -> None:
    """Two more ended attempts: one chat call with text and ids, one completions call without ids; one with no calls."""
    await store.enqueue_many_rollouts(
        [EnqueueRolloutRequest(input={"task_id": f"chat{i}"}, mode="val") for i in (0, 1)]
    )
    first, second = await store.dequeue_many_rollouts(limit=2, worker_id="w-2")
    rid, aid = first.rollout_id, first.attempt.attempt_id

    def call(n: int, request: dict, response: dict, ids: bool) -> ModelCalled:  # type: ignore[type-arg]
        return ModelCalled(
            event_id=derive_id(rid, "chat", n),
            rollout_id=rid,
            attempt_id=aid,
            call_id=f"{rid}-chat{n}",
            model="tiny",
            request=msgspec.Raw(json.dumps(request).encode()),
            response=msgspec.Raw(json.dumps(response).encode()),
            prompt_ids=[1, 2, 3] if ids else [],
            response_ids=[4] if ids else [],
            latency_s=0.01,
            at=1.0 + n,
        )

    await store.log.publish_spans(
        [call(0, CHAT, REPLY, True), call(1, {"prompt": "2+2="}, {"choices": [{"text": "4"}]}, False)]
    )
    for r in (first, second):
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")


async def test_reproject_builds_a_new_file_with_other_settings(store: Store, tmp_path: Path) -> None:
    await write(store, 6)
    env = env_of(store.log.settings)
    toml = tmp_path / "adapter.toml"
    toml.write_text('reward_policy = "final_to_last"\ngamma = 0.5\naggregation = "call"\n')
    other = AdapterSettings(reward_policy="final_to_last", gamma=0.5, aggregation="call")
    done = await cli("reproject", "--adapter", str(toml), "--db", str(tmp_path / "b.duckdb"), env=env)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert "reprojected 6 attempts into 18 triplets and 18 trajectories" in last and settings_id(other) in last
    with (
        duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as cli_built,
        await rebuild(store, tmp_path / "in_process.duckdb", other) as in_process,
    ):
        assert dump(cli_built) == dump(in_process)  # the same rows as the projector builds with those settings
        assert cli_built.execute("SELECT count(*) FROM rollouts").fetchone() == (6,)  # other tables come along
    again = await cli("reproject", "--adapter", "{}", "--db", str(tmp_path / "b.duckdb"), env=env)
    assert again.returncode == 1 and "already exists" in again.stderr and "--force" in again.stderr
    forced = await cli("reproject", "--adapter", "{}", "--db", str(tmp_path / "b.duckdb"), "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    assert f"settings_id {settings_id(AdapterSettings())}" in forced.stdout
    typo = await cli("reproject", "--adapter", '{"gama": 1}', "--db", str(tmp_path / "c.duckdb"), env=env)
    assert typo.returncode == 1 and "unknown field `gama`" in typo.stderr and "Traceback" not in typo.stderr
    nobus = await cli(
        "reproject", "--adapter", "{}", "--db", str(tmp_path / "d.duckdb"), "--nats-url", "nats://127.0.0.1:1", env=env
    )
    assert nobus.returncode == 1 and "cannot reach NATS at nats://127.0.0.1:1" in nobus.stderr
    assert "Traceback" not in nobus.stderr and not (tmp_path / "c.duckdb").exists()


async def test_data_check_and_export_live_and_from_a_file(store: Store, tmp_path: Path) -> None:
    await write(store, 8)
    await write_chat(store)
    port = free_port()
    settings = Settings(nats=store.log.settings, projector=ProjectorSettings(db=tmp_path / "live.duckdb", port=port))
    settings.projector.max_rows = 5  # exports must page, never stop at the row limit
    env = env_of(store.log.settings, port) | {"VOLTBUS_PROJECTOR__MAX_ROWS": "5"}
    async with running(run, settings, within=20):
        ends = await ends_at(store.log)
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"http://127.0.0.1:{port}/sql", json={"sql": "SELECT 1", "min_seq": ends, "timeout": 10}
            )
            assert r.status_code == 200
        live = await cli("data", "check", env=env)
        assert live.returncode == 0, live.stderr
        view = await cli("sql", "SELECT mode, attempts, no_token_ids FROM data_quality", "--format", "csv", env=env)
        assert view.stdout.splitlines()[1:] == ['"train",8,0', '"val",2,1'], view.stdout
        jsonl = await cli("export-training", "--to", str(tmp_path / "all.jsonl"), "--format", "jsonl", env=env)
        assert jsonl.returncode == 0, jsonl.stderr
    offline = await cli("data", "check", "--db", str(tmp_path / "live.duckdb"), env=env)
    assert offline.stdout == live.stdout  # the endpoint and the file give the same report
    report = live.stdout
    assert "mode train" in report and "mode val" in report and "8 attempts, 24 calls (24 selected)" in report
    assert "! 2 prefix mismatches (trajectory rows split) = 8.33 per 100 calls" in report
    assert "! 1 attempts ended with zero triplets" in report and "! 1 calls without token ids" in report
    assert "log: 0 quarantined events, 0 gaps" in report
    strict = await cli("data", "check", "--db", str(tmp_path / "live.duckdb"), "--strict", env=env)
    assert strict.returncode == 1 and "voltbus: error: data check found" in strict.stderr
    # JSONL: only the chat call has usable text; the 24 workload calls (request {}) and the completion
    # call (no ids, but text) are written or counted, never dropped without a word
    lines = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert lines == [
        {"messages": [*CHAT["messages"], {"role": "assistant", "content": "4"}], "tools": CHAT["tools"]},
        {"prompt": "2+2=", "completion": "4"},
    ]
    assert "2 of 26 triplets rows" in jsonl.stdout and "1 without token ids" in jsonl.stdout
    assert "24 without usable request/response text (not written)" in jsonl.stdout
    db = ["--db", str(tmp_path / "live.duckdb")]
    out = tmp_path / "train.parquet"
    parquet = await cli(
        "export-training", "--to", str(out), "--format", "parquet", "--table", "trajectories",
        "--mode", "train", "--where", "NOT after_mismatch", *db, env=env,
    )  # fmt: skip
    assert parquet.returncode == 0, parquet.stderr
    with duckdb.connect(str(tmp_path / "live.duckdb"), read_only=True) as con:
        expected = con.execute(
            "SELECT rollout_id, row_index, response_ids FROM trajectories WHERE mode = 'train' AND NOT after_mismatch"
            " ORDER BY rollout_id, attempt_id, row_index"
        ).fetchall()
    got = pq.read_table(out).select(["rollout_id", "row_index", "response_ids"]).to_pylist()
    assert [tuple(r.values()) for r in got] == expected and len(expected) == 8  # more than one page of 5
    versions = await cli("export-training", "--to", str(out), "--format", "parquet", "--versions", "7..9", *db, env=env)
    assert versions.returncode == 0 and "0 of 0 triplets rows" in versions.stdout
    assert pq.read_table(out).num_rows == 0 and "response_ids" in pq.read_table(out).column_names
    bad = await cli("export-training", "--to", str(out), "--format", "csv", *db, env=env)
    assert bad.returncode == 1 and "--format must be parquet or jsonl" in bad.stderr
