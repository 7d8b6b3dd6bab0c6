"""The projector: applies stored events to DuckDB tables exactly once, in batches.

Each batch of a stream is applied, and that stream's checkpoint moved, in one DuckDB transaction,
so a kill at any instant loses nothing and doubles nothing: on restart each stream resumes at its
checkpoint + 1. The rows come from ``projections/prepare.py`` (in this process, or in a reader process), rollout and
attempt rows by folding the lifecycle decider's ``evolve``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa

from voltbus.projections import blocks, integrity, lean, training
from voltbus.projections.adapter import AdapterSettings
from voltbus.projections.prepare import Key, Prepared, Preparer, load_states, tables, unapplied
from voltbus.projections.rows import Row
from voltbus.projections.safety import SAFETY
from voltbus.schemas.errors import DecodeError
from voltbus.services.eventlog import BadEvent, Envelope
from voltbus.services.lifecycle import RolloutState

log = logging.getLogger(__name__)

PROJECTION_VERSION = 7
"""Bump when tables or row mapping change: an older database is then rebuilt from the log."""
STREAMS = ("control", "spans")
REFRESH_TOGETHER = 2000
"""Most ended attempts whose training refresh waits to be done together (``refresh_interval``)."""

UNAPPLIABLE = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException, pa.ArrowException, OverflowError)
"""What rows out of a column's range (or type) raise in DuckDB or Arrow: the events that cause it are quarantined."""


def out_of_memory(exc: BaseException) -> bool:
    """Whether DuckDB refused for lack of memory under its ``memory_limit`` (a statement, or a commit that could not
    allocate or pin a block): not the batch's fault, and it may pass once memory is freed."""
    if isinstance(exc, duckdb.OutOfMemoryException):
        return True
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(
        s in text for s in ("could not allocate", "failed to pin", "Out of Memory")
    )


JOINED_KEYS_BY_INDEX = 2048
"""Keys of a batch (or a key list) up to which DuckDB finds a join's rows in a table through the table's index
(``dynamic_or_filter_threshold``; DuckDB's default, 50, made every projector batch of more than 50 rows read the whole
table: 17-40 ms per statement at 1,000,000 rollouts, where a live projector's batches grow past 50 as it falls behind).
2048 is DuckDB's ``index_scan_max_count``: past it a scan is DuckDB's own choice."""


def limits(
    threads: int = 0, memory_limit: str | None = None, checkpoint_threshold: str | None = None
) -> dict[str, str | int]:
    """DuckDB's settings of a connection with ``threads`` workers (0: DuckDB's default), ``memory_limit`` and
    ``checkpoint_threshold`` (None: DuckDB's defaults), and joins that find up to ``JOINED_KEYS_BY_INDEX`` keys by
    index."""
    return (
        {"dynamic_or_filter_threshold": JOINED_KEYS_BY_INDEX}
        | ({"threads": threads} if threads else {})
        | ({"memory_limit": memory_limit} if memory_limit else {})
        | ({"checkpoint_threshold": checkpoint_threshold} if checkpoint_threshold else {})
    )


def prepare_file(path: Path) -> None:
    """Move aside a database written by an older projection version, or one that lacks a table (a table recreated
    empty would claim the log holds nothing for it): it will be rebuilt from the log."""
    if not path.exists():
        return
    with duckdb.connect(str(path), read_only=True) as con:
        try:
            row = con.execute("SELECT value FROM projection_meta WHERE key = 'version'").fetchone()
        except duckdb.CatalogException:
            row = None
        missing = integrity.missing_tables(con)
    if row is not None and int(row[0]) == PROJECTION_VERSION and missing:
        log.error("%s lacks tables %s: moved aside, rebuilding from the log", path, ", ".join(missing))
        _move_aside(path, path.with_name(f"{path.name}.missing-tables.bak"))
    elif row is None or int(row[0]) != PROJECTION_VERSION:
        backup = path.with_name(f"{path.name}.v{row[0] if row else 'unknown'}.bak")
        log.warning(
            "%s was built by projection version %s, not %d: moved to %s, rebuilding from the log",
            path,
            row[0] if row else "unknown",
            PROJECTION_VERSION,
            backup,
        )
        _move_aside(path, backup)


def _move_aside(path: Path, backup: Path) -> None:
    """Move a database file (and its WAL) to ``backup``, replacing an older one there."""
    shutil.move(path, backup)
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        shutil.move(wal, backup.with_name(backup.name + ".wal"))


