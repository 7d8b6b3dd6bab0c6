"""Backpressure: a span burst holding ten seconds of the projector's work, published while the
projector is paused (SIGSTOP: capacity 0), while a slow runner holds a backlog of rollouts → bounded
memory in every process (RSS from /proc), the projector's lag back under 1 s afterwards, nothing
lost; and a full stream answers publishers with an explicit error while keeping what it acknowledged."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from voltbus.schemas.errors import PublishFailed
from voltbus.schemas.resources import PromptTemplate
from voltbus.services.eventlog import EventLog
from voltbus.store import Store

from . import checkers
from .memory import Sampler
from .oplog import OpLog
from .results import record
from .system import System, bus_system
from .test_poison import queue, until_terminal

WARMUP = 1000
"""Telemetry triples (span, model call, reward) used to measure the projector's rate."""
BURST_CAP = 70_000
"""At most this many triples (210,000 events) in the burst, so a fast machine's run stays short."""
GROWTH_LIMIT_MIB = 400.0
"""What any process may grow by during the burst: the buffers are bounded, the burst is not."""


def telemetry(i: int) -> list[object]:
    from tests.projections.workload import telemetry as triple

    return triple(f"burst-{i % 50}", "a1", i)  # type: ignore[return-value]


SPAN_TABLES = ("spans", "model_calls", "rewards")
"""Where the projector puts each kind of telemetry event (one row per event id)."""


def burst_ids(count: int) -> set[str]:
    """The event ids of telemetry triples 0..count-1 (ids are deterministic)."""
    return {e.event_id for i in range(count) for e in telemetry(i)}  # type: ignore[attr-defined]


def _burst(event: object) -> bool:
    return str(getattr(event, "rollout_id", "")).startswith("burst-")


async def projector_position(system: System, http: httpx.AsyncClient) -> dict[str, int]:
    url = f"http://127.0.0.1:{system.port('projector')}/health"
    return (await http.get(url, timeout=5)).json()["positions"]


async def caught_up(system: System, log: EventLog, deadline_s: float) -> float:
    """Seconds until the projector has applied the spans stream to its current end."""
    end, began = await log.feed("spans").last_seq(), time.monotonic()
    async with httpx.AsyncClient() as http:

        async def applied() -> bool:  # another process's position, from its health endpoint
            return (await projector_position(system, http))["spans"] >= end

        await wait_for(applied, deadline_s, f"the projector at spans {end}", every=0.02)
    return time.monotonic() - began


async def publish(log: EventLog, start: int, count: int, chunk: int = 5000) -> None:
    for first in range(start, start + count, chunk):
        events = [e for i in range(first, min(first + chunk, start + count)) for e in telemetry(i)]
        await log.publish_spans(events)  # type: ignore[arg-type]


