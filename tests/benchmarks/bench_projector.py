"""Projector ingest, replay and publish-to-SQL lag next to raw baselines, on one nats-server run as voltbus runs it.

Run: ``python -m tests.benchmarks.bench_projector`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

The server, the alternation of sides, the medians, the table and the ledger are those of
``bench_eventlog`` (imported from it). The log is filled once, before timing, through the EventLog:
``--control`` control events (RolloutQueued + AttemptClaimed of ``--control``/2 rollouts, via
``append_many``) and ``--spans`` span-stream events (SpanRecorded / ModelCalled / RewardReported of
those attempts, via ``publish_spans``; with ``--span-batches`` as voltbus writes them: each attempt's spans and
reward as one ``SpanBatch``, a runner's flush, and its model calls one message each, the gateway's). Every voltbus run
projects into a fresh DuckDB file; rates count events, not messages.

Cases:
  project_spans    project(ends={spans: end}) into a fresh file  vs  raw Arrow insert of the same rows
  project_control  project(ends={control: end}), same            vs  raw Arrow insert of the same rows
  project_<s>_steady  the same runs from their first committed batch on: the steady state the issue's ingest
                   goal is about (opening the feed and the first batch, read beside its apply, are left out;
                   on the raw side its first batch)
  replay           services.projector.client.rebuild (what       vs  raw Arrow insert of both streams' rows
                   ``voltbus replay --db new.duckdb`` runs): both streams, one file
  lag_<wait>       a live project(stop=...) with max_wait=<wait>;  vs  a raw ordered consumer's delivery lag
                   --lag-rate span events/s published for --lag-seconds; p50/p99 = publish -> visible in SQL
  diag_*           printed, not in the ledger: bus read alone (raw ordered consumer counting in a callback),
                   the feed alone (Feed.batch: read + decode), rows + fold alone (no DuckDB), lag by position

The raw insert is the projector's own DuckDB work without the rest: the row dicts each batch of
``--batch`` events produces are captured beforehand (read through the projector's feed, so spans are
decoded by lean.py as the projector decodes them, then mapped by rows.py and the lifecycle fold), then
timed: per batch, one transaction, per table ``pa.Table.from_pylist`` with the projector's fixed Arrow
schema (``rows.ARROW``, where it has one) + the table's SQL block (``INSERT INTO t BY NAME SELECT *
FROM batch``; ``INSERT OR REPLACE`` for rollouts, attempts and states; DuckDB configured as the
projector's database, ``ProjectorSettings.duckdb_threads``; ModelCalled's number lists
arrive as JSON text and the block turns them into lists with ``from_json_strict``), no checkpoint
row. After the fill the captured rows are frozen out of the garbage collector (``gc.freeze``), so
neither side's collections scan the bench's own data.

The voltbus side runs as the projector service and ``voltbus replay`` do by default (ProjectorSettings:
the spans stream read and prepared in one reader process; control too, as the stored backlog is larger than
``reader_backlog``, else in the projector's process; ``--span-readers``, ``--control-readers`` and
``--reader-backlog`` change it, 0: none). The readers' fork
server is started before timing, as a running projector has it (its start, ~0.5 s once per process, is
not counted; each run still starts its own reader processes).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import nats
import pyarrow as pa
from nats.js.api import ConsumerConfig, DeliverPolicy

from tests.benchmarks import bench_eventlog
from tests.benchmarks.bench_eventlog import (
    CSV_PATH,
    Bench,
    Figure,
    Run,
    alternate,
    raw_replay,
    rollout_events,
    server_version,
    span_events,
    summarize,
    table,
    write_csv,
)
from tests.schemas.samples import SAMPLES
from voltbus.projections import blocks
from voltbus.projections.prepare import Prepared, Preparer
from voltbus.projections.rows import ARROW, Row, fold_tables
from voltbus.schemas import codec, derive_id
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.rollouts import AttemptClaimed
from voltbus.schemas.spans import ModelCalled
from voltbus.services.eventlog import BadEvent, Envelope, EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.client import rebuild
from voltbus.services.projector.follow import ends_at, project, projector_feed
from voltbus.services.projector.forks import Forks
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import BusSettings, NatsSettings, ProjectorSettings, Settings

TURNS = 3
"""Model calls per attempt; each comes with a span, and each attempt ends with a reward (7 events)."""
PROMPT_TOKENS, RESPONSE_TOKENS = 256, 128
"""Sizes of a ModelCalled's token ids and logprobs (a short RL turn)."""


