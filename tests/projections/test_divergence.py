"""The projector notices that it applied messages the log no longer holds, and never diverges silently.

A kill -9 of nats-server can lose the last messages of the spans stream (asynchronous persistence)
after a projector read them; the restarted server then stores new messages at those sequences. Our
streams deny deletes, so the test recreates what the projector sees: it applies messages the log
never stored (the phantom reads, stored before the "crash"), then other messages are stored at those
sequences. The spans tables must be rewound to equal a replay; control must stop and say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from starlette.testclient import TestClient

from tests.conftest import wait_for
from voltbus.schemas.spans import AttemptHeartbeatSent
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.eventlog import Envelope
from voltbus.services.projector.app import Progress, build_app
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import Settings
from voltbus.store import Store

from .conftest import dump
from .workload import telemetry, write


async def follow_until(projector: Projector, store: Store, done: Callable[[], bool]) -> None:
    """Follow the log live until ``done()`` holds (20 s at most)."""
    stop = asyncio.Event()
    following = asyncio.create_task(project(projector, store.log, stop=stop, batch_size=5, max_wait=0.02))
    try:
        await wait_for(lambda: done() or following.done(), 20, "the projection's condition", every=0.02)
    finally:
        stop.set()
        await following
    assert done()


def phantoms(store: Store, attempt: tuple[str, str], after: int, count: int, stamp: float) -> list[Envelope]:
    """``count`` span-stream messages at sequences after ``after`` that the log never stored (read at ``stamp``,
    just before the crash)."""
    rollout_id, attempt_id = attempt
    events = [
        *telemetry(rollout_id, attempt_id, 900),
        AttemptHeartbeatSent(event_id="hb-phantom", rollout_id=rollout_id, attempt_id=attempt_id, worker_id="w", at=1),
    ]
    events += telemetry("ro-phantom", "at-phantom", 901)
    subject = store.topology.span_shard(rollout_id)
    return [Envelope(seq=after + i + 1, subject=subject, time=stamp, event=e) for i, e in enumerate(events[:count])]


@pytest.mark.parametrize("groups", [2, 4], ids=["log-ends-below", "same-seq-other-message"])
async def test_spans_read_then_lost_are_rewound_to_equal_a_replay(store: Store, tmp_path: Path, groups: int) -> None:
    await write(store, 6)
    live = Projector(tmp_path / "live.duckdb")
    await project(live, store.log, ends=await ends_at(store.log))
    good = live.positions["spans"]
    [attempt] = live.con.execute("SELECT rollout_id, attempt_id FROM training_attempts LIMIT 1").fetchall()
    live.apply("spans", phantoms(store, attempt, good, 7, live.stamps["spans"]))  # applied, then lost by the crash
    assert live.positions["spans"] == good + 7
    assert live.con.execute("SELECT count(*) FROM spans WHERE rollout_id = 'ro-phantom'").fetchone() == (1,)
    stored = [e for n in range(groups) for e in telemetry("ro-after", "at-after", n)]
    await store.log.publish_spans(stored)  # stored at those sequences instead
    end = await store.log.feed("spans").last_seq()

    def rewound() -> bool:
        found = live.con.cursor().execute("SELECT count(*) FROM divergences").fetchone()
        return live.positions["spans"] == end and found == (1,)

    await follow_until(live, store, rewound)
    [row] = live.con.execute("SELECT stream, applied_to, good_to, action FROM divergences").fetchall()
    assert row == ("spans", good + 7, good, "rewound")
    tables = dump(live.con)
    live.close()
    rebuilt = Projector(tmp_path / "rebuilt.duckdb")
    await project(rebuilt, store.log, ends=await ends_at(store.log))
    assert tables == dump(rebuilt.con)
    assert not any(r[2] == "ro-phantom" for r in tables["spans"])
    rebuilt.close()


async def test_control_that_differs_from_the_log_stops_and_says_so(store: Store, tmp_path: Path) -> None:
    await write(store, 2)
    live = Projector(tmp_path / "live.duckdb")
    await project(live, store.log, ends=await ends_at(store.log))
    at = live.positions["control"]
    phantom = WorkerStatusReported(event_id="ws-phantom", worker_id="w-phantom", status="idle", at=1.0)
    live.apply("control", [Envelope(seq=at + 1, subject="x", time=live.stamps["control"], event=phantom)])
    await store.log.append([WorkerStatusReported(event_id="ws-real", worker_id="w-real", status="busy", at=2.0)])

    await follow_until(live, store, lambda: "control" in live.diverged)
    [row] = live.con.execute("SELECT stream, applied_to, good_to, action FROM divergences").fetchall()
    assert row == ("control", at + 1, at, "stopped")
    app = build_app(Settings(), live, Progress(live))
    health = TestClient(app, base_url="http://127.0.0.1").get("/health").json()
    assert health["status"] == "diverged"
    assert "control" in health["diverged"]
    live.close()
    with duckdb.connect(str(tmp_path / "live.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM workers WHERE worker_id = 'w-real'").fetchone() == (0,)
