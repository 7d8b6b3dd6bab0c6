"""Reader processes: a stream read and prepared by processes of their own, each a share of it, handing
the projector Arrow tables, so that the projector's process does little but DuckDB's work.

Reading (nats-py), decoding, folding and building Arrow tables is Python work under one interpreter
lock; in the projector's process it takes turns with the writer's DuckDB calls. In reader processes it
runs beside them, and split in shares (spans by shard subject, rollout events by rollout, the rest in
share 0: see ``prepare.Preparer``) it runs on as many cores as there are readers.

Each reader reads the whole stream, from the projector's checkpoint + 1, and says how far it has
received (``Arrived``). The projector asks every reader of a stream for the same cut (``Upto``: up to
the sequence all have received, at most a batch further); each answers with its share's tables for
exactly that range (``Batch``), and the projector writes the shares in one transaction. It keeps two cuts asked
for, so the readers prepare the next batch while it writes one. A control reader keeps the folds of the
``prepare.STATES_KEPT`` most recently changed rollouts: it asks for others (``Need``) when an event of theirs
comes, and the projector answers with the committed ones (``States``); each ask says how far the projector has
committed (``Upto.committed``), and only a fold no later event changed is forgotten, so the database holds it as it
was. This module is the projector's side; a reader's own work is in reading.py, the frames in messages.py, and
readers are forked by the fork server of forks.py (a start takes milliseconds after the first), which its owner
hands in.
The projector stays the only writer: readers never open the database. A reader ends when its socket closes (the
projector stopped or died; one that reached ``to_seq`` hands over what it has and waits for that). It stops with
``Failed`` when it cannot go on: a row Arrow refuses (the projector applies that cut itself), or its
feed re-subscribed or reconnected (the projector compares its checkpoint with the log, then starts new
readers after it, so that nothing received before a server restart is mixed with what came after).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import select
import signal
import socket
import threading
from collections.abc import Callable

import msgspec

from voltbus.projections import prepare
from voltbus.projections.ipc import from_ipc
from voltbus.projections.prepare import Part, Prepared
from voltbus.services.frames import receive
from voltbus.services.settings import NatsSettings

from .forks import Forks
from .messages import FRAMES, Arrived, Batch, Failed, Frame, Need, Start, States, Upto

log = logging.getLogger(__name__)

AHEAD = 2
"""Cuts the projector keeps asked for: the readers prepare the next while it writes one."""
ANSWER_S = 60.0
"""Longest the projector waits for a reader's share of a cut before it gives up on the reader."""
State = tuple[str, bytes]
"""A rollout's folded state, as ``rollout_states`` keeps it."""
Loader = Callable[[list[str]], list[State]]
"""The committed folds of some rollouts (those stored), read from the projector's database."""


class ReaderFailed(Exception):
    """A reader process failed, went away or stopped (``Resubscribed``): the projector starts the readers of
    the stream again from its checkpoint, or reads the stream itself."""

    def __init__(self, reason: str, cut: int | None = None) -> None:
        super().__init__(reason)
        self.cut = cut
        """A cut the reader could not prepare: the projector applies its events itself."""


