"""The contract with nats-py's private internals (services/eventlog/natsprivate.py): the version and the names
it was written for are there, another version is refused at import, and the sink parser cuts the same
messages, in the same order, as nats-py's parser, however the reads split.

On a nats-py upgrade the version check fails first; move ``WRITTEN_FOR`` only once this file, test_feed.py
and test_feed_restart.py pass with the new version.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys

import nats
import pytest
from nats.aio.client import Client
from nats.protocol.parser import Parser

from voltbus.schemas import codec
from voltbus.services.eventlog import BadEvent, Envelope, EventLog, Feed, natsprivate
from voltbus.services.eventlog.connection import Connection
from voltbus.services.eventlog.feed import Item
from voltbus.services.eventlog.natsprivate import WRITTEN_FOR, SinkClient, SinkParser, UnsupportedNatsPy

from .test_eventlog import queued

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
    assert isinstance(Connection()._ps, SinkParser) and isinstance(Connection(), SinkClient)


def test_the_installed_nats_py_is_the_version_the_internals_were_written_for() -> None:
    assert importlib.metadata.version("nats-py") == WRITTEN_FOR
    assert natsprivate.missing() == []
    natsprivate.check()


def test_another_nats_py_version_is_refused_naming_both_versions_and_the_module() -> None:
    with pytest.raises(UnsupportedNatsPy) as refused:
        natsprivate.check("2.17.0")
    message = str(refused.value)
    assert f"nats-py=={WRITTEN_FOR}" in message and "found 2.17.0" in message
    assert "services/eventlog/natsprivate.py" in message and "tests/services/test_natsprivate.py" in message


def test_a_private_name_in_another_shape_is_refused_even_at_the_right_version(monkeypatch: pytest.MonkeyPatch) -> None:
    async def _process_msg(self: Client, sid: int, subject: bytes, reply: bytes, data: bytes) -> None: ...

    monkeypatch.setattr(Client, "_process_msg", _process_msg)
    with pytest.raises(UnsupportedNatsPy) as refused:
        natsprivate.check(WRITTEN_FOR)
    assert refused.value.missing == ["Client._process_msg(sid, subject, reply, data, headers)"]


def test_importing_the_event_log_with_another_nats_py_fails_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version; "
        "m.version = lambda name: '2.17.0' if name == 'nats-py' else v(name); "
        "import voltbus.services.eventlog"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "UnsupportedNatsPy: voltbus needs nats-py==" + WRITTEN_FOR + ", found 2.17.0" in done.stderr


async def read_all(f: Feed, end: int) -> list[Item]:
    """Every item of ``f`` up to sequence ``end``, or fail at a generous deadline."""
    items: list[Item] = []
    async with asyncio.timeout(30):
        while len(items) < end:
            items += await f.batch(100, 0.5, to_seq=end)
    return items


async def test_a_feed_hands_out_the_same_items_through_sinks_and_on_a_plain_nats_py_client(eventlog: EventLog) -> None:
    """The sinks (the private path) and nats-py's callback (the public path, any other client) agree item for
    item, a payload-less message included; only the sinks keep stored messages off the subscription."""
    for i in range(40):
        await eventlog.append([queued(f"r{i}")], expected_seq=0)  # OCC appends: their two headers are stored
    await eventlog.js.publish(eventlog.topology.rollout_events("ro-empty"), b"")
    plain = await nats.connect(eventlog.settings.url, name="test-plain")
    feeds = [eventlog.feed("control"), Feed(plain, plain.jetstream(), eventlog.topology.control_stream,
                                            f"{eventlog.topology.namespace}.>", codec.decode_control)]  # fmt: skip
    try:
        private, public = [await read_all(await f.open(1), 41) for f in feeds]
        assert public == private and [i.seq for i in public] == list(range(1, 42))
        assert isinstance(public[-1], BadEvent) and all(isinstance(i, Envelope) for i in public[:-1])
        assert isinstance(eventlog.nc, SinkClient) and not isinstance(plain, SinkClient)
        delivered = [f.sub.delivered for f in feeds if f.sub is not None]
        assert len(delivered) == 2 and delivered[0] < 41 <= delivered[1]
    finally:
        for f in feeds:
            await f.close()
        await plain.close()