class Projector:
    """The only writer of one DuckDB file."""

    def __init__(
        self,
        path: Path | str,
        adapter: AdapterSettings | None = None,
        defer_training: bool = False,
        threads: int = 1,
        refresh_interval: float = 0.0,
        memory_limit: str | None = None,
        checkpoint_threshold: str | None = None,
    ) -> None:
        """``threads``: DuckDB's worker threads for this database (0: DuckDB's default, one per core);
        ``refresh_interval``: the shortest time between two training refreshes of a live projection (0: each in
        the commit that makes it due); ``memory_limit``: DuckDB's (None: DuckDB's default, 80% of the machine);
        ``checkpoint_threshold``: DuckDB's (None: its default, 16 MiB); see ``ProjectorSettings.duckdb_threads``,
        ``training_refresh_s``, ``duckdb_memory_limit`` and ``duckdb_checkpoint_threshold``."""
        self.path = Path(path)
        self.memory_limit = memory_limit
        self.refresh_interval = refresh_interval
        self._refreshed_at = -math.inf
        self.adapter = adapter or AdapterSettings()
        self.defer_training = defer_training
        """Leave the training tables for one pass at the end (``finish_training``), as a rebuild does: during a replay
        control runs ahead of telemetry, and each attempt would be adapted once when it ends and again when its
        spans arrive. Opened again before that pass, a database gets it first (its ended attempts without rows)."""
        self.schemas, self.blocks = blocks.load()
        self.positions = dict.fromkeys(STREAMS, 0)
        self.stamps = dict.fromkeys(STREAMS, 0.0)
        """Stored time of the message at each checkpoint (to tell it from another one at that sequence)."""
        self.diverged: dict[str, str] = {}
        """Streams no longer applied, with why: the log no longer holds what was applied (see rewind.py)."""
        self.applied = 0
        self._preparers: dict[str, Preparer] = {}
        prepare_file(self.path)
        self.con = duckdb.connect(str(self.path), config=SAFETY | limits(threads, memory_limit, checkpoint_threshold))
        for block in self.schemas:
            self.con.execute(block.sql)
        self.con.execute("INSERT OR IGNORE INTO projection_meta VALUES ('version', ?)", [str(PROJECTION_VERSION)])
        training.record_settings(self.con, self.blocks, self.adapter)
        self._load()
        self.active: set[Key] = set()
        """Attempts in progress as committed (kept up by each commit; a rolled-back one changes none): their telemetry
        needs no training rows yet, any other's may. As many as run at once: the projector keeps no state per attempt
        of the log's history (issue 25). Read at open and by ``finish_training``."""
        self.held = training.Held()
        """Ended attempts whose training refresh waits for their telemetry (see ``training.Held``)."""
        if not defer_training:
            self.finish_training()  # the rows of ended attempts whose refresh never ran, if any

    def finish_training(self, progress: Callable[[int, int], None] | None = None) -> int:
        """The training rows of every ended attempt that has none: the deferred pass of a rebuild, or at open those a
        cut-off replay or a stopped projector left; from now on each commit keeps them up. Returns how many it
        computed; ``progress(done, total)`` after each chunk of them."""
        self.active = training.active_attempts(self.con, self.blocks)
        missing = training.without_rows(self.con, self.blocks)
        if missing and not self.defer_training:  # not expected: say why the open takes longer
            log.warning("%s: %d ended attempts have no training rows yet: computing them now", self.path, len(missing))
        training.catch_up(self.con, self.blocks, self.adapter, missing, progress)
        self.defer_training = False
        return len(missing)

    def release_held(self) -> None:
        """Refresh every held attempt now (the spans stream has nothing more for the moment)."""
        if self.held.ends:
            self._commit([], [], [], sorted(self.held.ends))
            self.held.keep({})

    def _refresh_later(self, attempts: int) -> bool:
        """Whether the refresh of ``attempts`` due now waits to be done together with the next ones: the last
        refresh was less than ``refresh_interval`` ago and not too many wait (see ``ProjectorSettings``)."""
        recent = time.monotonic() - self._refreshed_at < self.refresh_interval
        return recent and attempts < REFRESH_TOGETHER

    def _load(self) -> None:
        """Positions as the last committed transaction left them; the folds are read again when next needed."""
        self.positions = dict.fromkeys(STREAMS, 0)
        for stream, seq, stamp in self.con.execute("SELECT stream, seq, updated_at FROM checkpoints").fetchall():
            self.positions[stream], self.stamps[stream] = seq, stamp
        self._preparers.clear()

    def preparer(self, stream: str) -> Preparer:
        """This process's preparer of ``stream``, at the committed position (and, for control, the committed
        folds: read from the database again after a batch prepared elsewhere, or a failed one)."""
        preparer = self._preparers.get(stream)
        if preparer is None:
            loader = self._states_of if stream == "control" else None
            preparer = self._preparers[stream] = Preparer(self.positions, {}, loader=loader)
        return preparer

    def _states_of(self, rollout_ids: list[str]) -> dict[str, RolloutState]:
        """The committed folds of ``rollout_ids`` (those stored), for the control preparer."""
        return load_states(self.stored_states_of(rollout_ids))

    def stored_states_of(self, rollout_ids: list[str]) -> list[tuple[str, bytes]]:
        """The folded states of ``rollout_ids`` (those stored) as the last commit stored them, on a cursor of their
        own (any thread: a reader process's ``Need``)."""
        cursor = self.con.cursor()
        try:
            return cursor.execute(self.blocks["states_of"].sql, {"rollout_ids": rollout_ids}).fetchall()
        finally:
            cursor.close()

    def state_count(self) -> int:
        """How many rollouts' folded states the last commit stored."""
        return self.con.execute("SELECT count(*) FROM rollout_states").fetchone()[0]  # type: ignore[index]

    def close(self) -> None:
        """Close the database."""
        self.con.close()

    def apply(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        """Apply one batch of ``stream`` and move its checkpoint, atomically; already applied items are skipped.

        A batch whose rows DuckDB or Arrow refuse (a value out of a column's range) is applied in halves,
        each in its own transaction, down to the events that fail on their own: each is quarantined with
        the reason, and the rest lands. A failure of another kind (I/O, memory) is raised."""
        try:
            self._apply_lean(stream, items)
        except UNAPPLIABLE as exc:
            if isinstance(exc, MemoryError):  # pa.ArrowMemoryError: the machine's fault, not the event's
                raise
            pending = [i for i in items if i.seq > self.positions[stream]]
            if len(pending) > 1:
                log.warning("batch of %s refused (%s): applying it in halves", stream, exc)
                half = len(pending) // 2
                self.apply(stream, pending[:half])
                self.apply(stream, pending[half:])
            elif pending:
                log.error("quarantined %s seq %d: %s", stream, pending[0].seq, exc)
                self._apply(stream, [unapplied(pending[0], exc)])
            else:
                raise

    def _apply_lean(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        """Apply a batch; one with lean events (see lean.py) that DuckDB refuses again, decoded strictly."""
        try:
            self._apply(stream, items)
        except duckdb.Error as exc:
            if out_of_memory(exc) or not any(isinstance(i, Envelope) and lean.is_lean(i.event) for i in items):
                raise
            log.warning("batch of %s refused (%s): applying it again, decoded strictly", stream, exc)
            self._apply(stream, [_strict(i) for i in items])

    def _apply(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        prepared, preparer = self._prepare(stream, items)
        if prepared is not None:
            self.commit(prepared, preparer)

    def _prepare(self, stream: str, items: list[Envelope | BadEvent]) -> tuple[Prepared | None, Preparer]:
        """A batch prepared by this process's preparer from the committed position (None: nothing new)."""
        preparer = self.preparer(stream)
        preparer.positions[stream] = self.positions[stream]
        try:
            return preparer.prepare(stream, items), preparer
        except BaseException:
            self._preparers.pop(stream, None)  # its folds went ahead of the database (Arrow refused a row)
            raise

    def commit(self, prepared: Prepared, preparer: Preparer | None = None) -> None:
        """Write a prepared batch and move its stream's checkpoint, in one transaction. ``preparer``: this
        process's, when it prepared the batch (else the folds are read again when next needed)."""
        self.commit_all([(prepared, preparer)])

    def commit_all(self, batches: list[tuple[Prepared, Preparer | None]]) -> None:
        """Write prepared batches (of different streams) and move their checkpoints, in one transaction."""
        ended_here = {k for p, _ in batches if p.stream == "control" for k in p.candidates}
        tables_: list[tuple[str, pa.Table]] = []
        checkpoints, cleared, candidates = [], [], []
        for prepared, _ in batches:
            tables_ += prepared.tables
            checkpoints.append((prepared.stream, prepared.last, prepared.stamp))
            cleared += prepared.cleared
            if prepared.stream == "spans":  # telemetry: only that of an ended attempt changes training rows
                candidates += [k for k in prepared.candidates if k not in self.active or k in ended_here]
            else:
                candidates += prepared.candidates
        held, due = self.held.ends, set()
        if not self.defer_training and "spans" not in self.diverged:  # (a stopped spans stream releases none)
            ended_at = max(((p.stamp, p.last) for p, _ in batches if p.stream == "control"), default=(0.0, 0))
            telemetry_at = max([self.stamps["spans"], *(p.stamp for p, _ in batches if p.stream == "spans")])
            held, due = self.held.after(ended_here, ended_at, telemetry_at)
            candidates = [k for k in candidates if k not in held] + sorted(due)
            if candidates and not cleared and self._refresh_later(len(held) + len(candidates)):
                unknown = (0.0, 0)  # an attempt that ended before: a wait for training rows waits for it too
                later = {k: self.held.ends.get(k) or (ended_at if k in ended_here else unknown) for k in candidates}
                held, candidates = held | later, []
        self._commit(tables_, checkpoints, cleared, candidates)
        running = {k for p, _ in batches if p.stream == "control" for k in p.running}
        if ended_here or running:
            self.active = (self.active - ended_here) | running
        self.held.keep(held)
        for prepared, preparer in batches:
            self.positions[prepared.stream], self.stamps[prepared.stream] = prepared.last, prepared.stamp
            self.applied += prepared.count
            if preparer is None or preparer is not self._preparers.get(prepared.stream):
                self._preparers.pop(prepared.stream, None)
            elif preparer.positions[prepared.stream] == prepared.last:  # nothing prepared past what is committed
                preparer.trim()

    def apply_together(self, batches: dict[str, list[Envelope | BadEvent] | Prepared]) -> bool:
        """Apply one batch of each stream in one transaction: a trickle on both streams then costs half the
        commits (and one training refresh instead of two). False when that failed and nothing of them landed:
        apply each alone then (``apply`` / ``commit``), which deals with what DuckDB refuses."""
        pairs: list[tuple[Prepared, Preparer | None]] = []
        try:
            for stream, batch in batches.items():
                prepared, preparer = (batch, None) if isinstance(batch, Prepared) else self._prepare(stream, batch)
                if prepared is not None:
                    pairs.append((prepared, preparer))
            if pairs:
                self.commit_all(pairs)
            return True
        except Exception as exc:  # each batch alone says what is wrong, or lands
            log.info("batches of %s not applied together (%s): applying each alone", ", ".join(batches), exc)
            self._preparers.clear()  # folds prepared here went ahead of the database
            return False

    def touched_after(self, seq: int) -> set[tuple[str, str]]:
        """Attempts with a sign of life on the spans stream after ``seq``."""
        return set(
            self.con.execute("SELECT rollout_id, attempt_id FROM attempt_activity WHERE last_seq > ?", [seq]).fetchall()
        )

    def rewind(self, divergence: Row, keys: set[tuple[str, str]], activity: list[Row], stamp: float) -> None:
        """Take back the spans rows above ``divergence["good_to"]``: ``keys`` get the recounted ``activity``
        and fresh training rows, the checkpoint moves back to that sequence (stored at ``stamp``)."""
        seq = divergence["good_to"]
        rows = {"rewind_spans": [{"seq": seq}], "activity_rows": activity, "divergence": [divergence]}
        self._commit(tables(rows), [("spans", seq, stamp)], sorted(keys), sorted(keys))
        self.positions["spans"], self.stamps["spans"] = seq, stamp
        self._preparers.pop("spans", None)

    def diverge(self, divergence: Row) -> None:
        """Record that a stream is no longer applied (the log no longer holds what was applied)."""
        self.diverged[divergence["stream"]] = divergence["reason"]
        blocks.run(self.con, self.blocks["divergence"].sql, pa.Table.from_pylist([divergence]))
        if divergence["stream"] == "spans":  # no more telemetry will come: nothing waits for it
            self.release_held()

    def _commit(
        self,
        blocks_: list[tuple[str, pa.Table]],
        checkpoints: list[tuple[str, int, float]],
        cleared: list[Key],
        candidates: list[Key],
    ) -> None:
        self.con.begin()
        try:
            for stream, seq, stamp in checkpoints:
                position = {"stream": stream, "seq": seq, "updated_at": stamp}
                if not self.con.execute(self.blocks["checkpoint"].sql, position).fetchone()[0]:  # type: ignore[index]
                    self.con.execute(self.blocks["first_checkpoint"].sql, position)
            for name, table in blocks_:
                blocks.run(self.con, self.blocks[name].sql, table)
            if not self.defer_training:
                training.refresh(self.con, self.blocks, cleared, candidates, self.adapter)
            self.con.commit()
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a COMMIT that failed has ended the transaction already
                self.con.rollback()
            self._load()  # folds prepared here went ahead of the database: take them back
            raise
        if candidates and not self.defer_training:
            self._refreshed_at = time.monotonic()  # (what ``_refresh_later`` measures from)


def _strict(item: Envelope | BadEvent) -> Envelope | BadEvent:
    if not isinstance(item, Envelope) or not lean.is_lean(item.event):
        return item
    try:
        return msgspec.structs.replace(item, event=lean.strict(item.event))
    except DecodeError as exc:
        return BadEvent(seq=item.seq, subject=item.subject, data=item.event.stored, reason=exc.reason, time=item.time)
