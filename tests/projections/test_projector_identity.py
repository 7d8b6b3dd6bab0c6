"""Commands that query a projector say which one answered (its bus and namespace), and refuse one that follows
another bus or namespace instead of printing its rows (issue 28: `voltbus sql` printed 0 rows from another one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from voltbus.services.projector.app import run
from voltbus.services.settings import HttpSettings, NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store

from ..conftest import free_port, running
from .test_sql_cli import cli
from .workload import write


@asynccontextmanager
async def projector(nats: NatsSettings, db: Path, token: str | None = None) -> AsyncIterator[str]:
    """A projector of ``nats``'s namespace serving SQL; yields its URL."""
    port = free_port()
    cfg = ProjectorSettings(db=db, port=port, token=token)
    async with running(run, Settings(nats=nats, projector=cfg), within=30):
        yield f"http://127.0.0.1:{port}"


def env_of(nats: NatsSettings) -> dict[str, str]:
    return {"VOLTBUS_NATS__URL": nats.url, "VOLTBUS_NATS__NAMESPACE": nats.namespace}


async def test_identity_names_the_bus_without_credentials(nats_settings: NatsSettings, tmp_path: Path) -> None:
    creds = nats_settings.url.replace("nats://", "nats://someone:secret@")
    async with projector(nats_settings.model_copy(update={"url": creds}), tmp_path / "p.duckdb") as url:
        async with httpx.AsyncClient() as client:
            found = (await client.get(f"{url}/identity")).json()
    assert found["bus"] == nats_settings.url and "secret" not in str(found)
    assert found["namespace"] == nats_settings.namespace and found["bus_id"]


async def test_sql_says_which_projector_answered_and_refuses_another_namespaces(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    await write(store, 3)
    other = nats_settings.model_copy(update={"namespace": nats_settings.namespace + "x"})
    async with (
        projector(nats_settings, tmp_path / "ours.duckdb") as ours,
        projector(other, tmp_path / "o.duckdb") as theirs,
    ):
        env = env_of(nats_settings)
        answered = await cli("sql", "SELECT 1 AS one", "--projector-url", ours, "--format", "csv", env=env)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.splitlines() == ['"one"', "1"]  # the identity line goes to stderr, not into the rows
        named = f"projector {ours} (bus {nats_settings.url}, namespace {nats_settings.namespace})"
        assert named in answered.stderr
        refused = await cli("sql", "SELECT count(*) FROM rollouts", "--projector-url", theirs, env=env)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert f"refusing projector {theirs}" in line and f"namespace {other.namespace}" in line
        by_env = await cli("sql", "SELECT 1", env=env | {"VOLTBUS_PROJECTOR__URL": theirs})
        assert by_env.returncode == 1 and "refusing" in by_env.stderr
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text('{"q": 1}\n')  # (a missing or empty task file is refused first, before the projector is asked)
        learner = await cli("learner", "--tasks", str(tasks), "--projector-url", theirs, env=env)
        assert learner.returncode == 1 and f"refusing projector {theirs}" in learner.stderr


async def test_a_projector_of_another_bus_is_refused(nats_settings: NatsSettings, tmp_path: Path) -> None:
    """Same namespace, another bus (another nats-server): the bus ids differ."""
    from ..conftest import start_server

    server = start_server(tmp_path / "other-bus")
    try:
        other = nats_settings.model_copy(update={"url": server.url})
        async with projector(other, tmp_path / "o.duckdb") as theirs:
            refused = await cli("sql", "SELECT 1", "--projector-url", theirs, env=env_of(nats_settings))
        assert refused.returncode == 1 and f"refusing projector {theirs} (bus {server.url}" in refused.stderr
    finally:
        server.stop()


async def test_something_else_on_the_projector_port_is_refused(nats_settings: NatsSettings) -> None:
    """Another program answering on the port (here: no HTTP server at all would be 'no projector answers')."""
    from starlette.applications import Starlette

    from voltbus.services.serving import build_server

    port = free_port()
    server = build_server(Starlette(), "127.0.0.1", port, HttpSettings())
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        refused = await cli("sql", "SELECT 1", "--projector-url", f"http://127.0.0.1:{port}", env=env_of(nats_settings))
        assert refused.returncode == 1 and "is not a voltbus projector" in refused.stderr
    finally:
        server.should_exit = True
        await serving


async def test_a_missing_token_is_named(nats_settings: NatsSettings, tmp_path: Path) -> None:
    async with projector(nats_settings, tmp_path / "p.duckdb", token="s3cret-token-for-sql") as url:
        refused = await cli("sql", "SELECT 1", "--projector-url", url, env=env_of(nats_settings))
        allowed = await cli(
            "sql",
            "SELECT 1",
            "--projector-url",
            url,
            env=env_of(nats_settings) | {"VOLTBUS_PROJECTOR__TOKEN": "s3cret-token-for-sql"},
        )
    assert (
        refused.returncode == 1 and "refused the SQL token (HTTP 401): set VOLTBUS_PROJECTOR__TOKEN" in refused.stderr
    )
    assert allowed.returncode == 0, allowed.stderr
