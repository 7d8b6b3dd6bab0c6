"""Reader processes: a stream read and prepared by processes of their own, each a share of it, handing
the projector Arrow tables, so that the projector's process does little but DuckDB's work.

Reading (nats-py), decoding, folding and building Arrow tables is Python work under one interpreter
lock; in the projector's process it takes turns with the writer's DuckDB calls. In reader processes it
runs beside them, and split in shares (spans by shard subject, rollout events by rollout, the rest in
share 0: see ``prepare.Preparer``) it runs on as many cores as there are readers.

Each reader reads the whole stream, from the projector's checkpoint + 1, and says how far it has
received (``Arrived``). The projector asks every reader of a stream for the same cut (``Upto``: up to
the sequence all have received, at most a batch further); each answers with its share's tables for
exactly that range (``Batch``), and the projector writes the shares in one transaction. It keeps two
cuts asked for, so the readers prepare the next batch while it writes one. A reader is a child of a
fork server that has this module imported (a start takes milliseconds after the first). The projector
stays the only writer: readers never open the database. A reader ends when its socket closes (the
projector stopped or died; one that reached ``to_seq`` hands over what it has and waits for that). It stops
with ``Failed`` when it cannot go on: a row Arrow refuses (the projector applies that cut itself), or its
feed re-subscribed or reconnected (the projector compares its checkpoint with the log, then starts new
readers after it, so that nothing received before a server restart is mixed with what came after).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import weakref
from typing import Any

import msgspec
import pyarrow as pa

from voltbus.services.eventlog import EventLog, connect
from voltbus.services.settings import NatsSettings

from .prepare import Key, Part, Prepared, Preparer, load_states, rollout_part, span_part

log = logging.getLogger(__name__)

CHUNK = 5000
"""Rollout states per ``States`` frame."""
BUFFERED = 64 << 20
"""Bytes of prepared batches held between a reader and the projector (a few batches of model calls)."""
HOLD = 4
"""Batches' worth of received messages a reader holds before it waits for the projector to ask."""
AHEAD = 2
"""Cuts the projector keeps asked for: the readers prepare the next while it writes one."""
ANSWER_S = 60.0
"""Longest the projector waits for a reader's share of a cut before it gives up on the reader."""
BATCH_HINT = 2000
"""Messages a reader takes from its feed at a time."""
POLL_S = 0.005
"""Longest a reader waits on its feed before it looks at the projector's asks again."""
LIVE: weakref.WeakSet[Reader] = weakref.WeakSet()
"""Readers started and not yet closed (to see, or stop, their processes)."""
_HEAD = struct.Struct("<I")


class Start(msgspec.Struct, tag=True, kw_only=True):
    """What to read: a share of the stream from a sequence (to one, or on and on)."""

    settings: str
    """The bus settings, as JSON."""
    stream: str
    from_seq: int
    to_seq: int | None
    part: Part
    states: int
    """``States`` frames that follow (control: the folds of the share the projector has committed)."""
    log_level: int = logging.WARNING


class States(msgspec.Struct, tag=True, kw_only=True):
    """Folded rollout states, as ``rollout_states`` keeps them."""

    blobs: list[tuple[str, bytes]]


class Upto(msgspec.Struct, tag=True, kw_only=True):
    """The projector asks for the share's tables of the messages after the last cut, up to ``seq``."""

    seq: int


class Arrived(msgspec.Struct, tag=True, kw_only=True):
    """The reader has received the stream up to ``seq``."""

    seq: int
    seen: tuple[int, int]
    """The reader's feed subscriptions and connection reconnects so far (see rewind.Guard)."""


class Batch(msgspec.Struct, tag=True, kw_only=True):
    """A share of a prepared batch (``prepare.Prepared``), its tables as Arrow IPC streams."""

    stream: str
    last: int
    stamp: float
    count: int
    tables: list[tuple[str, memoryview]]
    cleared: list[Key]
    candidates: list[Key]
    seen: tuple[int, int]


class Failed(msgspec.Struct, tag=True, kw_only=True):
    """The reader could not go on."""

    reason: str
    cut: int | None = None
    """The cut it could not prepare (a row Arrow refused): the projector applies its events itself."""