@dataclass
class Options:
    """What to run; the defaults keep a whole run under about two minutes on two cores."""

    control: int = 60_000
    """Long enough for the steady state the issue's goal is about: 10,000 control events are applied in about
    0.2 s, a quarter of it opening the feed and the first batch."""
    spans: int = 60_000
    batch: int = 2000
    lag_rate: float = 500.0
    lag_seconds: float = 10.0
    lag_waits: list[float] = field(default_factory=lambda: [0.1, 0.02])
    reps: int = 3
    time_cap: float = 60.0
    csv: Path | None = CSV_PATH
    readers: dict[str, int] = field(default_factory=lambda: ProjectorSettings().readers)
    """Reader processes per stream, as the projector service and ``voltbus replay`` run by default."""
    backlog: int = field(default_factory=lambda: ProjectorSettings().reader_backlog)
    """A backlog from which a stream with no readers gets one (``ProjectorSettings.reader_backlog``)."""
    span_batches: bool = False
    """Store the spans as voltbus writes them: each attempt's spans and reward as one SpanBatch (a runner's
    flush), its model calls one message each (the gateway's); else every span-stream event alone."""


# ---------------------------------------------------------------- the workload


def control_events(tag: str, n: int) -> list[AnyEvent]:
    """``n`` control events: RolloutQueued (~390 B) of n/2 rollouts, each followed later by its AttemptClaimed."""
    rollouts = n // 2
    queued = rollout_events(tag, rollouts)
    claims = [
        AttemptClaimed(
            event_id=derive_id(tag, "claim", i),
            rollout_id=f"ro-{tag}-{i}",
            attempt_id=f"at-{tag}-{i}",
            sequence_id=1,
            worker_id=f"worker-{i % 16}",
            at=1767225601.0 + i / 1000,
            dispatch_event_id=queued[i].event_id,
        )
        for i in range(rollouts)
    ]
    return [*queued, *claims]


