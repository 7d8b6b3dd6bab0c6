"""Feeding the projector from the bus: both streams, in batches, live or up to a point in the past."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import duckdb
import nats.errors
import nats.js.errors

from voltbus.projections.lean import projector_feed
from voltbus.projections.prepare import Prepared
from voltbus.services.eventlog import BadEvent, Envelope, EventLog
from voltbus.services.restart import cancelled

from . import reader
from .forks import Forks, owned
from .projector import STREAMS, UNAPPLIABLE, Projector, out_of_memory
from .rewind import Divergence, Guard

log = logging.getLogger(__name__)

AWAY = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoServersError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
)
"""What opening a feed raises while the bus is away; anything else (a refused permission) is raised."""
MEMORY_PAUSE_S = (1.0, 30.0)
"""First and longest pause before a batch DuckDB had no memory for is applied again."""
Progress = Callable[[str, int, int], None]
"""Called after each batch with (stream, position, end) where end is 0 when following live."""
Batch = list[Envelope | BadEvent] | Prepared | None
"""What a source hands over: stored events (read here), a prepared batch (by a reader process), or nothing."""


async def ends_at(log_: EventLog, to_seq: int | None = None, to_time: float | None = None) -> dict[str, int]:
    """Where a rebuild stops, per stream: ``to_seq`` of the control stream (spans up to that message's
    time), or everything up to ``to_time``, or everything stored now."""
    ends = {s: (await log_.feed(s).last_seq()) for s in STREAMS}
    if to_seq is not None:
        ends["control"] = min(to_seq, ends["control"])
        if ends["control"] > 0:
            raw = await log_.js.get_msg(log_.topology.control_stream, seq=ends["control"])
            to_time = raw.time.timestamp() if raw.time else None
        else:
            ends["spans"] = 0
    if to_time is not None:
        for stream in STREAMS if to_seq is None else ("spans",):
            first_after = await log_.first_seq_at(stream, to_time + 1e-6)
            ends[stream] = min(ends[stream], first_after - 1) if first_after is not None else ends[stream]
    return ends


class Local:
    """Stored events read and prepared in this process."""

    def __init__(self, log_: EventLog, projector: Projector, stream: str, end: int | None) -> None:
        self.log, self.projector, self.stream, self.end = log_, projector, stream, end
        self.feed = projector_feed(log_, stream)

    @property
    def seen(self) -> tuple[int, int]:
        return self.feed.seen

    async def open(self) -> Local:
        await self.feed.open(self.projector.positions[self.stream] + 1)
        return self

    async def next(self, batch_size: int, max_wait: float) -> Batch:
        return await self.feed.batch(batch_size, max_wait, to_seq=self.end)

    async def close(self) -> None:
        await self.feed.close()


Source = Local | reader.Readers
"""Where a stream's batches come from: this process, or reader processes (prepared, a share each)."""


async def project(
    projector: Projector,
    log_: EventLog,
    ends: dict[str, int] | None = None,
    stop: asyncio.Event | None = None,
    progress: Progress | None = None,
    batch_size: int = 2000,
    max_wait: float = 0.1,
    readers: int | dict[str, int] = 0,
    backlog: int = 0,
    forks: Forks | None = None,
) -> None:
    """Apply both streams until ``ends`` are reached (a rebuild) or ``stop`` is set (live).

    ``readers``: reader processes per stream (reader.py), each preparing a share of it, so that the work
    does not take turns with DuckDB under this process's interpreter lock (0: all here); readers that
    cannot start or fail leave their stream to this process, and a batch the database refuses is applied
    again here (in halves, down to the events at fault). ``backlog``: a stream with no readers that has at
    least this many messages to catch up on gets one until it has (0: never; ``ProjectorSettings.reader_backlog``).
    ``forks``: the fork server that starts them, its caller's (started beforehand, stopped by the caller); without
    one, a run that may start readers starts its own and stops it at its end.
    """
    counts = readers if isinstance(readers, dict) else dict.fromkeys(STREAMS, int(readers))
    async with owned(forks, any(counts.values()) or backlog > 0, start=False) as forks_:
        following = Following(projector, log_, ends, stop, progress, batch_size, max_wait, counts, backlog, forks_)
        async with asyncio.TaskGroup() as tasks:
            for stream in STREAMS:
                tasks.create_task(following.one(stream))
    await asyncio.to_thread(projector.release_held)  # what waited for telemetry past a bounded run's end