class Reader:
    """One reader process, seen from the projector: frames are read by a thread of its own (blocking
    calls: a batch of model calls goes past the event loop) and handed to the loop."""

    def __init__(
        self, forks: Forks, stream: str, part: Part, pid: int, sock: socket.socket, loader: Loader | None = None
    ) -> None:
        self.forks, self.stream, self.part, self.pid, self.sock = forks, stream, part, pid, sock
        self.loader = loader
        """Where the folds the reader asks for are read (control)."""
        self.committed: Callable[[], int] = lambda: 0
        """How far the projector has committed the stream (told with each ask)."""
        self.folds = 0
        """Folded rollout states the reader process kept after its last batch, and the most it kept (``most``)."""
        self.most = 0
        self._sending = threading.Lock()
        """One frame at a time on the socket: asks from the loop, answers from a thread."""
        self._answering: set[asyncio.Task[None]] = set()
        self.pidfd: int | None = None
        """The reader's process as a descriptor (Linux): waited on and killed without mistaking another
        process that got its pid (the fork server lets the system reap its readers)."""
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(pid)
        self.tail = 0
        """How far the reader has received."""
        self.seen = (0, 0)
        self.batches: asyncio.Queue[Batch | BaseException] = asyncio.Queue()
        self.arrived = asyncio.Event()
        self.failure: ReaderFailed | None = None
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._read, name=f"voltbus-reader-{stream}", daemon=True)

    @classmethod
    async def start(
        cls,
        forks: Forks,
        settings: NatsSettings,
        stream: str,
        part: Part,
        from_seq: int,
        to_seq: int | None,
        loader: Loader | None = None,
        committed: Callable[[], int] | None = None,
    ) -> Reader:
        """Start a reader of a share of ``stream`` from ``from_seq``, forked by ``forks``; ``loader``: where the
        committed folds it asks for are read (control), ``committed``: how far the projector has committed."""
        ours, theirs = socket.socketpair()
        try:
            pid = await asyncio.to_thread(forks.fork, theirs)
        finally:
            theirs.close()
        self = cls(forks, stream, part, pid, ours, loader)
        self.committed = committed or self.committed
        self.tail = from_seq - 1
        forks.live.add(self)
        start = Start(
            settings=settings.model_dump_json(),
            stream=stream,
            from_seq=from_seq,
            to_seq=to_seq,
            part=part,
            kept=prepare.STATES_KEPT,
            log_level=logging.getLogger("voltbus").getEffectiveLevel(),
        )
        try:
            await asyncio.to_thread(self._send, [start])
        except BaseException:
            await self.close()
            raise
        self._thread.start()
        return self

    def ask(self, seq: int) -> None:
        """Ask for this share's tables up to ``seq`` (a few bytes: the socket never holds the loop up)."""
        try:
            self._send([Upto(seq=seq, committed=self.committed())])
        except OSError as exc:
            self._fail(ReaderFailed(f"the reader process of {self.stream} went away ({exc})"))

    async def batch(self) -> Batch:
        """The next share batch; raises ``ReaderFailed``."""
        item = await self.batches.get()
        if isinstance(item, BaseException):
            self.batches.put_nowait(item)  # every later call fails alike
            raise item
        return item

    def _send(self, frames: list[Frame]) -> None:
        with self._sending:
            for message in frames:
                self.sock.sendall(FRAMES.frame(message))

    async def _answer(self, need: Need) -> None:
        """Send the reader the committed folds it needs (read on a thread: the loop goes on)."""
        try:
            if self.loader is None:
                raise OSError("this stream has no folds")
            blobs = await asyncio.to_thread(self.loader, need.rollout_ids)
            await asyncio.to_thread(self._send, [States(blobs=blobs)])
        except Exception as exc:  # the database or the socket: the reader cannot go on
            self._fail(ReaderFailed(f"the folds the reader of {self.stream} needs were not sent ({exc})"))

    def _read(self) -> None:
        try:
            while True:
                message = FRAMES.decode(receive(self.sock.recv_into))
                self._loop.call_soon_threadsafe(self._arrive, message)
        except (EOFError, OSError, msgspec.DecodeError) as exc:
            failure = ReaderFailed(f"the reader process of {self.stream} (pid {self.pid}) ended ({exc})")
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self._loop.call_soon_threadsafe(self._fail, failure)

    def _arrive(self, message: Frame) -> None:
        match message:
            case Arrived():
                self.tail, self.seen = message.seq, message.seen
                self.arrived.set()
            case Batch():
                self.seen, self.folds, self.most = message.seen, message.folds, max(self.most, message.folds)
                self.batches.put_nowait(message)
            case Need():
                task = self._loop.create_task(self._answer(message))
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)
            case Failed():
                reason = f"the reader process of {self.stream} stopped: {message.reason}"
                self._fail(ReaderFailed(reason, message.cut))
            case _:
                self._fail(ReaderFailed(f"the reader process of {self.stream} sent {type(message).__name__}"))

    def _fail(self, failure: ReaderFailed) -> None:
        if self.failure is None:
            self.failure = failure
            self.batches.put_nowait(failure)
            self.arrived.set()

    async def close(self) -> None:
        """Stop the reader: closing its socket ends it (it waits on nothing else); one that has not ended
        within ``ANSWER_S`` / 12 is killed."""
        self.forks.live.discard(self)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, 5.0)
        self.sock.close()
        if self.pidfd is not None:
            ended = await asyncio.to_thread(select.select, [self.pidfd], [], [], ANSWER_S / 12)
            if not ended[0]:
                log.warning("the reader process of %s (pid %d) did not end: killed", self.stream, self.pid)
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.close(self.pidfd)
            self.pidfd = None


