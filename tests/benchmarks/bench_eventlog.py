"""Event log throughput next to raw nats-py, on one nats-server started as voltbus runs it.

Run: ``python -m tests.benchmarks.bench_eventlog`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

The server is :class:`NatsServer` with the production :class:`BusSettings` (``sync_interval: always``)
on a temporary store, loopback, free ports. Every case runs the EventLog and a raw nats-py baseline
doing the same work (same bytes, headers, subjects, stream configuration) on the same server,
alternating which goes first, ``--reps`` times; the table and the ledger hold medians. Each run
writes into fresh namespaces (fresh streams). Loops are bounded by count and by ``--time-cap``.

Cases:
  append_seq       EventLog.append([e], expected_seq=0), one at a time  vs  js.publish with the same headers
  append_c<N>      the same from N concurrent tasks on one connection   vs  N tasks of js.publish
  append_many      EventLog.append_many(batch)                          vs  publish_async windows + gather
  spans            EventLog.publish_spans(~700 B SpanRecorded)          vs  publish_async windows + gather
  replay_control   EventLog.replay() (decoded)                          vs  ordered consumer, callback counter
  replay_spans     EventLog.replay("spans") (decoded)                   vs  ordered consumer, callback counter
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import datetime as dt
import importlib.metadata
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, Header

from tests.schemas.samples import SAMPLES
from voltbus.schemas import codec, derive_id
from voltbus.schemas.codec import AnyEvent
from voltbus.schemas.subjects import Topology, subject_for
from voltbus.services.eventlog import Appended, Envelope, EventLog, ensure_streams
from voltbus.services.eventlog.append import EXPECTED_SUBJECT
from voltbus.services.ops.natsserver import NatsServer, find_binary
from voltbus.services.settings import BusSettings, NatsSettings

ROOT = Path(__file__).resolve().parents[2]
CSV_PATH = Path(__file__).with_name("results.csv")
CSV_COLUMNS = [
    "utc_time",
    "git_commit",
    "nats_server_version",
    "nats_py_version",
    "host_cores",
    "case",
    "events",
    "events_per_s",
    "p50_ms",
    "p99_ms",
    "raw_events_per_s",
    "ratio",
]
SPAN_ROLLOUTS = 256
"""Distinct rollouts the span events belong to (spreads them over the span shards)."""


@dataclass
class Options:
    """What to run; the defaults keep a whole run under about two minutes on two cores."""

    appends: int = 3000
    concurrency: int = 32
    batch: int = 1000
    spans: int = 20_000
    replay: int = 20_000
    reps: int = 3
    time_cap: float = 30.0
    cases: list[str] = field(default_factory=lambda: list(CASES))
    csv: Path | None = CSV_PATH


@dataclass
class Run:
    """One timed run: events done, seconds taken, per-operation latencies (if meaningful)."""

    events: int
    seconds: float
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Figure:
    """The medians of one case: the EventLog next to raw nats-py."""

    case: str
    events: int
    rate: float
    p50_ms: float | None
    p99_ms: float | None
    raw_rate: float
    raw_p50_ms: float | None
    raw_p99_ms: float | None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.rate / self.raw_rate if self.raw_rate else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (seconds) in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000


# ---------------------------------------------------------------- events and their raw form


def rollout_events(tag: str, n: int) -> list[AnyEvent]:
    """``n`` RolloutQueued events (~390 B) of ``n`` distinct new rollouts."""
    base = SAMPLES["RolloutQueued"]
    return [
        msgspec.structs.replace(base, event_id=derive_id(tag, "queued", i), rollout_id=f"ro-{tag}-{i}")
        for i in range(n)
    ]


def span_events(tag: str, n: int) -> list[AnyEvent]:
    """``n`` SpanRecorded events of about 700 bytes each, over SPAN_ROLLOUTS rollouts."""
    base = SAMPLES["SpanRecorded"]
    attributes = {
        **base.attributes,
        "gen_ai.system": "openai",
        "gen_ai.request.model": "qwen2.5-0.5b",
        "gen_ai.usage.input_tokens": 812,
    }
    return [
        msgspec.structs.replace(
            base,
            event_id=derive_id(tag, "span", i),
            rollout_id=f"ro-{tag}-{i % SPAN_ROLLOUTS}",
            sequence_id=i + 1,
            span_id=f"{i:016x}",
            attributes=attributes,
        )
        for i in range(n)
    ]


@dataclass
class RawMessage:
    subject: str
    data: bytes
    headers: dict[str, str]


def raw_messages(topology: Topology, events: Sequence[AnyEvent], occ: bool) -> list[RawMessage]:
    """The bytes and headers the EventLog would send for ``events`` (built before timing)."""
    out = []
    for e in events:
        headers = {Header.MSG_ID.value: e.event_id}
        if occ:
            headers[Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value] = "0"
            headers[EXPECTED_SUBJECT] = topology.rollout_any(e.rollout_id)  # type: ignore[union-attr]
        out.append(RawMessage(subject_for(topology, e), codec.encode(e), headers))
    return out


# ---------------------------------------------------------------- the bench harness


class Bench:
    """One server, a namespace counter, and helpers to open an EventLog or a raw client."""

    def __init__(self, server: NatsServer, options: Options) -> None:
        self.server = server
        self.options = options
        self.count = 0
        self.stamp = f"{os.getpid()}x{int(time.time()) % 100000}"

    def settings(self) -> NatsSettings:
        self.count += 1
        return NatsSettings(url=self.server.url, namespace=f"bench{self.stamp}n{self.count}")

    async def eventlog(self) -> EventLog:
        """A connected EventLog on fresh streams."""
        return await EventLog.connect(self.settings(), name="bench-eventlog")

    async def raw(self) -> tuple[Client, JetStreamContext, NatsSettings]:
        """A plain nats-py client and JetStream context configured like the EventLog's, on fresh streams."""
        settings = self.settings()
        nc = await nats.connect(settings.url, name="bench-raw")
        js = nc.jetstream(timeout=settings.request_timeout_s, publish_async_max_pending=settings.span_window)
        await ensure_streams(js, settings)
        return nc, js, settings

    def deadline(self) -> float:
        return time.perf_counter() + self.options.time_cap


