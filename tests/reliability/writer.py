"""Writer processes for the duplicate and race tests: each runs commands through ``EventLog.transact``
and records every outcome in its own op log.

``python -m tests.reliability.writer URL NAMESPACE CREDENTIALS OPLOG PROCESS MODE SEED N`` runs one writer
as a separate process, connected as the role whose env file CREDENTIALS names: MODE ``retry`` sends the
same N claim commands as every other retry writer (the same command ids), MODE ``race`` races random
conflicting transitions on rollouts ``race-0..N-1``.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from voltbus.schemas.commands import (
    CancelRollout,
    ClaimRollout,
    ExpireAttempt,
    FinishAttempt,
    MarkAttemptRunning,
    RolloutCommand,
)
from voltbus.services.eventlog import EventLog
from voltbus.services.lifecycle import decider
from voltbus.services.ops.natsauth import read_credentials
from voltbus.services.settings import NatsSettings

from .checkers import encode_command
from .client import event_id, queue_command
from .oplog import OpLog


async def apply(log: EventLog, oplog: OpLog, process: str, cmd: RolloutCommand) -> list[str]:
    """One command through transact, recorded; the ids of the events it appended."""
    appended: list[str] = []
    attempt, command = getattr(cmd, "attempt_id", None), encode_command(cmd)
    with oplog.record(process, type(cmd).__name__, rollout_id=cmd.rollout_id, attempt=attempt, command=command) as op:
        async with asyncio.timeout(10):
            done = await log.transact(decider, cmd.rollout_id, cmd)
        appended = [e.event_id for e in done.events]
        op.result = appended
    return appended


async def claim(log: EventLog, rollout_id: str, attempt_id: str, worker: str) -> ClaimRollout:
    """A claim of the rollout's current dispatch (read now; it goes stale if another writer wins)."""
    state, _ = await log.load(decider, rollout_id)
    dispatch = state.dispatch_event_id or "none"
    return ClaimRollout(
        rollout_id=rollout_id, attempt_id=attempt_id, dispatch_event_id=dispatch, worker_id=worker, at=1.0
    )


def dup_dispatches(n: int) -> dict[str, str]:
    """The dispatch event ids of the rollouts ``dup-0..n-1`` that the test queues (ids are deterministic)."""
    return {cmd.rollout_id: event_id(cmd) for cmd in (queue_command("dup", i) for i in range(n))}


def retry_commands(dispatches: dict[str, str]) -> list[ClaimRollout]:
    """The same claim per rollout for every retrying writer: one command id each."""
    return [
        ClaimRollout(rollout_id=r, attempt_id=f"{r}-a1", dispatch_event_id=d, worker_id="w", at=2.0)
        for r, d in sorted(dispatches.items())
    ]


async def retry(log: EventLog, oplog: OpLog, process: str, commands: list[ClaimRollout], times: int) -> None:
    """Send every command ``times`` times (a client retrying after timeouts)."""
    for _ in range(times):
        for cmd in commands:
            await apply(log, oplog, process, cmd)


async def race(log: EventLog, oplog: OpLog, process: str, rollout_ids: list[str], seed: int) -> None:
    """Random conflicting transitions, in a random order, on every rollout."""
    rng = random.Random(seed)
    for i in range(4 * len(rollout_ids)):
        n = i + (seed % 100) / 10  # the writer in the time: no two writers send the same command
        rid = rng.choice(rollout_ids)
        attempt = f"{process}-{i}"
        kind = rng.choice(["claim", "claim", "run", "succeed", "fail", "cancel", "expire"])
        state, _ = await log.load(decider, rid)
        latest = state.latest.attempt_id if state.latest else attempt
        cmd: RolloutCommand
        if kind == "claim":
            cmd = await claim(log, rid, attempt, process)
        elif kind == "run":
            cmd = MarkAttemptRunning(rollout_id=rid, attempt_id=latest, at=float(n))
        elif kind in ("succeed", "fail"):
            status = "succeeded" if kind == "succeed" else "failed"
            cmd = FinishAttempt(rollout_id=rid, attempt_id=latest, status=status, at=float(n))  # type: ignore[arg-type]
        elif kind == "cancel":
            cmd = CancelRollout(rollout_id=rid, reason=f"by {process}", at=float(n))
        else:
            cmd = ExpireAttempt(rollout_id=rid, attempt_id=latest, status="unresponsive", at=float(n))
        await apply(log, oplog, process, cmd)  # a refused command is recorded as failed, and the writer goes on


def role_settings(url: str, namespace: str, credentials: Path) -> NatsSettings:
    """Client settings of the role whose env file is ``credentials``."""
    env = read_credentials(credentials.parent, credentials.stem)
    user, password = env["VOLTBUS_NATS__USER"], env["VOLTBUS_NATS__PASSWORD"]
    return NatsSettings(url=url, namespace=namespace, request_timeout_s=2.0, user=user, password=password)


async def main(
    url: str, namespace: str, creds: str, oplog_path: str, process: str, mode: str, seed: int, n: int
) -> None:
    log = await EventLog.connect(role_settings(url, namespace, Path(creds)), name=process)
    oplog = OpLog(Path(oplog_path))
    try:
        if mode == "retry":
            await retry(log, oplog, process, retry_commands(dup_dispatches(n)), 3)
        else:
            await race(log, oplog, process, [f"race-{i}" for i in range(n)], seed)
    finally:
        oplog.close()
        await log.close()


if __name__ == "__main__":
    url, ns, creds, path, proc, mode, seed, n = sys.argv[1:9]
    asyncio.run(main(url, ns, creds, path, proc, mode, int(seed), int(n)))
