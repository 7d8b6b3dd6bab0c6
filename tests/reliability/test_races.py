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
from voltbus.services.natsserver import NatsServer
from voltbus.services.settings import NatsSettings

from . import checkers
from .client import queue_command
from .oplog import OpLog, count, read
from .results import record, repeat
from .system import ROOT
from .writer import apply

ROLLOUTS = 20
WRITERS = 4


async def race_once(url: str, namespace: str, work: Path, seed: int) -> tuple[list[dict[str, object]], checkers.Stored]:
    settings = NatsSettings(url=url, namespace=namespace)
    log = await EventLog.connect(settings)
    oplog = OpLog(work / "setup.jsonl")
    for i in range(ROLLOUTS):
        await apply(log, oplog, "setup", queue_command("race", i))
    oplog.close()
    writers = [
        subprocess.Popen(  # noqa: ASYNC220 - real concurrent client processes, awaited off the loop
            [
                sys.executable,
                "-m",
                "tests.reliability.writer",
                url,
                namespace,
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
    stored = await checkers.stored_control(log)
    await log.close()
    files = [work / "setup.jsonl", *(work / f"w{w}.jsonl" for w in range(WRITERS))]
    ops = [o for f in files for o in read(f)]
    return ops, stored


@pytest.mark.timeout(300)
async def test_racing_writers_leave_every_rollout_on_a_valid_path(
    nats_server: NatsServer, namespace: str, tmp_path: Path
) -> None:
    runs = repeat(2)
    for run in range(runs):
        began = time.monotonic()
        work = tmp_path / f"run{run}"
        work.mkdir()
        ops, stored = await race_once(nats_server.url, f"{namespace}r{run}", work, run)
        acked = {i for o in ops if o["outcome"] == "ok" for i in o["result"] or []}  # type: ignore[union-attr]
        lost, duplicated = checkers.lost(acked, stored), checkers.duplicated(stored)
        invalid = checkers.invalid_paths(stored)
        record(
            f"{WRITERS} writers racing conflicting transitions",
            runs=1,
            operations=len(ops),
            lost=len(lost),
            duplicated=len(duplicated),
            recovered_s=None,
            refused=count(ops, "fail"),
            invalid=len(invalid),
            seconds=round(time.monotonic() - began, 1),
        )
        assert not lost and not duplicated and not invalid, (lost, duplicated, invalid)
        assert count(ops, "fail") > 0, "no transition was refused: the writers did not conflict"
        assert len(checkers.histories(stored)) == ROLLOUTS
