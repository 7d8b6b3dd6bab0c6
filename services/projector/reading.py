"""A reader process: one share of a stream read from the bus and prepared, handed to the projector as
Arrow tables, cut by cut (see reader.py). Forked by the fork server (forks.py)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from typing import Any

from voltbus.projections.ipc import to_ipc
from voltbus.projections.lean import projector_feed
from voltbus.projections.prepare import Preparer, cut_of, load_states, span_part
from voltbus.services.eventlog import EventLog, connect
from voltbus.services.frames import next_frame
from voltbus.services.settings import NatsSettings

from .messages import BUFFERED, FRAMES, Arrived, Batch, Failed, Frame, Need, Start, States, Upto

HOLD = 4
"""Batches' worth of received messages a reader holds before it waits for the projector to ask."""
BATCH_HINT = 2000
"""Messages a reader takes from its feed at a time."""
POLL_S = 0.005
"""Longest a reader waits on its feed before it looks at the projector's asks again."""


def main(sock: socket.socket) -> None:
    """A reader process's work (forked by ``serve_forks``)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(sock))


async def _serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.transport.set_write_buffer_limits(high=BUFFERED)  # go on preparing while the projector reads
    start = await _receive(reader)
    assert isinstance(start, Start), start
    label = f"{start.stream} {start.part[0] + 1}/{start.part[1]}"
    logging.basicConfig(level=start.log_level, format=f"%(asctime)s voltbus reader ({label}): %(message)s")
    try:
        settings = NatsSettings.model_validate_json(start.settings)
        log_ = EventLog(await connect(settings, f"voltbus-reader-{start.stream}"), settings)  # the streams exist
    except Exception as exc:  # the projector goes on without readers, and says why
        writer.write(FRAMES.frame(Failed(reason=f"{type(exc).__name__}: {exc}")))
        await writer.drain()
        return
    asks = Asks()
    listening = asyncio.create_task(_listen(reader, asks))  # ends when the projector closes the socket
    preparer = Preparer({start.stream: start.from_seq - 1}, {}, start.part)
    work = asyncio.create_task(_work(log_, start, preparer, writer, asks))
    try:
        await asyncio.wait([listening, work], return_when=asyncio.FIRST_COMPLETED)
        if work.done():  # the stream reached to_seq, or reading failed
            if not work.cancelled() and (exc := work.exception()) is not None:
                cut = exc.cut if isinstance(exc, Unprepared) else None
                writer.write(FRAMES.frame(Failed(reason=f"{type(exc).__name__}: {exc}", cut=cut)))
            writer.transport.set_write_buffer_limits(high=0)
            await writer.drain()  # every batch handed over
            await listening  # until the projector closes the socket
    except (ConnectionError, OSError):
        pass
    finally:
        for task in (listening, work):
            task.cancel()
        await asyncio.gather(listening, work, return_exceptions=True)
        await log_.close()
        writer.close()


async def _receive(reader: asyncio.StreamReader) -> Frame:
    return FRAMES.decode(await next_frame(reader))


class Asks:
    """What the projector said: the cuts it asked for, how far it has committed, the folds it sent."""

    def __init__(self) -> None:
        self.cuts: collections.deque[int] = collections.deque()
        self.asked = asyncio.Event()
        self.committed = 0
        self.folds: asyncio.Queue[States] = asyncio.Queue()


async def _listen(reader: asyncio.StreamReader, asks: Asks) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            match await _receive(reader):
                case Upto() as ask:
                    asks.cuts.append(ask.seq)
                    asks.committed = max(asks.committed, ask.committed)
                    asks.asked.set()
                case States() as folds:
                    asks.folds.put_nowait(folds)


async def _folds(preparer: Preparer, items: list[Any], writer: asyncio.StreamWriter, asks: Asks) -> None:
    """The committed folds of the rollouts of ``items`` the preparer does not keep, asked of the projector."""
    if wanted := preparer.missing(items):
        writer.write(FRAMES.frame(Need(rollout_ids=wanted)))
        await writer.drain()
        preparer.states.update(load_states((await asks.folds.get()).blobs))


async def _work(
    log_: EventLog,
    start: Start,
    preparer: Preparer,
    writer: asyncio.StreamWriter,
    asks: Asks,
) -> None:
    stream, end, (index, count) = start.stream, start.to_seq, start.part
    feed = projector_feed(log_, stream)
    if stream == "spans" and count > 1:
        feed.keep = lambda subject: span_part(subject, count) == index  # others' messages stay undecoded
    await feed.open(start.from_seq)
    held: collections.deque[Any] = collections.deque()
    tail = start.from_seq - 1
    began = seen = feed.seen
    try:
        while end is None or preparer.positions[stream] < end:
            if asks.cuts and asks.cuts[0] <= tail:  # a cut that every reader has received: this share's tables
                cut, items = asks.cuts.popleft(), []
                while held and held[0].seq <= cut:
                    items.append(held.popleft())
                if stream == "control":
                    await _folds(preparer, items, writer, asks)
                # Prepared here on the loop, not in a thread: the two would take turns with the interpreter lock,
                # each waiting for the other. Meanwhile deliveries wait in the socket.
                try:
                    batch = _batch(preparer, stream, items, cut, seen)
                except Exception as exc:
                    raise Unprepared(f"{type(exc).__name__}: {exc}", cut) from exc
                preparer.forget(asks.committed, start.kept)
                batch.folds = len(preparer.states)
                writer.write(FRAMES.frame(batch))
                await writer.drain()
                continue
            if len(held) >= HOLD * BATCH_HINT and not asks.cuts:
                asks.asked.clear()
                await asks.asked.wait()  # enough held: wait for the projector to ask
                continue
            items = await feed.batch(BATCH_HINT, POLL_S, to_seq=end)  # short: an ask waits for it
            seen = feed.seen
            if seen != began:  # what comes now may come from a restarted server: the projector checks first
                raise Resubscribed(f"the feed re-subscribed or reconnected ({began} -> {seen})")
            if items:
                held.extend(items)
                tail = items[-1].seq
                writer.write(FRAMES.frame(Arrived(seq=tail, seen=seen)))
                await writer.drain()
    finally:
        await feed.close()


class Unprepared(Exception):
    """A cut the reader could not prepare (Arrow refused a row)."""

    def __init__(self, reason: str, cut: int) -> None:
        super().__init__(reason)
        self.cut = cut


class Resubscribed(Exception):
    """The reader's feed re-subscribed or its connection came back: it stops before handing over anything
    received since, so that the projector can compare its checkpoint with the log first."""


def _batch(preparer: Preparer, stream: str, items: list[Any], cut: int, seen: tuple[int, int]) -> Batch:
    prepared = preparer.prepare(stream, items)
    if prepared is None:  # nothing past the position (a cut the reader had already passed)
        return Batch(stream=stream, last=cut, stamp=0.0, count=0, tables=[], seen=seen)
    tables = [(name, to_ipc(table)) for name, table in prepared.tables]
    return Batch(**cut_of(prepared), tables=tables, seen=seen)  # type: ignore[arg-type]