class Following:
    """Both streams applied by one projector: each stream's batches from its source, one writer at a time."""

    def __init__(
        self,
        projector: Projector,
        log_: EventLog,
        ends: dict[str, int] | None,
        stop: asyncio.Event | None,
        progress: Progress | None,
        batch_size: int,
        max_wait: float,
        readers: int | dict[str, int],
        backlog: int = 0,
        forks: Forks | None = None,
    ) -> None:
        self.projector, self.log, self.ends, self.stop, self.progress = projector, log_, ends, stop, progress
        self.batch_size, self.max_wait, self.backlog = batch_size, max_wait, backlog
        self.lock = asyncio.Lock()
        """One writer connection: batches of the two streams take turns."""
        self.counts = readers if isinstance(readers, dict) else dict.fromkeys(STREAMS, int(readers))
        self.forks = forks
        self.use = dict.fromkeys(STREAMS, forks is not None)
        """Per stream: whether reader processes may read it (no longer once they failed three times in a row)."""
        self.catching_up = dict.fromkeys(STREAMS, False)
        """Per stream: whether its readers are there for a backlog only (``backlog``), until it is caught up."""
        self.failed = {s: (0, -1) for s in STREAMS}
        """Per stream: reader failures in a row without progress between them, and the position at the last."""
        self.waiting: dict[str, tuple[Batch, asyncio.Future[None]]] = {}
        """Batches waiting for the writer, by stream: whichever stream's task gets the writer applies them all."""

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def local(self, stream: str, end: int | None) -> Local:
        while True:
            try:
                return await Local(self.log, self.projector, stream, end).open()
            except AWAY as exc:  # the bus is away (or restarting): wait for it
                if self.stopped() or cancelled():
                    raise
                log.warning("cannot read %s (%s): trying again", stream, exc)
                await asyncio.sleep(max(self.max_wait, 0.25))

    async def source(self, stream: str, end: int | None) -> Source:
        count = self.counts.get(stream, 0) if self.use[stream] else 0
        self.catching_up[stream] = self.use[stream] and not count and await self.behind(stream, end)
        if self.catching_up[stream]:
            count = 1
            log.info(
                "%s: a backlog after seq %d: one reader process while it catches up",
                stream,
                self.projector.positions[stream],
            )
        if count:
            try:
                position = self.projector.positions[stream]
                settings = self.log.settings
                assert self.forks is not None  # (``use``)
                loader, committed = self.projector.stored_states_of, lambda: self.projector.positions[stream]
                if stream != "control":
                    loader = None
                return await reader.Readers.start(self.forks, settings, stream, count, position, end, loader, committed)
            except Exception as exc:
                log.warning("no reader process for %s (%s): reading it in this process", stream, exc)
                self.use[stream] = self.catching_up[stream] = False
        return await self.local(stream, end)

    async def behind(self, stream: str, end: int | None) -> bool:
        """Whether ``stream`` has a backlog of ``self.backlog`` messages or more to catch up on."""
        if not self.backlog:
            return False
        try:
            last = end if end is not None else await self.log.feed(stream).last_seq()  # type: ignore[arg-type]
        except AWAY:
            return False
        return last - self.projector.positions[stream] >= self.backlog

    async def caught_up(self, stream: str, end: int | None, src: Source, taken: int) -> Source:
        """The source to go on with after a batch of ``taken`` messages (0: none came): this process's, once the
        readers that a live stream got for its backlog leave less than a batch to catch up on. A bounded run
        (a rebuild) keeps them to its end."""
        if not self.catching_up[stream] or end is not None or taken >= self.batch_size:
            return src
        try:
            left = await self.log.feed(stream).last_seq() - self.projector.positions[stream]  # type: ignore[arg-type]
        except AWAY:
            return src
        if left >= self.batch_size:
            return src
        log.info("%s caught up at seq %d: reading it in this process", stream, self.projector.positions[stream])
        await src.close()
        self.catching_up[stream] = False
        return await self.local(stream, end)

    async def catch_up(self, stream: str, to_seq: int) -> None:
        """The events up to ``to_seq`` read and applied here (after the readers could not prepare them or the
        database refused them)."""
        here = await self.local(stream, to_seq)
        try:
            while self.projector.positions[stream] < to_seq:
                items = await here.next(self.batch_size, self.max_wait)
                if items:
                    async with self.lock:
                        await self.apply(stream, items)
        finally:
            await here.close()

    def failure(self, stream: str, exc: reader.ReaderFailed) -> None:
        """Count a reader failure; the third in a row with no progress between leaves the stream to this process."""
        count, at = self.failed[stream]
        position = self.projector.positions[stream]
        count = count + 1 if position == at else 1
        self.failed[stream] = (count, position)
        if count >= 3:
            self.use[stream] = False
            log.warning("%s: reading %s in this process from now on", exc, stream)
        else:
            log.warning("%s: starting the readers of %s again after seq %d", exc, stream, position)

    async def apply_waiting(self, stream: str, batch: Batch) -> None:
        """Apply ``batch`` once this task has the writer, together with the other stream's batch if that one is
        waiting for the writer too (one transaction for both); raises what applying ``batch`` raised, whichever
        task applied it."""
        done = asyncio.get_running_loop().create_future()
        self.waiting[stream] = (batch, done)
        async with self.lock:
            if not done.done():  # else the other stream's task applied it while this one waited
                waiting, self.waiting = self.waiting, {}
                try:
                    await self._apply_all(waiting)
                finally:  # cancelled: the other task must not wait for ever
                    for _, future in waiting.values():
                        if not future.done():
                            future.cancel()
        await done

    async def _apply_all(self, waiting: dict[str, tuple[Batch, asyncio.Future[None]]]) -> None:
        batches = {s: b for s, (b, _) in waiting.items()}
        if len(batches) > 1 and await asyncio.to_thread(self.projector.apply_together, batches):  # type: ignore[arg-type]
            for _, future in waiting.values():
                future.set_result(None)
            return
        for s, (b, future) in waiting.items():
            try:
                await self.apply(s, b)
                future.set_result(None)
            except Exception as exc:  # handed to the task whose batch it is
                future.set_exception(exc)

    async def apply(self, stream: str, batch: Batch) -> None:
        if isinstance(batch, Prepared):
            await asyncio.to_thread(self.projector.commit, batch)
        else:
            await asyncio.to_thread(self.projector.apply, stream, batch)  # type: ignore[arg-type]

    async def one(self, stream: str) -> None:
        """Apply ``stream`` until its end, a stop, or a divergence from the log."""
        end = self.ends[stream] if self.ends is not None else None
        if end is not None and self.projector.positions[stream] >= end:
            return
        guard = Guard(self.log, self.projector, stream)
        src = await self.source(stream, end)
        held: Batch = None
        try:
            while not self.stopped() and stream not in self.projector.diverged:
                if end is not None and self.projector.positions[stream] >= end:
                    return
                try:
                    batch, held = held or await src.next(self.batch_size, self.max_wait), None
                except reader.ReaderFailed as exc:
                    src = await self.replace(stream, end, src, exc)
                    guard.seen = (-1, -1)  # the checkpoint is compared with the log before anything new lands
                    continue
                if guard.due(src.seen):  # after a restart: before applying what the new server sent
                    urgent, found = guard.urgent(src.seen), await guard.verify(src.seen)
                    if found is False and urgent:
                        held = batch  # the bus is away: compare before applying anything
                        await asyncio.sleep(self.max_wait)
                        continue
                    if isinstance(found, Divergence):
                        async with self.lock:
                            await guard.react(found)
                        await src.close()  # go on after the checkpoint, dropping what was taken
                        src = await self.source(stream, end)
                        continue
                before = self.projector.positions[stream]
                if batch:
                    src = await self.write(stream, end, src, batch)
                elif stream == "spans" and self.projector.held.ends:  # nothing more came: what waited for it is due
                    async with self.lock:
                        await asyncio.to_thread(self.projector.release_held)
                    if self.progress:  # queries waiting for those attempts' rows
                        self.progress(stream, self.projector.positions[stream], end or 0)
                src = await self.caught_up(stream, end, src, self.projector.positions[stream] - before)
        finally:
            await src.close()

    async def replace(self, stream: str, end: int | None, src: Source, exc: reader.ReaderFailed) -> Source:
        """A new source after the readers failed; a cut they could not prepare is applied here first."""
        await src.close()
        if exc.cut is not None:  # a row Arrow refused in the reader: the events are applied here
            await self.catch_up(stream, exc.cut)
        self.failure(stream, exc)
        return await self.source(stream, end)

    async def write(self, stream: str, end: int | None, src: Source, batch: Batch) -> Source:
        """Apply one batch (a prepared one the database refuses: its events here, in halves); returns the
        source to go on with."""
        try:
            await self.apply_short_of_memory(stream, batch)
        except (duckdb.Error, *UNAPPLIABLE) as exc:
            if not isinstance(batch, Prepared) or isinstance(exc, MemoryError):
                raise
            log.warning("batch of %s to seq %d refused (%s): applying it here", stream, batch.last, exc)
            await src.close()
            await self.catch_up(stream, batch.last)
            src = await self.source(stream, end)
        if self.progress:
            self.progress(stream, self.projector.positions[stream], end or 0)
        return src

    async def apply_short_of_memory(self, stream: str, batch: Batch) -> None:
        """Apply ``batch``; while DuckDB is out of memory under its limit (the projector's working set, or large
        queries beside it), say so and try again after a pause, doubling up to ``MEMORY_PAUSE_S[1]``: the projector
        neither exits (a restart would fail alike) nor skips the batch, and answers queries meanwhile. A stop ends
        the wait, the batch unapplied (it is read again at the next start)."""
        pause = MEMORY_PAUSE_S[0]
        while True:
            try:
                return await self.apply_waiting(stream, batch)
            except duckdb.Error as exc:
                if not out_of_memory(exc):
                    raise
                log.error(
                    "DuckDB is out of memory under projector.duckdb_memory_limit (%s, "
                    "VOLTBUS_PROJECTOR__DUCKDB_MEMORY_LIMIT): the batch of %s after seq %d is not applied, "
                    "trying again in %.0f s (raise the limit if this repeats): %s",
                    self.projector.memory_limit or "DuckDB's default",
                    stream,
                    self.projector.positions[stream],
                    pause,
                    str(exc).splitlines()[0],
                )
                if self.stop is None:
                    await asyncio.sleep(pause)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), pause)
                    if self.stopped():
                        return
                pause = min(2 * pause, MEMORY_PAUSE_S[1])
