"""The sink parser cuts the same messages, in the same order, as nats-py's parser, however the reads split."""

from __future__ import annotations

import pytest
from nats.protocol.parser import Parser

from voltbus.services.eventlog.connection import Connection
from voltbus.services.eventlog.parser import SinkParser

SINK, OTHER = 7, 9


class Recording(Connection):
    """A connection (never connected) that records what its parser hands on, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[object, ...]] = []
        self.sinks[SINK] = lambda subject, reply, data: self.seen.append(("sink", subject, reply, data))

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        if sid in self.sinks and reply.startswith(b"$JS.ACK."):
            self.sinks[sid](subject, reply, data)
        else:
            self.seen.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.seen.append(("ping",))


def hmsg(sid: int, i: int, payload: bytes, reply: bytes | None = None) -> bytes:
    headers = b"NATS/1.0\r\nNats-Msg-Id: ev-%d\r\n\r\n" % i
    reply = reply if reply is not None else b"$JS.ACK.S.c.1.%d.%d.1767225600000000000.0" % (i, i)
    line = b"HMSG vb.ro.%d %d %s %d %d\r\n" % (i, sid, reply, len(headers), len(headers) + len(payload))
    return line + headers + payload + b"\r\n"


def msg(sid: int, i: int, payload: bytes, reply: bytes = b"") -> bytes:
    return b"MSG vb.sp.%d %d %s%d\r\n%s\r\n" % (i, sid, reply + b" " if reply else b"", len(payload), payload)


STREAM = b"".join(
    [
        hmsg(SINK, 1, b'{"a":1}'),
        hmsg(SINK, 2, b""),  # no payload at all
        b"PING\r\n",
        hmsg(OTHER, 3, b"for a subscription without a sink"),
        msg(SINK, 4, b"no headers", reply=b"$JS.ACK.S.c.1.4.4.1767225600000000000.0"),
        hmsg(SINK, 5, b"flow control is no stored message", reply=b"$JS.FC.S.x.y"),
        msg(SINK, 6, b"core message, no reply"),
        hmsg(SINK, 7, b"x" * 100_000),  # longer than a read
        hmsg(SINK, 8, b"\r\nHMSG inside a payload 9 9\r\n"),
        b"+OK\r\n",
        hmsg(SINK, 9, b"last"),
    ]
)


async def parsed(parser_type: type[Parser], size: int) -> list[tuple[object, ...]]:
    nc = Recording()
    parser = parser_type(nc)
    for at in range(0, len(STREAM), size):
        await parser.parse(STREAM[at : at + size])
    assert not parser.buf, "bytes left over"
    return nc.seen


@pytest.mark.parametrize("size", [1, 2, 5, 64, 1000, 32768, len(STREAM)])
async def test_every_split_of_the_reads_gives_what_nats_py_gives(size: int) -> None:
    expected = await parsed(Parser, len(STREAM))
    assert [e[0] for e in expected].count("sink") == 6 and ("ping",) in expected
    assert await parsed(SinkParser, size) == expected


async def test_a_connection_parses_with_the_sink_parser() -> None:
    assert isinstance(Connection()._ps, SinkParser)
