"""What each nats-py private touch of the feed saves: ``Feed.batch`` over the same stored events, three ways.

    python -m tests.benchmarks.bench_feed [--control N] [--spans N] [--reps N]

Sides, each on its own connection to one nats-server (``NatsServer``, production ``BusSettings``):
  public   a plain ``nats.connect()`` client: nats-py's parser, ``Msg``, header parse, subscription queue and
           task per message, into the feed's callback (public API only)
  sinks    our ``Connection`` with nats-py's stock parser: deliveries go to the feed's sink from the
           connection's ``_process_msg`` (private touch: ``Client._process_msg``, ``Subscription._id``)
  parser   our ``Connection`` as shipped: the sink parser cuts deliveries out of each read (private touch:
           ``Client._ps``, ``Parser.buf``/``state``)
And, decoded only, ``faststream``: a consumer written with ``voltbus.consumer`` (FastStream's ``NatsBroker``, an
ordered consumer, each message decoded into an ``Envelope`` and handed to a handler that counts it), what a
user's own consumer on the log costs next to the projector's feed.
Control events are OCC appends (``RolloutQueued``, ~390 B, the two OCC headers); span events ``SpanRecorded``
(~700 B). ``read`` leaves every event undecoded (``Feed.keep``: the read path alone); ``decoded`` decodes
(what a projector's feed does). Runs alternate the order of the sides; the figures are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import nats
from nats.aio.client import Client
from nats.protocol.parser import Parser

from tests.benchmarks.bench_eventlog import rollout_events, span_events
from voltbus.consumer import Item, log_broker, log_subscriber
from voltbus.schemas import codec
from voltbus.schemas.subjects import Topology
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.connection import connect
from voltbus.services.eventlog.feed import Feed
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings

SIDES = ("public", "sinks", "parser")


async def fill(settings: NatsSettings, control: int, spans: int) -> dict[str, int]:
    """Store the events through the EventLog (untimed); returns where each stream ends."""
    log = await EventLog.connect(settings, name="bench-feed-fill")
    try:
        events = rollout_events(settings.namespace, control)
        for i in range(0, control, 1000):
            results = await log.append_many(events[i : i + 1000], expected_seq=0)
            assert all(not isinstance(r, Exception) for r in results), results[:3]
        await log.publish_spans(span_events(settings.namespace, spans))
        return {s: await log.feed(s).last_seq() for s in ("control", "spans")}  # type: ignore[arg-type]
    finally:
        await log.close()


async def client(side: str, settings: NatsSettings) -> Client:
    if side == "public":
        return await nats.connect(settings.url, name="bench-feed-public")
    nc = await connect(settings, name=f"bench-feed-{side}")
    if side == "sinks":
        nc._ps = Parser(nc)  # the stock parser: only the connection's _process_msg hands over to the sink
    return nc


async def read(side: str, settings: NatsSettings, stream: str, end: int, decoded: bool) -> float:
    """Seconds to take ``end`` events of ``stream`` out of a feed opened at 1 (batches of 2,000)."""
    nc = await client(side, settings)
    topo = Topology(namespace=settings.namespace)
    name = topo.control_stream if stream == "control" else topo.spans_stream
    decode = codec.decode_control if stream == "control" else codec.decode_spans
    feed = Feed(nc, nc.jetstream(timeout=settings.request_timeout_s), name, f"{topo.namespace}.>", decode)
    if not decoded:
        feed.keep = lambda subject: False
    count = 0
    try:
        await feed.open(1)
        start = time.perf_counter()
        while count < end:
            count += len(await feed.batch(2000, 1.0, to_seq=end))
        return time.perf_counter() - start
    finally:
        await feed.close()
        await nc.close()


async def consume(settings: NatsSettings, stream: str, end: int) -> float:
    """Seconds a FastStream consumer (``voltbus.consumer``) takes to hand ``end`` decoded events to its handler."""
    broker = log_broker(settings, log_level=logging.DEBUG)
    count, done = 0, asyncio.Event()

    @log_subscriber(broker, stream, settings)  # type: ignore[arg-type]
    async def handle(item: Item) -> None:
        nonlocal count
        count += 1
        if count >= end:
            done.set()

    async with broker:
        start = time.perf_counter()
        await broker.start()
        await asyncio.wait_for(done.wait(), 300)
        return time.perf_counter() - start


async def run(control: int = 20_000, spans: int = 20_000, reps: int = 5) -> dict[tuple[str, str], dict[str, float]]:
    """µs per event of each side, per (stream, read|decoded), medians of ``reps`` alternated runs."""
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(BusSettings(data_dir=Path(tmp), port=0, monitor_port=0), NatsSettings().max_payload)
        server.start()
        try:
            settings = NatsSettings(url=server.url, namespace=f"benchfeed{int(time.time()) % 100000}")
            ends = await fill(settings, control, spans)
            out: dict[tuple[str, str], dict[str, float]] = {}
            for stream in ("control", "spans"):
                for decoded in (False, True):
                    sides = (*SIDES, "faststream") if decoded else SIDES
                    runs: dict[str, list[float]] = {s: [] for s in sides}
                    for rep in range(reps):
                        order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                        for side in order:
                            if side == "faststream":
                                seconds = await consume(settings, stream, ends[stream])
                            else:
                                seconds = await read(side, settings, stream, ends[stream], decoded)
                            runs[side].append(seconds * 1e6 / ends[stream])
                    key = (stream, "decoded" if decoded else "read")
                    out[key] = {s: statistics.median(v) for s, v in runs.items()}
            return out
        finally:
            server.stop()


def report(figures: dict[tuple[str, str], dict[str, float]]) -> str:
    head = f"{'case':<16} {'public':>8} {'sinks':>8} {'parser':>8} {'faststream':>10} | "
    head += f"{'sinks/public':>12} {'parser/sinks':>12}"
    lines = [head + "   (µs per event; ratios of rates)", "-" * len(head)]
    for (stream, mode), us in figures.items():
        fs = f"{us['faststream']:>10.2f}" if "faststream" in us else f"{'-':>10}"
        lines.append(
            f"{stream + ' ' + mode:<16} {us['public']:>8.2f} {us['sinks']:>8.2f} {us['parser']:>8.2f} {fs} | "
            f"{us['public'] / us['sinks']:>12.0%} {us['sinks'] / us['parser']:>12.0%}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_feed", description=__doc__.split("\n")[0])
    p.add_argument("--control", type=int, default=20_000, help="control events stored (%(default)s)")
    p.add_argument("--spans", type=int, default=20_000, help="span events stored (%(default)s)")
    p.add_argument("--reps", type=int, default=5, help="runs per side, alternating; medians (%(default)s)")
    a = p.parse_args(argv)
    print(report(asyncio.run(run(a.control, a.spans, a.reps))))


if __name__ == "__main__":
    main()
