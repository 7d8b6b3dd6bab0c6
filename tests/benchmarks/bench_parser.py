"""Cutting stored messages out of socket reads: the feed's ``SinkParser`` next to nats-py's own parser.

    python -m tests.benchmarks.bench_parser [--messages N] [--reps N]

Both parse the same wire bytes (control-sized ``HMSG`` deliveries: an OCC append's headers, a ~300-byte
event, a JetStream reply subject), fed in the 32 KiB reads nats-py's read loop makes, each handing every
message on (nats-py: to the connection's ``_process_msg``; ours: straight to the sink). Raw = nats-py's
parser. No bus: this is the parsing alone, which the projector's feed pays per event.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from nats.protocol.parser import Parser

from tests.benchmarks.bench_eventlog import Figure, Run, summarize, table
from voltbus.services.eventlog.connection import Connection
from voltbus.services.eventlog.natsprivate import SinkParser

SID = 7
HEADERS = b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence-Subject: vb.ro.ro-1.>\r\nNats-Msg-Id: ev-123456789\r\n\r\n"


class Counting(Connection):
    """A connection (never connected) whose sink and ``_process_msg`` only count."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.sinks[SID] = self.take

    def take(self, subject: bytes, reply: bytes, data: bytes) -> None:
        self.count += 1

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.sinks[sid](subject, reply, data)


def wire(n: int) -> list[bytes]:
    """``n`` deliveries as the server writes them, cut into 32 KiB reads."""
    out = []
    for i in range(1, n + 1):
        reply = b"$JS.ACK.vb-control.c0nsumer.1.%d.%d.1767225601000000000.%d" % (i, i, n - i)
        size = len(HEADERS) + 300
        out.append(
            b"HMSG vb.ro.ro-%d.ev %d %s %d %d\r\n%s%s\r\n" % (i, SID, reply, len(HEADERS), size, HEADERS, b"x" * 300)
        )
    data = b"".join(out)
    return [data[i : i + 32768] for i in range(0, len(data), 32768)]


async def parse(parser_type: type[Parser], reads: list[bytes], n: int) -> Run:
    nc = Counting()
    parser = parser_type(nc)
    start = time.perf_counter()
    for chunk in reads:
        await parser.parse(chunk)
    seconds = time.perf_counter() - start
    assert nc.count == n, (nc.count, n)
    return Run(n, seconds)


async def run(messages: int = 20_000, reps: int = 5) -> list[Figure]:
    reads = wire(messages)
    ours, raws = [], []
    for rep in range(reps):  # alternating which side goes first
        sides = [(SinkParser, ours), (Parser, raws)]
        for parser_type, runs in sides if rep % 2 == 0 else reversed(sides):
            runs.append(await parse(parser_type, reads, messages))
    return [summarize("parse_control", ours, raws, "SinkParser vs nats-py Parser, 32 KiB reads, no bus")]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_parser", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="deliveries per run (%(default)s)")
    p.add_argument("--reps", type=int, default=5, help="runs per side, alternating; medians (%(default)s)")
    a = p.parse_args(argv)
    figures = asyncio.run(run(a.messages, a.reps))
    print(table(figures))
    for f in figures:
        print(f"{f.case}: {1e6 / f.rate:.2f} µs per message, nats-py {1e6 / f.raw_rate:.2f}")


if __name__ == "__main__":
    main()
