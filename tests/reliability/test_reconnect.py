"""Client disconnects and server restarts while consumers fetch and publish: every service connects
through a proxy the test cuts (all connections dropped at once), and nats-server is killed and
restarted on its store, at random instants → the runner's dispatch consumer, the coordinator and the
projector's feeds recover on their own; every rollout ends, nothing is lost or duplicated."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from voltbus.schemas.resources import PromptTemplate
from voltbus.services.eventlog import EventLog
from voltbus.store import Store

from . import checkers
from .client import Client
from .oplog import OpLog, count, read
from .proxy import Proxy
from .results import record, repeat
from .system import System, bus_system
from .test_kill9 import all_terminal, projector_caught_up

SERVICES = ("projector", "coordinator", "runner1")


async def nemesis(system: System, proxy: Proxy, oplog: OpLog, rng: random.Random, each: int) -> float:
    """Cut every connection, or kill -9 and restart the server, ``each`` times each; when the last ended."""
    schedule = ["cut", "restart"] * each
    rng.shuffle(schedule)
    for fault in schedule:
        await asyncio.sleep(rng.uniform(1.0, 3.0))  # the random instant of the fault, not a synchronization
        with oplog.record("nemesis", fault) as op:
            if fault == "cut":
                op.result = proxy.cut()
            else:
                assert system.server is not None
                await asyncio.to_thread(system.server.kill)
                await asyncio.to_thread(system.server.start)
    return time.monotonic()


@pytest.mark.timeout(400)
async def test_consumers_recover_from_dropped_connections_and_server_restarts(tmp_path: Path) -> None:
    rng = random.Random(int(time.time()))
    system = bus_system(tmp_path)
    assert system.server is not None and system.server.port is not None
    proxy = await Proxy(system.server.port).start()
    system.url = proxy.url
    for service in system.services.values():
        service.env["VOLTBUS_NATS__URL"] = proxy.url
    oplog = OpLog(tmp_path / "ops.jsonl")
    try:
        for name in SERVICES:
            await asyncio.to_thread(system.start, name)
        log = await EventLog.connect(system.client("learner"), name="reliability-client")
        await Store(log).add_resources({"prompt": PromptTemplate(template="{id}", engine="f-string")})
        client, stop = Client(log, oplog), asyncio.Event()
        writing = asyncio.create_task(client.run(stop, every_s=0.2))
        last_fault = await nemesis(system, proxy, oplog, rng, repeat(3))
        stop.set()
        await writing
        await client.settle()
        sent = [c.rollout_id for c in client.sent]
        await all_terminal(log, sent, 120)
        for name in ("runner1", "coordinator"):
            await asyncio.to_thread(system.services[name].stop)
        await projector_caught_up(system, log)
        recovered = time.monotonic() - last_fault
        system.services["projector"].stop()
        stored = await checkers.stored_control(log)
        differences = await checkers.replay_differences(log, tmp_path / "projection.duckdb", tmp_path / "replay.db")
        await log.close()
    finally:
        await proxy.close()
        system.stop()
    ops = read(tmp_path / "ops.jsonl")
    lost, duplicated = checkers.lost(client.acked, stored), checkers.duplicated(stored)
    open_, invalid = checkers.not_terminal(stored, sent), checkers.invalid_paths(stored)
    phantom = checkers.failed_but_stored(ops, stored)
    ended = {rid: checkers.fold(h).status for rid, h in checkers.histories(stored).items()}
    record(
        "connection drops and nats-server restarts under load",
        runs=1,
        operations=len(ops),
        lost=len(lost),
        duplicated=len(duplicated),
        recovered_s=recovered,
        faults=count(ops, "ok", "cut") + count(ops, "ok", "restart"),
        unknown=count(ops, "unknown"),
        rollouts=len(sent),
        failed=sum(1 for rid in sent if ended.get(rid) != "succeeded"),
        failed_but_stored=len(phantom),
    )
    assert not lost and not duplicated and not invalid and not phantom, (lost, duplicated, invalid, phantom)
    assert not open_, f"{len(open_)} rollouts not terminal: {open_[:5]}"
    assert all(ended[rid] == "succeeded" for rid in sent), {r: ended[r] for r in sent if ended[r] != "succeeded"}
    assert not differences, differences
