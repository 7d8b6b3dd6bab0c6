"""Every use voltbus makes of nats-py's private internals, in this one module, for nats-py ``WRITTEN_FOR`` only.

A ``SinkClient`` hands the stored messages JetStream delivers to a subscription that has a sink straight to
it, without nats-py's per-message work (header parse, ``Msg``, the subscription's queue and task); its
``SinkParser`` cuts most of them out of the socket's reads before nats-py's parser sees them. Measured gain
and the reasons: docs/consumers.md. Importing this module with another nats-py raises ``UnsupportedNatsPy``;
tests/services/test_natsprivate.py holds the contract (what it takes from nats-py, and that it behaves so).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

WRITTEN_FOR = "2.16.0"
"""The nats-py version whose internals this module was written and checked against."""
STORED = b"$JS.ACK."
"""How the reply subject of a stored message JetStream delivers begins (what a sink takes)."""
_LINE = re.compile(rb"H?MSG ([^ \r\n]+) (\d+) (" + re.escape(STORED) + rb"[^ \r\n]+) (?:(\d+) )?(\d+)\r\n")
"""A sink message's line: subject, subscription id, JetStream reply, header bytes (HMSG), total bytes."""
PROCESS_MSG = ["self", "sid", "subject", "reply", "data", "headers"]
"""The parameters of ``Client._process_msg``, which nats-py's parser calls for every message."""

Sink = Callable[[bytes, bytes, bytes], None]
"""Takes a delivered message's subject, reply subject and payload, as the protocol parser read them."""


class UnsupportedNatsPy(ImportError):
    """The installed nats-py is not the one whose private internals voltbus's event log was written for."""

    def __init__(self, installed: str, missing: list[str]) -> None:
        self.installed, self.missing = installed, missing
        lacks = f"; it lacks {', '.join(missing)}" if missing else ""
        super().__init__(
            f"voltbus needs nats-py=={WRITTEN_FOR}, found {installed}{lacks}. services/eventlog/natsprivate.py uses "
            f"nats-py's private internals (Client._process_msg, Client._ps, Parser.buf/state, Subscription._id): "
            f"install nats-py=={WRITTEN_FOR}, or move WRITTEN_FOR to {installed} only once "
            f"tests/services/test_natsprivate.py and test_feed*.py pass with it"
        )


def missing() -> list[str]:
    """The private names this module relies on that the installed nats-py lacks (or has in another shape)."""
    gone = []
    if list(inspect.signature(Client._process_msg).parameters) != PROCESS_MSG:
        gone.append(f"Client._process_msg({', '.join(PROCESS_MSG[1:])})")
    client = Client()
    if not isinstance(getattr(client, "_ps", None), Parser):
        gone.append("Client._ps (a Parser)")
    parser = Parser(client)
    if (
        not isinstance(getattr(parser, "buf", None), bytearray)
        or getattr(parser, "state", None) != AWAITING_CONTROL_LINE
    ):
        gone.append("Parser.buf (a bytearray) and Parser.state")
    if getattr(Subscription(client, id=7), "_id", None) != 7:
        gone.append("Subscription._id")
    return gone


def check(installed: str | None = None) -> None:
    """Raise :class:`UnsupportedNatsPy` unless nats-py is ``WRITTEN_FOR`` and has every private name used here."""
    installed = installed or importlib.metadata.version("nats-py")
    gone = missing()
    if installed != WRITTEN_FOR or gone:
        raise UnsupportedNatsPy(installed, gone)


check()


class SinkParser(Parser):
    """nats-py's parser, with a fast path for the messages of sinks.

    Only ``MSG`` / ``HMSG`` lines of a subscription that has a sink, with a JetStream reply (``$JS.ACK.``), take
    this path; at the first anything else (a ping, flow control, another subscription's message, a line it
    cannot read) the rest of the read goes to nats-py's parser, which handles every case as before. A sink
    message cut off at the end of a read is held here until the rest has come.
    """

    nc: SinkClient

    def reset(self) -> None:
        super().reset()
        self.want = 0
        """Bytes the sink message held in ``buf`` needs in all (0: none held)."""

    async def parse(self, data: bytes = b"") -> None:
        if self.state != AWAITING_CONTROL_LINE or not self.nc.sinks:
            await super().parse(data)
            return
        if self.buf:
            if self.want and len(self.buf) + len(data) < self.want:
                self.buf.extend(data)  # a long message still arriving: do not cut again
                return
            data = bytes(self.buf) + data
            self.buf.clear()
        self.want = 0
        end, want = self.cut(data)
        if end == len(data):
            return
        rest = data[end:]
        if want:  # a sink message not all here yet
            self.buf.extend(rest)
            self.want = want
            return
        await super().parse(rest)

    def cut(self, data: bytes) -> tuple[int, int]:
        """Hand every complete sink message at the start of ``data`` to its sink; returns where they end and,
        when the next one is a sink message cut off by the end of ``data``, the bytes it needs in all."""
        sinks, stats = self.nc.sinks, self.nc.stats
        at, size = 0, len(data)
        while (line := _LINE.match(data, at)) is not None:
            subject, sid, reply, head, total = line.groups()
            sink = sinks.get(int(sid))
            if sink is None:
                break
            body = line.end()
            after = body + int(total) + 2
            if after > size:
                return at, after - at
            payload = data[body + int(head) if head else body : after - 2]
            stats["in_msgs"] += 1
            stats["in_bytes"] += len(payload)
            sink(subject, reply, payload)
            at = after
        return at, 0


class SinkClient(Client):
    """A nats-py client whose subscriptions can hand their stored messages straight to a sink.

    A stored message (reply subject ``$JS.ACK...``) on a subscription with a sink goes to the sink in
    delivery order, payload or not; anything else (JetStream's flow control and heartbeats, which are only
    headers) takes nats-py's usual path to the subscription's callback.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sinks: dict[int, Sink] = {}
        """Sink of each subscription id that has one."""
        self._ps = SinkParser(self)

    def add_sink(self, sub: Subscription, sink: Sink) -> None:
        """Hand ``sub``'s stored messages to ``sink`` from now on."""
        self.sinks[sub._id] = sink

    def remove_sink(self, sub: Subscription) -> None:
        """Stop handing ``sub``'s messages to a sink (nothing happens if it has none)."""
        self.sinks.pop(sub._id, None)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        sink = self.sinks.get(sid)
        if sink is None or not reply.startswith(STORED):
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        sink(subject, reply, data)