Frame = Start | States | Upto | Arrived | Batch | Failed
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def frame(message: Frame) -> bytes:
    """One frame: length-prefixed msgpack."""
    body = _encoder.encode(message)
    return _HEAD.pack(len(body)) + body


def ipc(table: pa.Table) -> memoryview:
    """A table as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return memoryview(sink.getvalue())


def from_ipc(data: memoryview) -> pa.Table:
    """The table of an Arrow IPC stream (referencing ``data``, not copying it)."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# ---------------------------------------------------------------- the reader process


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
    states: dict[str, Any] = {}
    for _ in range(start.states):
        chunk = await _receive(reader)
        assert isinstance(chunk, States), chunk
        states.update(load_states(chunk.blobs))
    try:
        settings = NatsSettings.model_validate_json(start.settings)
        log_ = EventLog(await connect(settings, f"voltbus-reader-{start.stream}"), settings)  # the streams exist
    except Exception as exc:  # the projector goes on without readers, and says why
        writer.write(frame(Failed(reason=f"{type(exc).__name__}: {exc}")))
        await writer.drain()
        return
    asks: collections.deque[int] = collections.deque()
    asked = asyncio.Event()
    listening = asyncio.create_task(_listen(reader, asks, asked))  # ends when the projector closes the socket
    preparer = Preparer({start.stream: start.from_seq - 1}, states, start.part)
    work = asyncio.create_task(_work(log_, start, preparer, writer, asks, asked))
    try:
        await asyncio.wait([listening, work], return_when=asyncio.FIRST_COMPLETED)
        if work.done():  # the stream reached to_seq, or reading failed
            if not work.cancelled() and (exc := work.exception()) is not None:
                cut = exc.cut if isinstance(exc, Unprepared) else None
                writer.write(frame(Failed(reason=f"{type(exc).__name__}: {exc}", cut=cut)))
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
    (size,) = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    return _decoder.decode(await reader.readexactly(size))


async def _listen(reader: asyncio.StreamReader, asks: collections.deque[int], asked: asyncio.Event) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            ask = await _receive(reader)
            if isinstance(ask, Upto):
                asks.append(ask.seq)
                asked.set()


async def _work(
    log_: EventLog,
    start: Start,
    preparer: Preparer,
    writer: asyncio.StreamWriter,
    asks: collections.deque[int],
    asked: asyncio.Event,
) -> None:
    from .follow import projector_feed  # follow imports this module

    stream, end, (index, count) = start.stream, start.to_seq, start.part
    feed = projector_feed(log_, stream)
    if stream == "spans" and count > 1:
        feed.keep = lambda subject: span_part(subject, count) == index  # others' messages stay undecoded
    await feed.open(start.from_seq)
    held: collections.deque[Any] = collections.deque()
    tail = start.from_seq - 1
    began = seen = (feed.subscriptions, log_.nc.stats["reconnects"])
    try:
        while end is None or preparer.positions[stream] < end:
            if asks and asks[0] <= tail:  # a cut that every reader has received: this share's tables
                cut, items = asks.popleft(), []
                while held and held[0].seq <= cut:
                    items.append(held.popleft())
                try:
                    batch = await asyncio.to_thread(_batch, preparer, stream, items, cut, seen)
                except Exception as exc:
                    raise Unprepared(f"{type(exc).__name__}: {exc}", cut) from exc
                writer.write(frame(batch))
                await writer.drain()
                continue
            if len(held) >= HOLD * BATCH_HINT and not asks:
                asked.clear()
                await asked.wait()  # enough held: wait for the projector to ask
                continue
            items = await feed.batch(BATCH_HINT, POLL_S, to_seq=end)  # short: an ask waits for it
            seen = (feed.subscriptions, log_.nc.stats["reconnects"])
            if seen != began:  # what comes now may come from a restarted server: the projector checks first
                raise Resubscribed(f"the feed re-subscribed or reconnected ({began} -> {seen})")
            if items:
                held.extend(items)
                tail = items[-1].seq
                writer.write(frame(Arrived(seq=tail, seen=seen)))
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
        return Batch(stream=stream, last=cut, stamp=0.0, count=0, tables=[], cleared=[], candidates=[], seen=seen)
    return Batch(
        stream=stream,
        last=prepared.last,
        stamp=prepared.stamp,
        count=prepared.count,
        tables=[(name, ipc(table)) for name, table in prepared.tables],
        cleared=prepared.cleared,
        candidates=prepared.candidates,
        seen=seen,
    )