def telemetry_events(tag: str, n: int) -> list[AnyEvent]:
    """``n`` span-stream events: per attempt TURNS x (SpanRecorded ~700 B, ModelCalled ~5 KB), one RewardReported."""
    spans = span_events(tag, n + 2 * TURNS)
    call = SAMPLES["ModelCalled"]
    reward = SAMPLES["RewardReported"]
    request = msgspec.json.encode(
        {
            "model": "qwen2.5-0.5b",
            "messages": [
                {"role": "system", "content": "You are a careful math tutor. " * 8},
                {"role": "user", "content": "Natalia sold clips to 48 of her friends in April. " * 6},
            ],
            "logprobs": True,
            "temperature": 1.0,
        }
    )
    response = msgspec.json.encode(
        {"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "She sold " * 40}}]}
    )
    prompt = [(151_643 + 7 * j) % 151_000 for j in range(PROMPT_TOKENS)]
    out: list[AnyEvent] = []
    i = 0
    while len(out) < n:
        rollout_id, attempt_id = f"ro-{tag}-{i}", f"at-{tag}-{i}"
        for turn in range(TURNS):
            k = len(out)
            span = spans[k]
            out.append(msgspec.structs.replace(span, rollout_id=rollout_id, attempt_id=attempt_id))  # type: ignore[type-var]
            out.append(
                msgspec.structs.replace(
                    call,
                    event_id=derive_id(tag, "call", i, turn),
                    rollout_id=rollout_id,
                    attempt_id=attempt_id,
                    call_id=f"call-{i}-{turn}",
                    request=msgspec.Raw(request),
                    response=msgspec.Raw(response),
                    prompt_ids=prompt,
                    response_ids=[(k + j) % 151_000 for j in range(RESPONSE_TOKENS)],
                    logprobs=[-((k + j) % 97) / 97 for j in range(RESPONSE_TOKENS)],
                )
            )
        out.append(
            msgspec.structs.replace(
                reward, event_id=derive_id(tag, "reward", i), rollout_id=rollout_id, attempt_id=attempt_id
            )
        )
        i += 1
    return out[:n]


def sizes(events: Sequence[AnyEvent]) -> dict[str, int]:
    """Mean encoded bytes per event type."""
    by: dict[str, list[int]] = {}
    for e in events:
        by.setdefault(type(e).__name__, []).append(len(codec.encode(e)))
    return {k: round(statistics.mean(v)) for k, v in by.items()}


@dataclass
class Stored:
    """A filled log: where each stream ends, its events, the rows each batch of it produces."""

    log: EventLog
    ends: dict[str, int]
    events: dict[str, int]
    """Events per stream (more than ``ends`` where messages are SpanBatches): what the rates count."""
    sizes: dict[str, int]
    batches: dict[str, list[dict[str, list[Row]]]]
    rows_seconds: dict[str, float]
    """Seconds the projector's Python side (decoded envelopes -> row dicts, fold) took per stream, no DuckDB."""
    batch: int
    """Messages per captured batch (the projector's batch size)."""
    forks: Forks | None = None
    """The readers' fork server of every run, started before timing as a running projector has it."""


async def fill(b: Bench, options: Options) -> Stored:
    """Store the workload through the EventLog (untimed), then capture the rows each batch produces."""
    log = await b.eventlog()
    ns = log.topology.namespace
    control = control_events(ns, options.control)
    for i in range(0, len(control), 1000):
        chunk = control[i : i + 1000]
        results = await log.append_many(chunk, expected_seq=0 if i < len(control) // 2 else None)
        assert all(not isinstance(r, Exception) for r in results), results[:3]
    spans = telemetry_events(ns, options.spans)
    if options.span_batches:
        messages = await publish_as_written(log, spans)
    else:
        await log.publish_spans(spans)
        messages = len(spans)
    ends = await ends_at(log)
    assert ends == {"control": len(control), "spans": messages}, ends
    batches, seconds = {}, {}
    for stream in ("control", "spans"):
        envelopes = await read_all(log, stream, ends[stream])
        batches[stream], seconds[stream] = capture(stream, envelopes, options.batch)
    events = {"control": len(control), "spans": len(spans)}
    return Stored(
        log, ends, events, sizes(control[:1] + control[-1:] + spans[: TURNS * 2 + 1]), batches, seconds, options.batch
    )


async def publish_as_written(log: EventLog, events: Sequence[AnyEvent]) -> int:
    """Each attempt's spans and reward as one SpanBatch, its model calls one message each; returns the messages."""
    calls: list[AnyEvent] = []
    flushes: dict[str, list[AnyEvent]] = {}
    for e in events:
        if isinstance(e, ModelCalled):
            calls.append(e)
        else:
            flushes.setdefault(e.attempt_id, []).append(e)  # type: ignore[union-attr]
    await log.publish_spans(calls)
    groups = list(flushes.values())
    for i in range(0, len(groups), 200):
        await asyncio.gather(*(log.publish_spans(g, batch=True) for g in groups[i : i + 200]))
    return len(calls) + len(groups)


async def read_all(log: EventLog, stream: str, end: int) -> list[Envelope]:
    """Every event of ``stream`` as the projector's feed decodes it (spans: lean.py)."""
    feed = await projector_feed(log, stream).open(1)
    envelopes: list[Envelope] = []
    try:
        while len(envelopes) < end:
            for item in await feed.batch(5000, 1.0, to_seq=end):
                assert isinstance(item, Envelope), item
                envelopes.append(item)
    finally:
        await feed.close()
    return envelopes


class Capture(Projector):
    """A projector that only records the row dicts each batch produces (no DuckDB, no checkpoint row), and the
    seconds its Python side took: rows, the fold and the folded rollouts' Arrow tables (``rows.fold_tables``),
    which become row dicts again, untimed, for the raw side's ``from_pylist``."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.captured: list[dict[str, list[Row]]] = []
        self.seconds = 0.0

    def _apply(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        start = time.perf_counter()
        batch = self.preparer(stream).rows(stream, items)
        folded = fold_tables(batch.folded) if batch is not None else []
        self.seconds += time.perf_counter() - start
        if batch is not None:
            rows = {k: v for k, v in batch.rows.items() if v}
            self.captured.append(rows | {name: table.to_pylist() for name, table in folded})
            self.positions[stream] = batch.last


def capture(stream: str, envelopes: list[Envelope], batch: int) -> tuple[list[dict[str, list[Row]]], float]:
    """The rows each batch of ``envelopes`` produces, and the seconds the mapping and folding took."""
    projector = Capture()
    try:
        for i in range(0, len(envelopes), batch):
            projector.apply(stream, list(envelopes[i : i + batch]))
        return projector.captured, projector.seconds
    finally:
        projector.close()


# ---------------------------------------------------------------- ingest: voltbus and raw


class Files:
    """Fresh DuckDB paths in one folder; each run's file is deleted after it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0

    def new(self, name: str) -> Path:
        self.count += 1
        return self.folder / f"{name}-{self.count}.duckdb"

    @staticmethod
    def drop(path: Path) -> None:
        for p in (path, path.with_name(path.name + ".wal")):
            p.unlink(missing_ok=True)


def check(con: duckdb.DuckDBPyConnection, stored: Stored, streams: Sequence[str]) -> None:
    """Every event became a row (spans, model calls, rewards; one rollout and one attempt per claim)."""
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("spans", "model_calls", "rewards")}
    if "spans" in streams:
        assert sum(counts.values()) == stored.events["spans"], counts
    if "control" in streams:
        claimed = con.execute("SELECT count(*) FROM attempts WHERE status = 'preparing'").fetchall()[0][0]
        rollouts = con.execute("SELECT count(*) FROM rollouts").fetchall()[0][0]
        assert claimed == rollouts == stored.ends["control"] // 2, (claimed, rollouts)


class TimedProjector(Projector):
    """A projector that adds up the seconds its apply calls take (rows, fold and DuckDB, in the worker thread), and
    its commits of batches a reader process prepared (an apply's own commit is counted once, in the apply)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.apply_seconds = 0.0
        self._inside = False

    def apply(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        self._timed(super().apply, stream, items)

    def commit(self, prepared: Prepared, preparer: Preparer | None = None) -> None:
        self._timed(super().commit, prepared, preparer)

    def _timed(self, call: Callable[..., None], *args: Any) -> None:
        if self._inside:
            return call(*args)
        start, self._inside = time.perf_counter(), True
        try:
            call(*args)
        finally:
            self.apply_seconds += time.perf_counter() - start
            self._inside = False


def after_first(stored: Stored, stream: str, position: int, since: float, until: float) -> Run:
    """The events of ``stream`` after ``position`` (its first committed batch) and the seconds they took:
    the steady state, without the start (opening the feed, the first batch's read beside its apply)."""
    end = stored.ends[stream]
    return Run(round(stored.events[stream] * (end - position) / end), until - since)


async def vb_project(
    stored: Stored,
    files: Files,
    streams: Sequence[str],
    batch: int,
    applies: list[Run] | None = None,
    readers: dict[str, int] | None = None,
    steady: list[Run] | None = None,
    backlog: int = 0,
) -> Run:
    """project() of ``streams`` up to their ends into a fresh file; the time inside apply goes to ``applies``,
    the steady state of a one-stream run (after its first committed batch) to ``steady``."""
    path = files.new("project")
    projector = TimedProjector(path)
    first: list[tuple[float, int]] = []

    def progress(stream: str, position: int, end: int) -> None:
        if not first and position:
            first.append((time.perf_counter(), position))

    try:
        ends = {s: (stored.ends[s] if s in streams else 0) for s in stored.ends}
        start = time.perf_counter()
        await project(
            projector,
            stored.log,
            ends=ends,
            batch_size=batch,
            readers=readers or 0,
            progress=progress,
            backlog=backlog,
            forks=stored.forks,
        )
        stop = time.perf_counter()
        check(projector.con, stored, streams)
        events = sum(stored.events[s] for s in streams)
        if applies is not None:
            applies.append(Run(events, projector.apply_seconds))
        if steady is not None and len(streams) == 1:
            steady.append(after_first(stored, streams[0], first[0][1], first[0][0], stop))
        return Run(events, stop - start)
    finally:
        projector.close()
        files.drop(path)


async def vb_rebuild(
    stored: Stored, files: Files, batch: int, readers: dict[str, int] | None = None, backlog: int = 0
) -> Run:
    """What ``voltbus replay --db new.duckdb`` runs (less process start-up): rebuild() of both streams."""
    path = files.new("replay")
    settings = Settings(nats=stored.log.settings)
    settings.projector.batch_size = batch
    settings.projector.control_readers = (readers or {}).get("control", 0)
    settings.projector.span_readers = (readers or {}).get("spans", 0)
    settings.projector.reader_backlog = backlog
    try:
        start = time.perf_counter()
        positions = await rebuild(settings, path, lambda _: None, forks=stored.forks)
        seconds = time.perf_counter() - start
        assert positions == stored.ends, positions
        with duckdb.connect(str(path)) as con:
            check(con, stored, ("control", "spans"))
        return Run(sum(stored.events.values()), seconds)
    finally:
        files.drop(path)


def raw_insert(stored: Stored, files: Files, streams: Sequence[str], steady: list[Run] | None = None) -> Run:
    """The captured rows of ``streams`` into a fresh file: per batch one transaction, Arrow (the projector's
    fixed schemas where it has them) + the table's SQL; the steady state of one stream (after its first
    batch) goes to ``steady``."""
    path = files.new("raw")
    schemas, named = blocks.load()
    con = duckdb.connect(str(path), config={"threads": ProjectorSettings().duckdb_threads})  # as the projector's
    try:
        for block in schemas:
            con.execute(block.sql)
        events = 0
        start = time.perf_counter()
        firsts = []  # when each stream's first batch was committed
        for stream in streams:
            for i, rows in enumerate(stored.batches[stream]):
                con.begin()
                for name, block_rows in rows.items():
                    blocks.run(con, named[name].sql, pa.Table.from_pylist(block_rows, schema=ARROW.get(name)))
                con.commit()
                if i == 0:
                    firsts.append(time.perf_counter())
            events += stored.events[stream]
        stop = time.perf_counter()
        check(con, stored, streams)
        if steady is not None and len(streams) == 1:
            steady.append(after_first(stored, streams[0], min(stored.batch, stored.ends[streams[0]]), firsts[0], stop))
        return Run(events, stop - start)
    finally:
        con.close()
        files.drop(path)


async def raw_project(stored: Stored, files: Files, streams: Sequence[str], steady: list[Run] | None = None) -> Run:
    return raw_insert(stored, files, streams, steady)


async def feed_only(stored: Stored, stream: str, batch: int) -> Run:
    """Diagnostic: the voltbus read path alone (Feed.batch: ordered consumer, queue, metadata, decode)."""
    end = stored.ends[stream]
    feed = await projector_feed(stored.log, stream).open(1)
    count = 0
    try:
        start = time.perf_counter()
        while count < end:
            count += len(await feed.batch(batch, 0.1, to_seq=end))
        return Run(stored.events[stream], time.perf_counter() - start)
    finally:
        await feed.close()


async def case_ingest(b: Bench, stored: Stored, files: Files, options: Options) -> list[Figure]:
    figures: list[Figure] = []
    size = ", ".join(f"{k} {v} B" for k, v in stored.sizes.items())
    notes = {"spans": f"project() vs raw Arrow insert; {size}", "control": "project() (fold + upserts) vs raw insert"}
    for stream in ("spans", "control"):
        applies: list[Run] = []
        steady: tuple[list[Run], list[Run]] = ([], [])
        vbs, raws = await alternate(
            b,
            functools.partial(
                vb_project, stored, files, [stream], options.batch, applies, options.readers, steady[0], options.backlog
            ),
            functools.partial(raw_project, stored, files, [stream], steady[1]),
        )
        figures.append(summarize(f"project_{stream}", vbs, raws, notes[stream]))
        note = "the same runs after their first committed batch (the steady state)"
        figures.append(summarize(f"project_{stream}_steady", *steady, note))
        reads = [
            await raw_replay(b, stored.log, stream, stored.ends[stream], b.deadline()) for _ in range(options.reps)
        ]
        feeds = [await feed_only(stored, stream, options.batch) for _ in range(options.reps)]
        n = stored.events[stream]
        rows = [Run(n, stored.rows_seconds[stream])]
        figures.append(summarize(f"diag_{stream}_bus_read", reads, raws, "raw ordered consumer, callback counter"))
        figures.append(summarize(f"diag_{stream}_feed", feeds, raws, "Feed.batch: read + metadata + decode"))
        figures.append(summarize(f"diag_{stream}_rows", rows, raws, "projector rows + fold, no DuckDB (1 run)"))
        figures.append(summarize(f"diag_{stream}_apply", applies, raws, "time inside Projector.apply during project()"))
    both = ("control", "spans")
    vbs, raws = await alternate(
        b,
        lambda: vb_rebuild(stored, files, options.batch, options.readers, options.backlog),
        lambda: raw_project(stored, files, both),
    )
    figures.append(summarize("replay", vbs, raws, "rebuild() = voltbus replay, both streams, vs raw insert of both"))
    return figures


# ---------------------------------------------------------------- lag: publish -> visible in SQL


@dataclass
class Lag:
    """Per-event lags of one live run (seconds)."""

    published: int
    seconds: float
    sql: list[float]
    position: list[float]
    bus: list[float]


async def live_lag(b: Bench, files: Files, options: Options, max_wait: float, forks: Forks | None) -> Lag:
    """Publish span events at a steady pace into fresh streams while a live projector follows them.

    Each event's lag is measured three ways from the moment its publish_spans call began:
    ``sql``: until a reader cursor on the projector's database sees the spans checkpoint at or past its
    sequence (the checkpoint commits with the rows, so the rows are then visible), polled every 2 ms;
    ``position``: until the projector reports that position (progress callback after the commit);
    ``bus``: until a raw ordered consumer on the same stream receives it (the bus's own delivery lag).
    """
    log = await b.eventlog()
    path = files.new("lag")
    projector = Projector(path)
    n = round(options.lag_rate * options.lag_seconds)
    tick = 0.01
    per_tick = max(1, round(options.lag_rate * tick))
    events = telemetry_events(log.topology.namespace, n)
    published: list[float] = []  # index seq-1: when its publish began
    reached: list[tuple[float, int]] = []  # (time, position) after each spans batch
    polled: list[tuple[float, int]] = []  # (time, checkpoint seen by a reader)
    received: dict[int, float] = {}
    stop = asyncio.Event()

    def progress(stream: str, position: int, end: int) -> None:
        if stream == "spans":
            reached.append((time.perf_counter(), position))

    reader = projector.con.cursor()

    def read_checkpoint() -> int:
        row = reader.execute("SELECT seq FROM checkpoints WHERE stream = 'spans'").fetchall()
        return row[0][0] if row else 0

    async def poll() -> None:
        seen = 0
        while seen < n:
            seen = await asyncio.to_thread(read_checkpoint)
            polled.append((time.perf_counter(), seen))
            await asyncio.sleep(0.002)

    nc = await nats.connect(b.server.url, name="bench-lag-raw")

    async def on_msg(msg: Any) -> None:
        received[msg.metadata.sequence.stream] = time.perf_counter()

    sub = await nc.jetstream().subscribe(
        f"{log.topology.namespace}.>",
        stream=log.topology.spans_stream,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        config=ConsumerConfig(opt_start_seq=1),
        cb=on_msg,
    )
    try:
        following = asyncio.create_task(
            project(
                projector,
                log,
                stop=stop,
                progress=progress,
                batch_size=options.batch,
                max_wait=max_wait,
                readers=options.readers,
                forks=forks,
            )
        )
        polling = asyncio.create_task(poll())
        await asyncio.sleep(0.3)  # feeds open
        start = time.perf_counter()
        for k, i in enumerate(range(0, n, per_tick)):
            await asyncio.sleep(max(0.0, start + k * tick - time.perf_counter()))
            chunk = events[i : i + per_tick]
            t = time.perf_counter()
            await log.publish_spans(chunk)
            published += [t] * len(chunk)
        seconds = time.perf_counter() - start
        await asyncio.wait_for(polling, 30)
        stop.set()
        await asyncio.wait_for(following, 30)
        # the stream was fresh and one task published in order: the k-th event is stream sequence k
        assert (await log.feed("spans").last_seq()) == n
        ids = [(events[k].event_id, k + 1) for k in range(0, n, 7)]  # SpanRecorded every 7th
        got = dict(projector.con.execute("SELECT event_id, seq FROM spans").fetchall())
        assert all(got[e] == s for e, s in ids), "event ids and stream sequences disagree"
    finally:
        await sub.unsubscribe()
        await nc.drain()
        reader.close()
        projector.close()
        files.drop(path)
        await log.close()

    def first_at(marks: list[tuple[float, int]], seq: int) -> float:
        return next(t for t, pos in marks if pos >= seq)

    return Lag(
        published=n,
        seconds=seconds,
        sql=[first_at(polled, s + 1) - t for s, t in enumerate(published)],
        position=[first_at(reached, s + 1) - t for s, t in enumerate(published)],
        bus=[received[s + 1] - t for s, t in enumerate(published)],
    )


async def case_lag(b: Bench, files: Files, options: Options, forks: Forks | None) -> list[Figure]:
    figures = []
    for wait in options.lag_waits:
        lag = await live_lag(b, files, options, wait, forks)
        name = f"lag_{round(wait * 1000)}ms"
        note = f"{options.lag_rate:.0f} ev/s for {options.lag_seconds:.0f} s, max_wait {wait}s; raw = bus delivery"
        figures.append(
            summarize(
                name, [Run(lag.published, lag.seconds, lag.sql)], [Run(lag.published, lag.seconds, lag.bus)], note
            )
        )
        figures.append(
            summarize(
                f"diag_{name}_position",
                [Run(lag.published, lag.seconds, lag.position)],
                [Run(lag.published, lag.seconds, lag.bus)],
                "the same run, lag until the progress callback reports the position",
            )
        )
    return figures


# ---------------------------------------------------------------- breakdown and running


def breakdown(figures: Sequence[Figure]) -> str:
    """Microseconds per event of each part, per stream, next to the whole project() run."""
    by = {f.case: f for f in figures}
    head = f"{'µs per event':<14} {'bus read':>9} {'feed':>9} {'rows+fold':>10} {'raw insert':>11} "
    lines = [head + f"{'apply in project()':>19} {'project()':>10}"]
    for stream in ("spans", "control"):
        if f"project_{stream}" not in by:
            continue

        def us(case: str, raw: bool = False) -> str:
            f = by[case]
            rate = f.raw_rate if raw else f.rate
            return f"{1e6 / rate:.1f}" if rate else "-"

        lines.append(
            f"{stream:<14} {us(f'diag_{stream}_bus_read'):>9} {us(f'diag_{stream}_feed'):>9} "
            f"{us(f'diag_{stream}_rows'):>10} {us(f'project_{stream}', raw=True):>11} "
            f"{us(f'diag_{stream}_apply'):>19} {us(f'project_{stream}'):>10}"
        )
    return "\n".join(lines)


def lag_table(figures: Sequence[Figure]) -> str:
    lines = []
    for f in figures:
        if f.case.startswith(("lag_", "diag_lag_")):
            lines.append(
                f"{f.case:<24} p50 {f.p50_ms:7.1f} ms  p99 {f.p99_ms:7.1f} ms   "
                f"(bus delivery p50 {f.raw_p50_ms:.2f} ms, p99 {f.raw_p99_ms:.2f} ms)"
            )
    return "\n".join(lines)


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[Figure]:
    """Start the server, fill the log, run the cases, print the tables, append to the ledger."""
    bus = BusSettings(data_dir=data_dir / "nats", port=0, monitor_port=0)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    echo(f"nats-server {server_version()} at {server.url}, sync_interval: always={bus.sync_always}, store {data_dir}")
    figures: list[Figure] = []
    files = Files(data_dir)
    b = Bench(server, bench_eventlog.Options(reps=options.reps, time_cap=options.time_cap, csv=None))
    forks = Forks() if any(options.readers.values()) or options.backlog else None
    try:
        t = time.perf_counter()
        stored = await fill(b, options)
        if forks is not None:
            forks.start()  # as a running projector has it: readers start in milliseconds
            stored.forks = forks
        gc.collect()
        gc.freeze()  # the captured rows stay out of every later collection: a projector process holds none of them
        echo(f"  fill: {time.perf_counter() - t:.1f}s, stored {stored.ends}, sizes {stored.sizes}")
        try:
            t = time.perf_counter()
            figures += await case_ingest(b, stored, files, options)
            echo(f"  ingest + replay: {time.perf_counter() - t:.1f}s")
        finally:
            await stored.log.close()
        t = time.perf_counter()
        figures += await case_lag(b, files, options, forks)
        echo(f"  lag: {time.perf_counter() - t:.1f}s")
    finally:
        if forks is not None:
            forks.stop()
        gc.unfreeze()  # else at exit DuckDB's bindings report what was frozen as leaked
        server.stop()
    echo(table(figures))
    echo(breakdown(figures))
    echo(lag_table(figures))
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {sum(not f.case.startswith('diag_') for f in figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_projector", description=__doc__.split("\n")[0])
    p.add_argument("--control", type=int, default=d.control, help="stored control events (%(default)s)")
    p.add_argument("--spans", type=int, default=d.spans, help="stored span-stream events (%(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="projector batch size (%(default)s)")
    p.add_argument("--lag-rate", type=float, default=d.lag_rate, help="events/s in the lag cases (%(default)s)")
    p.add_argument("--lag-seconds", type=float, default=d.lag_seconds, help="length of a lag case (%(default)s)")
    p.add_argument("--lag-waits", type=float, nargs="+", default=d.lag_waits, help="max_wait per lag case (0.1 0.02)")
    p.add_argument("--reps", type=int, default=d.reps, help="repetitions; medians are reported (%(default)s)")
    p.add_argument("--time-cap", type=float, default=d.time_cap, help="seconds per bus-read run (%(default)s)")
    p.add_argument("--csv", type=Path, default=d.csv, help="ledger to append to (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to the ledger")
    p.add_argument("--span-readers", type=int, default=d.readers["spans"], help="spans reader processes (%(default)s)")
    p.add_argument("--control-readers", type=int, default=d.readers["control"], help="control readers (%(default)s)")
    p.add_argument(
        "--reader-backlog",
        type=int,
        default=d.backlog,
        help="backlog that gets a stream a reader (%(default)s; 0: none)",
    )
    p.add_argument("--span-batches", action="store_true", help="spans as voltbus writes them: a SpanBatch per attempt")
    a = p.parse_args(argv)
    return Options(
        control=a.control,
        spans=a.spans,
        batch=a.batch,
        lag_rate=a.lag_rate,
        lag_seconds=a.lag_seconds,
        lag_waits=a.lag_waits,
        reps=a.reps,
        time_cap=a.time_cap,
        csv=None if a.no_csv else a.csv,
        readers={"control": a.control_readers, "spans": a.span_readers},
        backlog=a.reader_backlog,
        span_batches=a.span_batches,
    )


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-") as tmp:
        asyncio.run(run(options, Path(tmp)))


if __name__ == "__main__":
    main()