async def stored(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


# ---------------------------------------------------------------- 1. control appends


async def vb_append_seq(b: Bench, n: int, tasks: int) -> Run:
    log = await b.eventlog()
    try:
        events = rollout_events(log.topology.namespace, n)
        latencies: list[float] = []
        deadline = b.deadline()

        async def worker(part: Sequence[AnyEvent]) -> None:
            for e in part:
                t = time.perf_counter()
                result = await log.append([e], expected_seq=0)
                latencies.append(time.perf_counter() - t)
                assert not result.already_applied
                if t > deadline:
                    return

        start = time.perf_counter()
        await asyncio.gather(*(worker(events[i::tasks]) for i in range(tasks)))
        seconds = time.perf_counter() - start
        assert await stored(log.js, log.topology.control_stream) == len(latencies)
        return Run(len(latencies), seconds, latencies)
    finally:
        await log.close()


async def raw_append_seq(b: Bench, n: int, tasks: int) -> Run:
    nc, js, settings = await b.raw()
    try:
        topo = Topology(namespace=settings.namespace)
        messages = raw_messages(topo, rollout_events(settings.namespace, n), occ=True)
        latencies: list[float] = []
        deadline = b.deadline()
        timeout = settings.request_timeout_s

        async def worker(part: Sequence[RawMessage]) -> None:
            for m in part:
                t = time.perf_counter()
                ack = await js.publish(m.subject, m.data, timeout=timeout, headers=m.headers)
                latencies.append(time.perf_counter() - t)
                assert not ack.duplicate
                if t > deadline:
                    return

        start = time.perf_counter()
        await asyncio.gather(*(worker(messages[i::tasks]) for i in range(tasks)))
        seconds = time.perf_counter() - start
        assert await stored(js, topo.control_stream) == len(latencies)
        return Run(len(latencies), seconds, latencies)
    finally:
        await nc.drain()


async def vb_append_many(b: Bench, n: int, batch: int) -> Run:
    log = await b.eventlog()
    try:
        events = rollout_events(log.topology.namespace, n)
        done, deadline = 0, b.deadline()
        start = time.perf_counter()
        for i in range(0, n, batch):
            results = await log.append_many(events[i : i + batch], expected_seq=0)
            assert all(isinstance(r, Appended) and not r.already_applied for r in results), results[:3]
            done += len(results)
            if time.perf_counter() > deadline:
                break
        seconds = time.perf_counter() - start
        assert await stored(log.js, log.topology.control_stream) == done
        return Run(done, seconds)
    finally:
        await log.close()


async def raw_windows(js: JetStreamContext, messages: Sequence[RawMessage], window: int, deadline: float) -> int:
    """publish_async ``window`` messages, wait for all their acks, repeat; return how many were acked."""
    done = 0
    for i in range(0, len(messages), window):
        futures = [await js.publish_async(m.subject, m.data, headers=m.headers) for m in messages[i : i + window]]
        acks = await asyncio.gather(*futures)
        assert not any(a.duplicate for a in acks)
        done += len(acks)
        if time.perf_counter() > deadline:
            break
    return done


async def raw_append_many(b: Bench, n: int, batch: int) -> Run:
    nc, js, settings = await b.raw()
    try:
        topo = Topology(namespace=settings.namespace)
        messages = raw_messages(topo, rollout_events(settings.namespace, n), occ=True)
        start = time.perf_counter()
        done = await raw_windows(js, messages, batch, b.deadline())
        seconds = time.perf_counter() - start
        assert await stored(js, topo.control_stream) == done
        return Run(done, seconds)
    finally:
        await nc.drain()


# ---------------------------------------------------------------- 2. span publishing


def span_call_size(window: int) -> int:
    """Events handed to one publish_spans call (a whole number of windows, for the time cap)."""
    return window * 5


async def vb_spans(b: Bench, n: int) -> Run:
    log = await b.eventlog()
    try:
        events = span_events(log.topology.namespace, n)
        step, done, deadline = span_call_size(log.settings.span_window), 0, b.deadline()
        start = time.perf_counter()
        for i in range(0, n, step):
            chunk = events[i : i + step]
            await log.publish_spans(chunk)
            done += len(chunk)
            if time.perf_counter() > deadline:
                break
        seconds = time.perf_counter() - start
        assert await stored(log.js, log.topology.spans_stream) == done
        return Run(done, seconds)
    finally:
        await log.close()


async def raw_spans(b: Bench, n: int) -> Run:
    nc, js, settings = await b.raw()
    try:
        topo = Topology(namespace=settings.namespace, span_shards=settings.span_shards)
        messages = raw_messages(topo, span_events(settings.namespace, n), occ=False)
        start = time.perf_counter()
        done = await raw_windows(js, messages, settings.span_window, b.deadline())
        seconds = time.perf_counter() - start
        assert await stored(js, topo.spans_stream) == done
        return Run(done, seconds)
    finally:
        await nc.drain()


# ---------------------------------------------------------------- 3. ordered replay


async def fill(b: Bench, log: EventLog, stream: str, n: int) -> None:
    """Store ``n`` events in the EventLog's ``stream`` (untimed), through a raw client."""
    nc = await nats.connect(b.server.url, name="bench-fill")
    try:
        js = nc.jetstream(timeout=30.0, publish_async_max_pending=log.settings.span_window)
        ns = log.topology.namespace
        events = rollout_events(ns, n) if stream == "control" else span_events(ns, n)
        deadline = time.perf_counter() + 120.0
        await raw_windows(js, raw_messages(log.topology, events, occ=False), log.settings.span_window, deadline)
    finally:
        await nc.drain()


async def vb_replay(log: EventLog, stream: str, n: int, deadline: float) -> Run:
    count = 0
    start = time.perf_counter()
    async with contextlib.aclosing(log.replay(stream)) as items:  # type: ignore[arg-type]
        async for item in items:
            assert isinstance(item, Envelope), item
            count += 1
            if time.perf_counter() > deadline:
                break
    return Run(count, time.perf_counter() - start)


async def raw_replay(b: Bench, log: EventLog, stream: str, n: int, deadline: float, mode: str = "cb") -> Run:
    """A plain ordered consumer over the same stream: ``cb`` counts in a callback, ``next`` loops on next_msg."""
    nc = await nats.connect(b.server.url, name="bench-raw-replay")
    name = log.topology.control_stream if stream == "control" else log.topology.spans_stream
    kwargs = dict(
        stream=name,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        config=ConsumerConfig(opt_start_seq=1),
    )
    js = nc.jetstream()
    count = 0
    try:
        start = time.perf_counter()
        if mode == "cb":
            finished = asyncio.Event()

            async def cb(msg: object) -> None:
                nonlocal count
                count += 1
                if count >= n:
                    finished.set()

            sub = await js.subscribe(f"{log.topology.namespace}.>", cb=cb, **kwargs)  # type: ignore[arg-type]
            try:
                await asyncio.wait_for(finished.wait(), max(0.1, deadline - time.perf_counter()))
            except TimeoutError:
                pass
        elif mode == "cb+queue":  # what a replay built on a callback and a local queue would do per message
            queue: asyncio.Queue[Msg] = asyncio.Queue()
            decode = codec.decode_control if stream == "control" else codec.decode_spans

            async def put(msg: Msg) -> None:
                queue.put_nowait(msg)

            sub = await js.subscribe(f"{log.topology.namespace}.>", cb=put, **kwargs)  # type: ignore[arg-type]
            while count < n and time.perf_counter() < deadline:
                msg = queue.get_nowait() if not queue.empty() else await asyncio.wait_for(queue.get(), 10)
                meta = msg.metadata
                Envelope(
                    seq=meta.sequence.stream,
                    subject=msg.subject,
                    time=meta.timestamp.timestamp(),
                    event=decode(msg.data),
                )
                count += 1
        else:
            sub = await js.subscribe(f"{log.topology.namespace}.>", **kwargs)  # type: ignore[arg-type]
            while count < n and time.perf_counter() < deadline:
                msg = await sub.next_msg(timeout=10)
                if mode == "next+meta":
                    msg.metadata.timestamp.timestamp()
                count += 1
        seconds = time.perf_counter() - start
        await sub.unsubscribe()
        return Run(count, seconds)
    finally:
        await nc.drain()


# ---------------------------------------------------------------- cases


Side = Callable[[], Awaitable[Run]]


async def alternate(b: Bench, vb: Side, raw: Side) -> tuple[list[Run], list[Run]]:
    """``reps`` runs of each side, alternating which goes first."""
    vbs, raws = [], []
    for rep in range(b.options.reps):
        if rep % 2 == 0:
            raws.append(await raw())
            vbs.append(await vb())
        else:
            vbs.append(await vb())
            raws.append(await raw())
    return vbs, raws


def summarize(case: str, vbs: list[Run], raws: list[Run], note: str = "") -> Figure:
    def med_pct(runs: list[Run], q: float) -> float | None:
        if not runs[0].latencies:
            return None
        return statistics.median(percentile(r.latencies, q) for r in runs)

    return Figure(
        case=case,
        events=int(statistics.median(r.events for r in vbs)),
        rate=statistics.median(r.rate for r in vbs),
        p50_ms=med_pct(vbs, 0.50),
        p99_ms=med_pct(vbs, 0.99),
        raw_rate=statistics.median(r.rate for r in raws),
        raw_p50_ms=med_pct(raws, 0.50),
        raw_p99_ms=med_pct(raws, 0.99),
        note=note,
    )


async def case_append_seq(b: Bench) -> list[Figure]:
    n = b.options.appends
    vbs, raws = await alternate(b, lambda: vb_append_seq(b, n, 1), lambda: raw_append_seq(b, n, 1))
    return [summarize("append_seq", vbs, raws, "append([e], expected_seq=0) vs js.publish + OCC headers")]


async def case_append_concurrent(b: Bench) -> list[Figure]:
    n, c = b.options.appends, b.options.concurrency
    vbs, raws = await alternate(b, lambda: vb_append_seq(b, n, c), lambda: raw_append_seq(b, n, c))
    return [summarize(f"append_c{c}", vbs, raws, f"{c} tasks, one connection")]


async def case_append_many(b: Bench) -> list[Figure]:
    n, batch = b.options.appends, b.options.batch
    vbs, raws = await alternate(b, lambda: vb_append_many(b, n, batch), lambda: raw_append_many(b, n, batch))
    return [summarize("append_many", vbs, raws, f"batches of {batch} vs publish_async windows of {batch}")]


async def case_spans(b: Bench) -> list[Figure]:
    n = b.options.spans
    vbs, raws = await alternate(b, lambda: vb_spans(b, n), lambda: raw_spans(b, n))
    size = len(codec.encode(span_events("bench", 1)[0]))
    return [summarize("spans", vbs, raws, f"{size} B SpanRecorded, window {NatsSettings().span_window}")]


async def replay_case(b: Bench, stream: str) -> list[Figure]:
    n = b.options.replay
    log = await b.eventlog()
    try:
        await fill(b, log, stream, n)
        vbs, raws = await alternate(
            b, lambda: vb_replay(log, stream, n, b.deadline()), lambda: raw_replay(b, log, stream, n, b.deadline())
        )
        for runs in (vbs, raws):
            assert all(r.events == n or r.seconds >= b.options.time_cap for r in runs), [r.events for r in runs]
        figures = [summarize(f"replay_{stream}", vbs, raws, "decoded Envelopes vs callback counter")]
        if stream == "control":  # where replay time goes: the same consumer read with next_msg, no decoding
            for mode in ("next", "next+meta", "cb+queue"):
                runs = [await raw_replay(b, log, stream, n, b.deadline(), mode) for _ in range(b.options.reps)]
                figures.append(summarize(f"diag_replay_{mode}", runs, raws, DIAG_NOTES[mode]))
        return figures
    finally:
        await log.close()


async def case_replay_control(b: Bench) -> list[Figure]:
    return await replay_case(b, "control")


async def case_replay_spans(b: Bench) -> list[Figure]:
    return await replay_case(b, "spans")


DIAG_NOTES = {
    "next": "diagnostic: raw ordered consumer read with sub.next_msg, nothing else",
    "next+meta": "diagnostic: next_msg + msg.metadata timestamp",
    "cb+queue": "diagnostic: callback -> asyncio.Queue, metadata + decode + Envelope",
}

CASES: dict[str, Callable[[Bench], Awaitable[list[Figure]]]] = {
    "append_seq": case_append_seq,
    "append_concurrent": case_append_concurrent,
    "append_many": case_append_many,
    "spans": case_spans,
    "replay_control": case_replay_control,
    "replay_spans": case_replay_spans,
}


# ---------------------------------------------------------------- reporting


def git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


def server_version() -> str:
    out = subprocess.run([str(find_binary()), "--version"], capture_output=True, text=True).stdout.strip()
    return out.rsplit(" ", 1)[-1].lstrip("v") or "unknown"


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def table(figures: Sequence[Figure]) -> str:
    head = f"{'case':<22} {'events':>7} {'ev/s':>9} {'p50 ms':>7} {'p99 ms':>7} | {'raw ev/s':>9} {'p50 ms':>7} "
    head += f"{'p99 ms':>7} | {'ratio':>6}  note"
    lines = [head, "-" * len(head)]
    for f in figures:
        lines.append(
            f"{f.case:<22} {f.events:>7} {f.rate:>9,.0f} {fmt(f.p50_ms):>7} {fmt(f.p99_ms):>7} | "
            f"{f.raw_rate:>9,.0f} {fmt(f.raw_p50_ms):>7} {fmt(f.raw_p99_ms):>7} | {f.ratio:>6.0%}  {f.note}"
        )
    return "\n".join(lines)


def write_csv(path: Path, figures: Sequence[Figure]) -> None:
    """Append one ledger row per figure (diagnostics excluded)."""
    common = {
        "utc_time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "nats_server_version": server_version(),
        "nats_py_version": importlib.metadata.version("nats-py"),
        "host_cores": os.cpu_count(),
    }
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        if new:
            writer.writeheader()
        for f in figures:
            if f.case.startswith("diag_"):
                continue
            writer.writerow(
                common
                | {
                    "case": f.case,
                    "events": f.events,
                    "events_per_s": round(f.rate, 1),
                    "p50_ms": "" if f.p50_ms is None else round(f.p50_ms, 3),
                    "p99_ms": "" if f.p99_ms is None else round(f.p99_ms, 3),
                    "raw_events_per_s": round(f.raw_rate, 1),
                    "ratio": round(f.ratio, 3),
                }
            )


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[Figure]:
    """Start the server, run the cases, print the table, append to the ledger; return the figures."""
    bus = BusSettings(data_dir=data_dir, port=0, monitor_port=0)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    echo(f"nats-server {server_version()} at {server.url}, sync_interval: always={bus.sync_always}, store {data_dir}")
    figures: list[Figure] = []
    try:
        b = Bench(server, options)
        await raw_append_seq(b, 200, 1)  # warm-up: first stream files, connections
        for name in options.cases:
            t = time.perf_counter()
            got = await CASES[name](b)
            figures += got
            echo(f"  {name}: {time.perf_counter() - t:.1f}s " + ", ".join(f"{f.case} {f.ratio:.0%}" for f in got))
    finally:
        server.stop()
    echo(table(figures))
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {sum(not f.case.startswith('diag_') for f in figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_eventlog", description=__doc__.split("\n")[0])
    p.add_argument("--appends", type=int, default=d.appends, help="control appends per run (%(default)s)")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="tasks in append_c<N> (%(default)s)")
    p.add_argument("--batch", type=int, default=d.batch, help="events per append_many call (%(default)s)")
    p.add_argument("--spans", type=int, default=d.spans, help="span events per run (%(default)s)")
    p.add_argument("--replay", type=int, default=d.replay, help="stored events per replay case (%(default)s)")
    p.add_argument("--reps", type=int, default=d.reps, help="repetitions; medians are reported (%(default)s)")
    p.add_argument("--time-cap", type=float, default=d.time_cap, help="seconds per timed run (%(default)s)")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=d.cases, help="cases to run (all)")
    p.add_argument("--csv", type=Path, default=d.csv, help="ledger to append to (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to the ledger")
    a = p.parse_args(argv)
    return Options(
        appends=a.appends,
        concurrency=a.concurrency,
        batch=a.batch,
        spans=a.spans,
        replay=a.replay,
        reps=a.reps,
        time_cap=a.time_cap,
        cases=a.cases,
        csv=None if a.no_csv else a.csv,
    )


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-") as tmp:
        asyncio.run(run(options, Path(tmp)))


if __name__ == "__main__":
    main()