# ---------------------------------------------------------------- the projector's side


class Forks:
    """A fork server: a process of its own with this module imported (started once, ~0.5 s), that forks
    a reader for each socket it is handed, so that starting one takes milliseconds. It runs one thread and
    no event loop when it forks (forking is safe there, unlike in the projector's process: see
    ``SINGLE_THREADED``); it ends when the projector's end of its control socket closes, and its readers
    when their sockets do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.control: socket.socket | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return
            ours, theirs = socket.socketpair()
            command = [sys.executable, "-c", SERVE.format(module=__name__, fd=theirs.fileno())]
            env = os.environ | SINGLE_THREADED
            self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
            theirs.close()
            self.control = ours

    def stop(self) -> None:
        """End the fork server (at exit; its readers end with their sockets)."""
        with self.lock:
            if self.control is not None:
                self.control.close()
                self.control = None
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(2.0)
                if self.process.poll() is None:
                    self.process.kill()
                    self.process.wait()
                self.process = None

    def fork(self, sock: socket.socket) -> int:
        """A new reader serving ``sock``; its process id."""
        self.start()
        with self.lock:
            assert self.control is not None
            socket.send_fds(self.control, [b"r"], [sock.fileno()])
            answer = self.control.recv(8)
        if len(answer) != 8:
            raise OSError("the readers' fork server did not answer")
        (pid,) = struct.unpack("<q", answer)
        return pid


SINGLE_THREADED = {"JE_ARROW_MALLOC_CONF": "background_thread:false", "OPENBLAS_NUM_THREADS": "1"}
"""Keeps the fork server at one thread: pyarrow's jemalloc and numpy's OpenBLAS would each start one at
import (fork copies only the calling thread)."""
SERVE = """import signal
for stop in (signal.SIGINT, signal.SIGTERM):  # a stop of the process group also reaches the projector
    signal.signal(stop, signal.SIG_IGN)
from {module} import serve_forks
serve_forks({fd})
"""
"""The fork server's program: it ignores the stop signals from its start (its imports take ~0.5 s)."""
_forks = Forks()
atexit.register(_forks.stop)


