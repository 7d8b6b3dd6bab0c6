"""Poison messages against real service processes: undecodable bytes, an unknown event type, an event
illegal for the state machine, a dispatch message no runner can decode, and an agent that throws →
each parked with its reason and sequence (the projector's quarantine table, a failed rollout with its
reason), visible in SQL, and no consumer blocked: rollouts queued after the poison all succeed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from tests.conftest import wait_for
from voltbus.schemas.commands import CancelRollout, QueueRollout, StartRollout
from voltbus.schemas.resources import PromptTemplate, ResourcesPublished
from voltbus.schemas.rollouts import AttemptSucceeded
from voltbus.schemas.training import RunStarted
from voltbus.services.eventlog import EventLog
from voltbus.services.lifecycle import decider
from voltbus.store import Store

from . import checkers
from .oplog import OpLog, read
from .results import record
from .system import System, bus_system, sql
from .writer import apply

GOOD = 10
MAX_DELIVER = 3


def task(rollout_id: str, **fields: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode({"id": rollout_id, **fields}))


async def queue(log: EventLog, oplog: OpLog, rollout_id: str, **fields: object) -> None:
    cmd = QueueRollout(rollout_id=rollout_id, input=task(rollout_id, **fields), mode="train", at=time.time())
    await apply(log, oplog, "client", cmd)


async def start_elsewhere(log: EventLog, oplog: OpLog, rollout_id: str) -> None:
    """A rollout that is not in the dispatch queue (started directly by some worker)."""
    cmd = StartRollout(rollout_id=rollout_id, attempt_id="a1", input=task(rollout_id), worker_id="ghost", at=1.0)
    await apply(log, oplog, "client", cmd)


async def forge(system: System, oplog: OpLog) -> None:
    """Events outside the role's permissions, sent as a runner would (agent code holding its user): a
    training-run event and a resources version. The bus refuses both: ``fail``, and they must be absent."""
    forger = await EventLog.connect(system.client("runner"), name="forger")
    run = RunStarted(event_id="forged-run", run_id="forged", algorithm="grpo", config={}, at=1.0)
    version = ResourcesPublished(
        event_id="forged-res", name="main", resources_id="forged", version=99, resources={}, created_at=1.0
    )
    try:
        for event in (run, version):
            with oplog.record("forger", "append", what=type(event).__name__, event_ids=[event.event_id]):
                await forger.append([event])
    finally:
        await forger.close()


async def inject(log: EventLog, oplog: OpLog) -> dict[str, int]:
    """The poison, raw on the bus (past every validation a well-behaved client has); the stored sequences."""
    topo, seqs = log.topology, {}
    with oplog.record("poisoner", "publish", what="undecodable"):
        seqs["undecodable"] = (await log.js.publish(topo.rollout_events("poison-bytes"), b"\xff{not json")).seq
    unknown = b'{"type":"RolloutTeleported","event_id":"tp1","rollout_id":"poison-type"}'
    with oplog.record("poisoner", "publish", what="unknown type"):
        seqs["unknown type"] = (await log.js.publish(topo.rollout_events("poison-type"), unknown)).seq
    await start_elsewhere(log, oplog, "poison-illegal")
    illegal = AttemptSucceeded(event_id="ill1", rollout_id="poison-illegal", attempt_id="a-never-claimed", at=2.0)
    with oplog.record("poisoner", "append", what="illegal"):
        seqs["illegal"] = (await log.append([illegal])).seq  # no decider, no OCC: a buggy writer
    await apply(log, oplog, "client", CancelRollout(rollout_id="poison-illegal", reason="cleanup", at=3.0))
    await start_elsewhere(log, oplog, "poison-q")
    with oplog.record("poisoner", "publish", what="undecodable dispatch"):
        seqs["undecodable dispatch"] = (await log.js.publish(topo.rollout_queue("poison-q"), b"\x00garbage")).seq
    await queue(log, oplog, "poison-throw", throw=True)
    return seqs


async def until_terminal(log: EventLog, rollout_ids: list[str], deadline_s: float) -> float:
    began = time.monotonic()

    async def ended() -> bool:  # other processes' progress, read from the log
        return not checkers.not_terminal(await checkers.stored_control(log), rollout_ids)

    await wait_for(ended, deadline_s, f"{rollout_ids} to end", every=0.2)
    return time.monotonic() - began


@pytest.mark.timeout(240)
async def test_poison_is_parked_with_its_reason_and_blocks_no_consumer(tmp_path: Path) -> None:
    env = {"VOLTBUS_NATS__DISPATCH_MAX_DELIVER": str(MAX_DELIVER), "VOLTBUS_NATS__DISPATCH_ACK_WAIT_S": "2"}
    system = bus_system(tmp_path, env)
    oplog = OpLog(tmp_path / "ops.jsonl")
    try:
        for name in ("projector", "coordinator", "runner1"):
            await asyncio.to_thread(system.start, name)
        settings = {"dispatch_max_deliver": MAX_DELIVER, "dispatch_ack_wait_s": 2.0}
        log = await EventLog.connect(system.client("learner").model_copy(update=settings), name="poisoner")
        await Store(log).add_resources({"prompt": PromptTemplate(template="{id}", engine="f-string")})
        seqs = await inject(log, oplog)
        await forge(system, oplog)
        good = [f"good-{i}" for i in range(GOOD)]
        for rid in good:
            await queue(log, oplog, rid)
        recovered = await until_terminal(log, [*good, "poison-throw", "poison-q"], 90)
        stored = await checkers.stored_control(log) + await checkers.stored_spans(log)
        ends = {s: await log.feed(s).last_seq() for s in ("control", "spans")}
        quarantined = await sql(system, "SELECT stream, seq, reason FROM quarantine ORDER BY seq", ends)
        rollouts = await sql(system, "SELECT rollout_id, status, reason FROM rollouts ORDER BY rollout_id", ends)
        await log.close()
    finally:
        system.stop()
    ops = read(tmp_path / "ops.jsonl")
    status = {r["rollout_id"]: (r["status"], r["reason"]) for r in rollouts}
    acked = {i for o in ops if o["outcome"] == "ok" and isinstance(o["result"], list) for i in o["result"]}
    record(
        "poison messages (undecodable, unknown type, illegal, undecodable dispatch, throwing agent)",
        runs=1,
        operations=len(ops),
        lost=len(checkers.lost(acked, stored)),
        duplicated=len(checkers.duplicated(stored)),
        recovered_s=recovered,
        quarantined=len(quarantined),
        failed_but_stored=len(checkers.failed_but_stored(ops, stored)),
    )
    assert [o["outcome"] for o in ops if o["process"] == "forger"] == ["fail", "fail"]  # refused: PermissionDenied
    assert not checkers.failed_but_stored(ops, stored)  # the forged events and every refused command are absent
    assert [(q["stream"], q["seq"]) for q in quarantined] == [
        ("control", seqs["undecodable"]),
        ("control", seqs["unknown type"]),
        ("control", seqs["undecodable dispatch"]),
    ]
    assert all(q["reason"] for q in quarantined)
    assert all(status[r][0] == "succeeded" for r in good), status
    assert status["poison-throw"][0] == "failed" and "AgentCrashed" in (status["poison-throw"][1] or "")
    q_status, q_reason = status["poison-q"]
    assert q_status == "failed" and f"dispatch message {seqs['undecodable dispatch']} was delivered" in q_reason
    assert status["poison-illegal"][0] == "cancelled"  # the illegal event changed nothing
    illegal = checkers.invalid_paths(stored)
    assert list(illegal) == ["poison-illegal"] and "AttemptSucceeded is not a transition" in illegal["poison-illegal"]
    assert decider.is_terminal(checkers.fold(checkers.histories(stored)["poison-illegal"]))
