"""Duplicate and ambiguous publishes: client timeouts, the same commands retried from two processes at
once, and retries after the deduplication window has passed → one transition per command."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from voltbus.services.eventlog import EventLog, connect
from voltbus.services.lifecycle import decider

from . import checkers
from .client import event_id, queue_command
from .oplog import OpLog, count, read
from .results import record
from .system import ROOT, System
from .writer import apply, dup_dispatches, retry, retry_commands

N = 40


async def queue_all(log: EventLog, oplog: OpLog, name: str, n: int) -> None:
    for i in range(n):
        await apply(log, oplog, "setup", queue_command(name, i))


def result(fault: str, ops: list[dict[str, object]], stored: checkers.Stored, acked: set[str]) -> None:
    """The result row; and no operation reported failed is in the log."""
    phantom = checkers.failed_but_stored(ops, stored)  # type: ignore[arg-type]
    record(
        fault,
        runs=1,
        operations=len(ops),
        lost=len(checkers.lost(acked, stored)),
        duplicated=len(checkers.duplicated(stored)),
        recovered_s=None,
        failed=count(ops, "fail"),
        failed_but_stored=len(phantom),
    )
    assert not phantom, phantom


def acked_ids(ops: list[dict[str, object]]) -> set[str]:
    return {i for o in ops if o["outcome"] == "ok" and isinstance(o["result"], list) for i in o["result"]}


@pytest.mark.timeout(120)
async def test_same_commands_from_two_processes_make_one_transition_each(bus: System, tmp_path: Path) -> None:
    assert bus.server is not None
    log = await EventLog.connect(bus.client("learner"))
    oplog = OpLog(tmp_path / "ops.jsonl")
    await queue_all(log, oplog, "dup", N)
    writers = [
        subprocess.Popen(  # noqa: ASYNC220 - two real client processes, awaited off the loop
            [
                sys.executable,
                "-m",
                "tests.reliability.writer",
                bus.server.url,
                bus.namespace,
                str(bus.auth / "runner.env"),
                str(tmp_path / f"w{w}.jsonl"),
                f"w{w}",
                "retry",
                "0",
                str(N),
            ],
            cwd=ROOT,
        )  # fmt: skip
        for w in range(2)
    ]
    codes = [await asyncio.to_thread(p.wait, 60) for p in writers]
    stored = await checkers.stored_control(log)
    await log.close()
    ops = read(tmp_path / "ops.jsonl") + read(tmp_path / "w0.jsonl") + read(tmp_path / "w1.jsonl")
    result("duplicate commands from two processes", ops, stored, acked_ids(ops))
    assert codes == [0, 0]
    assert count(ops, "ok", "ClaimRollout") == 2 * 3 * N  # every retry answered ok: applied or already applied
    claims = [h for h in checkers.histories(stored).values()]
    assert all(sum(type(e).__name__ == "AttemptClaimed" for e in h) == 1 for h in claims)
    assert not checkers.duplicated(stored) and not checkers.invalid_paths(stored)


@pytest.mark.timeout(120)
async def test_client_timeouts_settle_to_one_transition_each(bus: System, tmp_path: Path) -> None:
    """Acks that take longer than the client waits: outcomes unknown, then retried with the same ids."""
    oplog = OpLog(tmp_path / "ops.jsonl")
    patient = bus.client("learner")
    log = await EventLog.connect(patient)  # creates the streams
    hasty = EventLog(
        await connect(patient), patient.model_copy(update={"request_timeout_s": 0.0001, "publish_retries": 0})
    )
    for i in range(N):  # appends whose ack often arrives after the client stopped waiting
        events = decider.decide(queue_command("amb", i), decider.initial_state())
        with oplog.record("hasty", "QueueRollout", rollout_id=f"amb-{i}") as op:
            op.result = [e.event_id for e in events]
            await hasty.append(events, expected_seq=0)
    await hasty.close()
    ops = read(tmp_path / "ops.jsonl")
    for o in ops:  # settle: the same command again, with a patient client
        if o["outcome"] == "unknown":
            await apply(log, oplog, "patient", queue_command("amb", int(o["args"]["rollout_id"].split("-")[1])))
    stored = await checkers.stored_control(log)
    await log.close()
    ops = read(tmp_path / "ops.jsonl")
    result("client timeouts (ambiguous acks)", ops, stored, acked_ids(ops))
    assert count(ops, "unknown", "QueueRollout") > 0, "no publish timed out: the fault did not happen"
    assert sorted(checkers.histories(stored)) == sorted(f"amb-{i}" for i in range(N))
    assert not checkers.duplicated(stored)
    assert {e.event.event_id for e in stored} == {event_id(queue_command("amb", i)) for i in range(N)}  # type: ignore[union-attr]


@pytest.mark.timeout(120)
async def test_retries_after_the_dedup_window_make_no_second_transition(bus: System, tmp_path: Path) -> None:
    """Past the window the server no longer knows the message id: the decider and OCC must catch the retry."""
    window = 0.5
    log = await EventLog.connect(bus.client("runner").model_copy(update={"dedup_window_s": window}))
    oplog = OpLog(tmp_path / "ops.jsonl")
    await queue_all(log, oplog, "dup", N)
    claims = retry_commands(dup_dispatches(N))
    appends = []  # each claim's events and the sequence its writer expected
    for cmd in claims:
        state, seq = await log.load(decider, cmd.rollout_id)
        appends.append((decider.decide(cmd, state), seq))
    for events, seq in appends:
        with oplog.record("first", "append", rollout_id=events[0].rollout_id) as op:
            op.result = (await log.append(events, expected_seq=seq)).already_applied
    await asyncio.sleep(2 * window)  # the fault is the elapsed time itself: the window must have passed
    await retry(log, oplog, "late", claims, 2)  # transact: the decider sees the claim already made
    for events, seq in appends:  # the very same append again, as a client that never saw its ack would send it
        with oplog.record("late-raw", "append", rollout_id=events[0].rollout_id) as op:
            op.result = (await log.append(events, expected_seq=seq)).already_applied
    stored = await checkers.stored_control(log)
    await log.close()
    ops = read(tmp_path / "ops.jsonl")
    result("retries after the dedup window", ops, stored, acked_ids(ops))
    late = [o for o in ops if o["process"] == "late-raw"]
    assert len(late) == N and all(o["outcome"] == "ok" and o["result"] is True for o in late)  # already applied
    assert count(ops, "ok", "ClaimRollout") == 2 * N
    assert not checkers.duplicated(stored) and not checkers.invalid_paths(stored)
    assert len(stored) == 2 * N
