"""K writer processes race conflicting transitions (claim, run, succeed, fail, cancel, expire) on the
same rollouts → exactly one writer wins each optimistic-concurrency slot, and every rollout's history
is a valid path of the state machine (checked by folding it through the decider)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voltbus.services.eventlog import EventLog

from . import checkers
from .client import queue_command
from .oplog import OpLog, count, read
from .results import record, repeat
from .system import ROOT, System
from .writer import apply

ROLLOUTS = 20
WRITERS = 4


async def race_once(system: System, work: Path, seed: int) -> tuple[list[dict[str, object]], checkers.Stored]:
    """One round on an authenticated bus: the learner queues, the writers race as runners, the admin reads."""
    assert system.server is not None
    learner = await EventLog.connect(system.client("learner"), name="setup")
    oplog = OpLog(work / "setup.jsonl")
    for i in range(ROLLOUTS):
        await apply(learner, oplog, "setup", queue_command("race", i))
    oplog.close()
    await learner.close()
    writers = [
        subprocess.Popen(  # noqa: ASYNC220 - real concurrent client processes, awaited off the loop
            [
                sys.executable,
                "-m",
                "tests.reliability.writer",
                system.server.url,
                system.namespace,
                str(system.auth / "runner.env"),
                str(work / f"w{w}.jsonl"),
                f"w{w}",
                "race",
                str(seed * 100 + w),
                str(ROLLOUTS),
            ],
            cwd=ROOT,
        )  # fmt: skip
        for w in range(WRITERS)
    ]
    codes = [await asyncio.to_thread(p.wait, 120) for p in writers]
    assert codes == [0] * WRITERS
    log = await EventLog.connect(system.nats, name="checker")
    stored = await checkers.stored_control(log)
    await log.close()
    files = [work / "setup.jsonl", *(work / f"w{w}.jsonl" for w in range(WRITERS))]
    ops = [o for f in files for o in read(f)]
    return ops, stored


@pytest.mark.timeout(300)
async def test_racing_writers_leave_every_rollout_on_a_valid_path(tmp_path: Path) -> None:
    runs = repeat(2)
    for run in range(runs):
        began = time.monotonic()
        work = tmp_path / f"run{run}"
        system = System(work, namespace=f"race{run}")
        system.start_bus()
        try:
            ops, stored = await race_once(system, work, run)
        finally:
            system.stop()
        acked = {i for o in ops if o["outcome"] == "ok" for i in o["result"] or []}  # type: ignore[union-attr]
        lost, duplicated = checkers.lost(acked, stored), checkers.duplicated(stored)
        invalid, phantom = checkers.invalid_paths(stored), checkers.failed_but_stored(ops, stored)
        record(
            f"{WRITERS} writers racing conflicting transitions",
            runs=1,
            operations=len(ops),
            lost=len(lost),
            duplicated=len(duplicated),
            recovered_s=None,
            refused=count(ops, "fail"),
            failed_but_stored=len(phantom),
            invalid=len(invalid),
            seconds=round(time.monotonic() - began, 1),
        )
        assert not lost and not duplicated and not invalid, (lost, duplicated, invalid)
        assert not phantom, phantom
        assert count(ops, "fail") > 0, "no transition was refused: the writers did not conflict"
        assert len(checkers.histories(stored)) == ROLLOUTS