@pytest.mark.timeout(400)
async def test_a_burst_over_projector_capacity_stays_bounded_and_catches_up(tmp_path: Path) -> None:
    system = bus_system(tmp_path)
    oplog = OpLog(tmp_path / "ops.jsonl")
    try:
        for name in ("projector", "coordinator", "runner1"):
            await asyncio.to_thread(system.start, name)
        learner = await EventLog.connect(system.client("learner"), name="queuer")
        log = await EventLog.connect(system.client("runner"), name="burster")  # spans: the runner's to write
        await Store(learner).add_resources({"prompt": PromptTemplate(template="{id}", engine="f-string")})
        await publish(log, 0, WARMUP)
        rate = 3 * WARMUP / await caught_up(system, log, 120)  # events per second the projector applies
        burst = min(int(10 * rate / 3), BURST_CAP)  # triples: ten seconds of projector work, at once
        pids = {n: system.services[n].proc.pid for n in ("projector", "runner1", "coordinator")}  # type: ignore[union-attr]
        pids |= {"nats-server": system.server.proc.pid, "publisher": os.getpid()}  # type: ignore[union-attr]
        slow = [f"slow-{i}" for i in range(24)]  # 4 slots x 0.5 s: a backlog of a few seconds
        projector = system.services["projector"].proc
        with Sampler(pids) as memory:
            began = time.monotonic()
            for rid in slow:
                await queue(learner, oplog, rid, sleep=0.5)
            projector.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]  # capacity 0 during the burst
            try:
                await publish(log, WARMUP, burst)
            finally:
                projector.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            published_s = time.monotonic() - began
            catch_up = await caught_up(system, log, 240)
            await until_terminal(log, slow, 120)
        lags = []
        for i in range(5):  # steady state: one event at a time, measured end to end
            t0 = time.monotonic()
            await publish(log, WARMUP + burst + i, 1)
            await caught_up(system, log, 30)
            lags.append(time.monotonic() - t0)
        stored = await checkers.stored_control(log)
        spans = [e for e in await checkers.stored_spans(log) if _burst(getattr(e, "event", None))]
        await learner.close()
        await log.close()
        system.services["projector"].stop()  # its file, read below
        projected = checkers.projected_ids(tmp_path / "projection.duckdb", SPAN_TABLES)
    finally:
        system.stop()
    growth = memory.growth()
    acked = burst_ids(WARMUP + burst + 5)  # every publish returned: all acknowledged
    in_log, in_projection = checkers.once_each(acked, spans), checkers.once_each(acked, projected, "the projection")
    record(
        "backpressure (span burst 10x projector rate, slow runner)",
        runs=1,
        operations=3 * (WARMUP + burst + 5) + len(slow),
        lost=len(checkers.lost(acked, spans)),
        duplicated=len(checkers.duplicated(stored)),
        recovered_s=catch_up,
        projector_rate=round(rate),
        burst_events=3 * burst,
        publish_s=round(published_s, 1),
        lag_max_s=round(max(lags), 3),
        rss_growth_mib=growth,
        rss_peak_mib={k: round(v) for k, v in memory.peak.items()},
        not_once_in_log=len(in_log),
        not_once_in_projection=len(in_projection),
    )
    assert not in_log, in_log[:5]  # every acknowledged span, model call and reward stored once, by id
    assert not in_projection, in_projection[:5]  # and projected once
    assert max(lags) < 1.0, lags
    assert not checkers.not_terminal(stored, slow)
    assert all(g < GROWTH_LIMIT_MIB for g in growth.values()), growth


@pytest.mark.timeout(120)
async def test_a_full_stream_refuses_with_an_error_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    system = System(tmp_path)
    system.start_bus()
    settings = system.client("runner").model_copy(
        update={"spans_max_bytes": 1_000_000, "publish_retries": 1, "request_timeout_s": 1.0}
    )
    log = await EventLog.connect(settings, name="filler")
    acked, error, acked_ids = 0, None, set()
    try:
        for chunk in range(100):
            try:
                await publish(log, chunk * 200, 200, chunk=200)
            except PublishFailed as exc:
                error = exc
                break
            acked += 3 * 200
            acked_ids |= {e.event_id for i in range(chunk * 200, chunk * 200 + 200) for e in telemetry(i)}  # type: ignore[attr-defined]
        stored = await log.feed("spans").last_seq()
        held = await checkers.stored_spans(log)
        more = None
        try:  # still full: a later publisher is refused too, not silently dropped
            await publish(log, 10**6, 1)
        except PublishFailed as exc:
            more = exc
    finally:
        await log.close()
        system.stop()
    not_once = checkers.once_each(acked_ids, held)
    record("stream full (max_bytes, discard new)", runs=1, operations=acked + 600,
           lost=len(checkers.lost(acked_ids, held)), duplicated=len(checkers.duplicated(held)), recovered_s=None,
           acked=acked, stored=stored, not_once=len(not_once))  # fmt: skip
    assert error is not None and more is not None, "the stream never refused"
    assert len(acked_ids) == acked and not not_once, not_once[:5]  # each acknowledged event stored once, by id
    assert "unacknowledged" in str(error)
    assert acked <= stored < acked + 600  # everything acknowledged is kept; of the refused chunk, a part
