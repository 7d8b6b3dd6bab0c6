"""kill -9 of the projector process at random points of a 20,000-event stream, five times, while the
stream is being written: every table ends with one row per event-derived key, the checkpoints at the
last sequences, and equal to a full rebuild. The kill instants come from a seed the failure message
names (``VOLTBUS_TEST_SEED`` replays one)."""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import httpx
import msgspec
import pytest

from voltbus.schemas.base import derive_id
from voltbus.schemas.rollouts import AttemptClaimed, RolloutQueued
from voltbus.services.projector.follow import ends_at
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from ..conftest import free_port, wait_for
from .conftest import dump
from .test_projector import build
from .workload import telemetry


async def write_chunk(store: Store, chunk: int) -> None:
    """2,000 control events (1,000 rollouts queued and claimed) and 2,001 telemetry events."""
    queued = [
        RolloutQueued(
            event_id=derive_id("q", chunk, i),
            rollout_id=f"ro-{chunk}-{i}",
            input=msgspec.Raw(b"{}"),
            queued_at=float(i),
        )
        for i in range(1000)
    ]
    await store.log.append_many(queued, expected_seq=0)
    for q in queued:  # plain appends: this test is about the projector, not the lifecycle rules
        claim = AttemptClaimed(
            event_id=derive_id("c", q.rollout_id), rollout_id=q.rollout_id, attempt_id="a1", sequence_id=1, at=1.0
        )
        await store.log.append([claim])
    await store.log.publish_spans([e for i in range(667) for e in telemetry(f"ro-{chunk}-{i}", "a1", i)])


def projector_env(nats: NatsSettings, db: Path, port: int, **more: str) -> dict[str, str]:
    """The environment of a ``python -m voltbus.services.projector`` on the test's bus, ``db`` and ``port``;
    ``more``: other projector settings (``batch_size="500"``)."""
    return {
        **os.environ,
        "VOLTBUS_NATS__URL": nats.url,
        "VOLTBUS_NATS__NAMESPACE": nats.namespace,
        "VOLTBUS_PROJECTOR__DB": str(db),
        "VOLTBUS_PROJECTOR__PORT": str(port),
        **{f"VOLTBUS_PROJECTOR__{name.upper()}": value for name, value in more.items()},
    }


def start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "voltbus.services.projector"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def health(url: str) -> dict[str, int] | None:
    try:
        async with httpx.AsyncClient() as client:
            return (await client.get(url + "/health", timeout=1)).json()["positions"]
    except httpx.TransportError:
        return None


def seed() -> int:
    """The kill instants' seed: ``VOLTBUS_TEST_SEED`` when set (to replay a failure), else a new one."""
    return int(os.environ.get("VOLTBUS_TEST_SEED") or random.randrange(2**31))


def unique(db: Path, table: str, key: str) -> tuple[int, int]:
    """(rows, distinct keys) of ``table``."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT count(*), count(DISTINCT ({key})) FROM {table}").fetchone()  # type: ignore[return-value]
    finally:
        con.close()


@pytest.mark.long
@pytest.mark.timeout(240)
async def test_projector_killed_five_times_loses_and_doubles_nothing(
    store: Store, nats_settings: NatsSettings, tmp_path: Path
) -> None:
    chosen = seed()
    rng, why = random.Random(chosen), f"VOLTBUS_TEST_SEED={chosen}"
    db, port = tmp_path / "p.duckdb", free_port()
    env = projector_env(nats_settings, db, port, batch_size="500")
    url = f"http://127.0.0.1:{port}"
    killed_at = []
    control = store.log.feed("control")

    async def at_least(seq: int) -> bool:
        return await control.last_seq() >= seq

    async def applied(seq: int) -> bool:
        return ((await health(url)) or {}).get("control", 0) >= seq

    for chunk in range(5):
        proc, writing = start(env), None

        async def answers(proc: subprocess.Popen[bytes] = proc) -> bool:
            assert proc.poll() is None, "the projector exited"
            return await health(url) is not None

        try:  # started (its import takes seconds on a loaded machine)...
            await wait_for(answers, 60, "the projector's health endpoint", every=0.05)
            base = await control.last_seq()
            writing = asyncio.create_task(write_chunk(store, chunk))  # ...following the stream as it grows...
            target = base + rng.randrange(1, 2000)  # a random point of this chunk's 2,000 control events
            if chunk < 3:  # ...killed mid-write, once the log holds it
                await wait_for(functools.partial(at_least, target), 60, f"control seq {target}", every=0.005)
            else:  # ...or in its catch-up after the write, once the projector has applied it
                await writing
                await wait_for(functools.partial(applied, target), 60, f"projected control seq {target}", every=0.005)
            killed_at.append((await health(url), writing.done()))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if writing is not None:
                await writing
    ends = await ends_at(store.log)
    assert ends["control"] >= 10_000 and ends["spans"] >= 10_000
    proc = start(env)

    async def caught_up() -> bool:
        return await health(url) == ends

    try:
        await wait_for(caught_up, 120, f"the projector at {ends} ({why})", every=0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [done for _, done in killed_at] == [False, False, False, True, True], (killed_at, why)
    assert all(k is not None for k, _ in killed_at), (killed_at, why)  # each kill hit a running projector
    for table, key, rows in (
        ("rollouts", "rollout_id", 5000),
        ("attempts", "rollout_id, attempt_id", 5000),
        ("spans", "event_id", 5 * 667),
        ("model_calls", "event_id", 5 * 667),
        ("rewards", "event_id", 5 * 667),
    ):
        assert unique(db, table, key) == (rows, rows), (table, why)
    final = dump(db)
    assert dict((s, q) for s, q, _ in final["checkpoints"]) == ends, why
    assert final == await build(store, tmp_path / "rebuilt.duckdb"), why