class Readers:
    """The readers of one stream, one per share: cuts asked of all, their shares merged into one batch."""

    def __init__(self, readers: list[Reader], position: int, to_seq: int | None = None) -> None:
        self.readers = readers
        self.asked: collections.deque[int] = collections.deque()
        self.last_asked = position
        self.to_seq = to_seq
        """Where the readers stop (None: they follow the stream)."""

    @classmethod
    async def start(
        cls,
        forks: Forks,
        settings: NatsSettings,
        stream: str,
        count: int,
        position: int,
        to_seq: int | None,
        loader: Loader | None = None,
        committed: Callable[[], int] | None = None,
    ) -> Readers:
        """``count`` readers of ``stream`` after ``position``, forked by ``forks``; ``loader`` and ``committed``: see
        ``Reader.start`` (control)."""
        readers: list[Reader] = []
        try:
            for index in range(count):
                part = (index, count)
                readers.append(
                    await Reader.start(forks, settings, stream, part, position + 1, to_seq, loader, committed)
                )
        except BaseException:
            for started in readers:
                await started.close()
            raise
        return cls(readers, position, to_seq)

    @property
    def seen(self) -> tuple[int, int]:
        """The readers' subscriptions and reconnects, summed (any change means one re-subscribed)."""
        return sum(r.seen[0] for r in self.readers), sum(r.seen[1] for r in self.readers)

    def _ask(self, batch_size: int, full: bool = False) -> None:
        """Ask every reader for the next cuts (``full``: only cuts of a whole batch: ahead of time, a cut
        would leave out what arrives while the batch before is written; but the last one, once received)."""
        received = min(r.tail for r in self.readers)
        least = batch_size if full and received != self.to_seq else 1
        while len(self.asked) < AHEAD and received - self.last_asked >= least:
            cut = min(received, self.last_asked + batch_size)
            for r in self.readers:
                r.ask(cut)
            self.asked.append(cut)
            self.last_asked = cut

    async def next(self, batch_size: int, max_wait: float) -> Prepared | None:
        """The next batch, every share of it (None: nothing arrived within ``max_wait``); raises ``ReaderFailed``."""
        self._ask(batch_size)
        if not self.asked:
            for r in self.readers:
                r.arrived.clear()
            waits = [asyncio.ensure_future(r.arrived.wait()) for r in self.readers]
            try:
                await asyncio.wait(waits, timeout=max_wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            for r in self.readers:
                if r.failure is not None:
                    raise r.failure
            self._ask(batch_size)
            if not self.asked:
                return None
        cut = self.asked[0]
        try:
            shares = [await asyncio.wait_for(r.batch(), ANSWER_S) for r in self.readers]
        except TimeoutError:
            stream = self.readers[0].stream
            raise ReaderFailed(f"a reader of {stream} did not answer cut {cut} in {ANSWER_S:.0f} s") from None
        self.asked.popleft()
        self._ask(batch_size, full=True)  # a backlog: the next batch is prepared while this one is written
        return merge(shares, cut)

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.readers))


def merge(shares: list[Batch], cut: int) -> Prepared:
    """One prepared batch from every share of it (each share's rows written by their own statements)."""
    first = shares[0]
    if any((s.last, s.stamp, s.count) != (cut, first.stamp, first.count) for s in shares):
        answers = [(s.last, s.stamp, s.count) for s in shares]
        raise ReaderFailed(f"the readers of {first.stream} answered cut {cut} alike not: {answers}")
    return Prepared(
        stream=first.stream,
        last=cut,
        stamp=first.stamp,
        count=first.count,
        tables=[(name, from_ipc(data)) for s in shares for name, data in s.tables],
        cleared=[k for s in shares for k in s.cleared],
        candidates=[k for s in shares for k in s.candidates],
        running=[k for s in shares for k in s.running],
    )