def serve_forks(fd: int) -> None:
    """The fork server's loop (see ``Forks``)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # readers are reaped by the system
    for stop in (signal.SIGINT, signal.SIGTERM):  # (set before the imports too; readers inherit it) a stop
        signal.signal(stop, signal.SIG_IGN)  # of the process group reaches the projector: its sockets close
    control = socket.socket(fileno=fd)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, 1)
        if not message:
            return  # the projector is gone
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                main(socket.socket(fileno=fds[0]))
            finally:
                os._exit(0)
        os.close(fds[0])
        control.sendall(struct.pack("<q", pid))


def prestart() -> None:
    """Start the fork server now (about half a second, once per process) rather than at the first reader."""
    if supported():
        _forks.start()


def supported() -> bool:
    """Whether reader processes can be started here (fork and descriptor passing: a POSIX system)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds")


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

    def __init__(self, stream: str, part: Part, pid: int, sock: socket.socket) -> None:
        self.stream, self.part, self.pid, self.sock = stream, part, pid, sock
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
        cls, settings: NatsSettings, stream: str, part: Part, from_seq: int, to_seq: int | None, max_wait: float,
        states: list[tuple[str, bytes]],
    ) -> Reader:  # fmt: skip
        """Start a reader of a share of ``stream`` from ``from_seq``; ``states``: the committed folds of the share."""
        ours, theirs = socket.socketpair()
        try:
            pid = await asyncio.to_thread(_forks.fork, theirs)
        finally:
            theirs.close()
        self = cls(stream, part, pid, ours)
        self.tail = from_seq - 1
        LIVE.add(self)
        chunks = [states[i : i + CHUNK] for i in range(0, len(states), CHUNK)]
        start = Start(
            settings=settings.model_dump_json(),
            stream=stream,
            from_seq=from_seq,
            to_seq=to_seq,
            part=part,
            states=len(chunks),
            log_level=logging.getLogger("voltbus").getEffectiveLevel(),
        )
        try:
            await asyncio.to_thread(self._send, [start, *(States(blobs=chunk) for chunk in chunks)])
        except BaseException:
            await self.close()
            raise
        self._thread.start()
        return self

    def ask(self, seq: int) -> None:
        """Ask for this share's tables up to ``seq`` (a few bytes: the socket never holds the loop up)."""
        try:
            self.sock.sendall(frame(Upto(seq=seq)))
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
        for message in frames:
            self.sock.sendall(frame(message))

    def _read(self) -> None:
        try:
            while True:
                message = _decoder.decode(self._exactly(_HEAD.unpack(self._exactly(_HEAD.size))[0]))
                self._loop.call_soon_threadsafe(self._arrive, message)
        except (EOFError, OSError, msgspec.DecodeError) as exc:
            failure = ReaderFailed(f"the reader process of {self.stream} (pid {self.pid}) ended ({exc})")
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                self._loop.call_soon_threadsafe(self._fail, failure)

    def _exactly(self, size: int) -> bytearray:
        data = bytearray(size)
        view, got = memoryview(data), 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise EOFError("socket closed")
            got += n
        return data

    def _arrive(self, message: Frame) -> None:
        match message:
            case Arrived():
                self.tail, self.seen = message.seq, message.seen
                self.arrived.set()
            case Batch():
                self.seen = message.seen
                self.batches.put_nowait(message)
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
        LIVE.discard(self)
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

    def __init__(self, readers: list[Reader], position: int, batch_size: int) -> None:
        self.readers = readers
        self.batch_size = batch_size
        self.asked: collections.deque[int] = collections.deque()
        self.last_asked = position

    @classmethod
    async def start(
        cls, settings: NatsSettings, stream: str, count: int, position: int, to_seq: int | None, batch_size: int,
        max_wait: float, states: list[tuple[str, bytes]],
    ) -> Readers:  # fmt: skip
        """``count`` readers of ``stream`` after ``position``; ``states``: the committed folds (control)."""
        readers: list[Reader] = []
        try:
            for index in range(count):
                share = [s for s in states if rollout_part(s[0], count) == index]
                part = (index, count)
                readers.append(await Reader.start(settings, stream, part, position + 1, to_seq, max_wait, share))
        except BaseException:
            for started in readers:
                await started.close()
            raise
        return cls(readers, position, batch_size)

    @property
    def seen(self) -> tuple[int, int]:
        """The readers' subscriptions and reconnects, summed (any change means one re-subscribed)."""
        return sum(r.seen[0] for r in self.readers), sum(r.seen[1] for r in self.readers)

    def _ask(self, full: bool = False) -> None:
        """Ask every reader for the next cuts (``full``: only cuts of a whole batch: ahead of time, a cut
        would leave out what arrives while the batch before is written)."""
        received = min(r.tail for r in self.readers)
        least = self.batch_size if full else 1
        while len(self.asked) < AHEAD and received - self.last_asked >= least:
            cut = min(received, self.last_asked + self.batch_size)
            for r in self.readers:
                r.ask(cut)
            self.asked.append(cut)
            self.last_asked = cut

    async def next(self, max_wait: float) -> Prepared | None:
        """The next batch, every share of it (None: nothing arrived within ``max_wait``); raises ``ReaderFailed``."""
        self._ask()
        if not self.asked:
            for r in self.readers:
                r.arrived.clear()
            self._ask()  # what arrived before the clear
        if not self.asked:
            waits = [asyncio.ensure_future(r.arrived.wait()) for r in self.readers]
            try:
                await asyncio.wait(waits, timeout=max_wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            for r in self.readers:
                if r.failure is not None:
                    raise r.failure
            self._ask()
            if not self.asked:
                return None
        cut = self.asked[0]
        try:
            shares = [await asyncio.wait_for(r.batch(), ANSWER_S) for r in self.readers]
        except TimeoutError:
            stream = self.readers[0].stream
            raise ReaderFailed(f"a reader of {stream} did not answer cut {cut} in {ANSWER_S:.0f} s") from None
        self.asked.popleft()
        self._ask(full=True)  # a backlog: the next batch is prepared while this one is written
        return merge(shares, cut)

    async def close(self) -> None:
        for r in self.readers:
            await r.close()


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
    )
