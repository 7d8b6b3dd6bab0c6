"""The protocol parser of a connection with sinks: stored messages for a sink are cut out of what the socket
read without nats-py's per-message work (two regular expressions, a dict of arguments, two deletions from
the buffer's front, an awaited call); its cost per message against nats-py's parser: BENCHMARKS.md, "Event log".

Only ``MSG`` / ``HMSG`` lines of a subscription that has a sink, with a JetStream reply (``$JS.ACK.``), take
this path; at the first anything else (a ping, flow control, another subscription's message, a line it
cannot read) the rest of the read goes to nats-py's parser, which handles every case as before. A sink
message cut off at the end of a read is held here until the rest has come.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

if TYPE_CHECKING:
    from .connection import Connection

STORED = b"$JS.ACK."
"""How the reply subject of a stored message JetStream delivers begins (what a sink takes)."""
_LINE = re.compile(rb"H?MSG ([^ \r\n]+) (\d+) (" + re.escape(STORED) + rb"[^ \r\n]+) (?:(\d+) )?(\d+)\r\n")
"""A sink message's line: subject, subscription id, JetStream reply, header bytes (HMSG), total bytes."""


class SinkParser(Parser):
    """nats-py's parser, with a fast path for the messages of sinks (see the module's text)."""

    nc: Connection

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
