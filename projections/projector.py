"""The projector: applies stored events to DuckDB tables exactly once, in batches.

Each batch of a stream is applied, and that stream's checkpoint moved, in one DuckDB transaction,
so a kill at any instant loses nothing and doubles nothing: on restart each stream resumes at its
checkpoint + 1. Rollout and attempt rows come from folding the lifecycle decider's ``evolve``.
"""

from __future__ import annotations

import collections
import logging
import shutil
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa

from voltbus.schemas import codec
from voltbus.schemas.errors import DecodeError
from voltbus.schemas.subjects import aggregate_of
from voltbus.services.eventlog import BadEvent, Envelope
from voltbus.services.lifecycle import RolloutState, decider
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from . import blocks, lean, training
from .adapter import AdapterSettings
from .rows import ARROW, Row, activity_key, control_row, rollout_rows, telemetry_row

log = logging.getLogger(__name__)

PROJECTION_VERSION = 5
"""Bump when tables or row mapping change: an older database is then rebuilt from the log."""
STREAMS = ("control", "spans")
KEYS = {"WorkerStatusReported": ("worker_id",), "ResourcesPublished": ("resources_id",), "RunStarted": ("run_id",)}
"""Blocks that replace rows by key: within one batch only the last row per key is kept."""

UNAPPLIABLE = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException, pa.ArrowException, OverflowError)
"""What rows out of a column's range (or type) raise in DuckDB or Arrow: the events that cause it are quarantined."""

_state_decoder = msgspec.json.Decoder(RolloutState)
_NONE = decider.initial_state()


def prepare_file(path: Path) -> None:
    """Move aside a database written by an older projection version (it will be rebuilt from the log)."""
    if not path.exists():
        return
    with duckdb.connect(str(path), read_only=True) as con:
        try:
            row = con.execute("SELECT value FROM projection_meta WHERE key = 'version'").fetchone()
        except duckdb.CatalogException:
            row = None
    if row is None or int(row[0]) != PROJECTION_VERSION:
        backup = path.with_name(f"{path.name}.v{row[0] if row else 'unknown'}.bak")
        log.warning(
            "%s was built by projection version %s, not %d: moved to %s, rebuilding from the log",
            path,
            row[0] if row else "unknown",
            PROJECTION_VERSION,
            backup,
        )
        shutil.move(path, backup)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            shutil.move(wal, backup.with_name(backup.name + ".wal"))


class Projector:
    """The only writer of one DuckDB file."""

    def __init__(self, path: Path | str, adapter: AdapterSettings | None = None) -> None:
        self.path = Path(path)
        self.adapter = adapter or AdapterSettings()
        self.schemas, self.blocks = blocks.load()
        self.states: dict[str, RolloutState] = {}
        self.positions = dict.fromkeys(STREAMS, 0)
        self.stamps = dict.fromkeys(STREAMS, 0.0)
        """Stored time of the message at each checkpoint (to tell it from another one at that sequence)."""
        self.diverged: dict[str, str] = {}
        """Streams no longer applied, with why: the log no longer holds what was applied (see rewind.py)."""
        self.applied = 0
        prepare_file(self.path)
        self.con = duckdb.connect(str(self.path))
        for block in self.schemas:
            self.con.execute(block.sql)
        self.con.execute("INSERT OR IGNORE INTO projection_meta VALUES ('version', ?)", [str(PROJECTION_VERSION)])
        training.record_settings(self.con, self.blocks, self.adapter)
        self._load()

    def _load(self) -> None:
        """Positions and folded rollout states as the last committed transaction left them."""
        self.positions = dict.fromkeys(STREAMS, 0)
        for stream, seq, stamp in self.con.execute("SELECT stream, seq, updated_at FROM checkpoints").fetchall():
            self.positions[stream], self.stamps[stream] = seq, stamp
        rows = self.con.execute("SELECT rollout_id, state FROM rollout_states").fetchall()
        self.states = {rid: _state_decoder.decode(blob) for rid, blob in rows}

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
                self._apply(stream, [_unapplied(pending[0], exc)])
            else:
                raise

    def _apply_lean(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        """Apply a batch; one with lean events (see lean.py) that DuckDB refuses again, decoded strictly."""
        try:
            self._apply(stream, items)
        except duckdb.Error as exc:
            if not any(isinstance(i, Envelope) and lean.is_lean(i.event) for i in items):
                raise
            log.warning("batch of %s refused (%s): applying it again, decoded strictly", stream, exc)
            self._apply(stream, [_strict(i) for i in items])

    def _apply(self, stream: str, items: list[Envelope | BadEvent]) -> None:
        items = [i for i in items if i.seq > self.positions[stream]]
        if not items:
            return
        rows: dict[str, list[Row]] = collections.defaultdict(list)
        touched: dict[str, int] = {}
        activity: dict[tuple[str, str], Row] = {}
        ended_before: set[tuple[str, str]] = set()
        last, stamp = self.positions[stream], 0.0
        for item in items:
            if item.seq != last + 1:
                log.error("GAP in %s: after seq %d came %d (messages missing from the log)", stream, last, item.seq)
                rows["gaps"].append({"stream": stream, "after_seq": last, "next_seq": item.seq})
            last, stamp = item.seq, item.time or stamp
            if isinstance(item, BadEvent):
                rows["quarantine"].append(_parked(stream, item.seq, item.subject, item.reason, item.data))
                continue
            try:
                self._rows_of(stream, item, rows, touched, activity, ended_before)
            except Exception as exc:  # one event that cannot be applied must not block the projection
                log.exception("quarantined %s seq %d", stream, item.seq)
                bad = _unapplied(item, exc)
                rows["quarantine"].append(_parked(stream, bad.seq, bad.subject, bad.reason, bad.data))
        for rollout_id, seq in touched.items():
            rollout, attempts = rollout_rows(self.states[rollout_id], seq)
            rows["rollout_rows"].append(rollout)
            rows["attempt_rows"] += attempts
            rows["state_rows"].append({"rollout_id": rollout_id, "state": msgspec.json.encode(self.states[rollout_id])})
        rows["activity_rows"] += activity.values()
        # only an attempt that was ended can have training rows: those are cleared, the ended recomputed
        ended = [(r, a.attempt_id) for r in touched for a in self.states[r].attempts if a.status not in ACTIVE_ATTEMPT]
        ended += [k for k in ended_before if k[0] in touched]
        ended += [k for k in activity if training.ended(self.states, k)]
        self._commit(rows, (stream, last, stamp), ended)
        self.positions[stream], self.stamps[stream] = last, stamp
        self.applied += len(items)

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
        self._commit(rows, ("spans", seq, stamp), list(keys))
        self.positions["spans"], self.stamps["spans"] = seq, stamp

    def diverge(self, divergence: Row) -> None:
        """Record that a stream is no longer applied (the log no longer holds what was applied)."""
        self.diverged[divergence["stream"]] = divergence["reason"]
        self.con.register("batch", pa.Table.from_pylist([divergence]))
        self.con.execute(self.blocks["divergence"].sql)
        self.con.unregister("batch")

    def _rows_of(
        self,
        stream: str,
        env: Envelope,
        rows: dict[str, list[Row]],
        touched: dict[str, int],
        activity: dict[tuple[str, str], Row],
        ended_before: set[tuple[str, str]],
    ) -> None:
        if stream == "spans":
            if (row := telemetry_row(env)) is not None:
                rows[row[0]].append(row[1])
            if (key := activity_key(env)) is not None:
                seen = activity.get(key)
                events = seen["events"] + 1 if seen else 1
                last_seen = max(seen["last_seen"], env.time) if seen else env.time
                activity[key] = {
                    "rollout_id": key[0],
                    "attempt_id": key[1],
                    "last_seen": last_seen,
                    "events": events,
                    "last_seq": env.seq,
                }
            return
        rollout_id = aggregate_of(env.event)
        if rollout_id is not None:
            before = self.states.get(rollout_id, _NONE)
            if rollout_id not in touched:  # as the last commit left it: the attempts that may have training rows
                ended_before.update((rollout_id, a.attempt_id) for a in before.attempts if _ended(a.status))
            state = decider.evolve(before, env.event)  # type: ignore[arg-type]
            if state.status is not None:
                self.states[rollout_id] = state
                touched[rollout_id] = env.seq
        elif (row := control_row(env)) is not None:
            rows[row[0]].append(row[1])

    def arrow(self, name: str, rows: list[Row]) -> pa.Table:
        """A block's rows as an Arrow table: the block's fixed schema (rows.ARROW) or inferred types."""
        schema = ARROW.get(name)
        return pa.Table.from_pylist(rows, schema=schema) if schema is not None else pa.Table.from_pylist(rows)

    def _commit(
        self, rows: dict[str, list[Row]], checkpoint: tuple[str, int, float], attempts: list[tuple[str, str]]
    ) -> None:
        self.con.begin()
        try:
            stream, seq, stamp = checkpoint
            self.con.execute(self.blocks["checkpoint"].sql, {"stream": stream, "seq": seq, "updated_at": stamp})
            for name, block_rows in rows.items():
                if not block_rows:
                    continue
                if name in KEYS:
                    block_rows = list({tuple(r[k] for k in KEYS[name]): r for r in block_rows}.values())
                self.con.register("batch", self.arrow(name, block_rows))
                self.con.execute(self.blocks[name].sql)
                self.con.unregister("batch")
            training.refresh(self.con, self.blocks, attempts, self.states, self.adapter)
            self.con.commit()
        except BaseException:
            self.con.rollback()
            self._load()  # in-memory folds went ahead of the database: take them back
            raise


def _ended(status: str) -> bool:
    return status not in ACTIVE_ATTEMPT


def _strict(item: Envelope | BadEvent) -> Envelope | BadEvent:
    if not isinstance(item, Envelope) or not lean.is_lean(item.event):
        return item
    try:
        return msgspec.structs.replace(item, event=lean.strict(item.event))
    except DecodeError as exc:
        return BadEvent(seq=item.seq, subject=item.subject, data=item.event.stored, reason=exc.reason, time=item.time)


def _unapplied(item: Envelope | BadEvent, exc: BaseException) -> BadEvent:
    """An event that could not be applied, as a quarantined message: its stored bytes (re-encoded when
    the decoder kept none) and the reason."""
    if isinstance(item, BadEvent):
        return item
    data = item.event.stored if lean.is_lean(item.event) else codec.encode(item.event)
    return BadEvent(seq=item.seq, subject=item.subject, data=data, reason=f"could not apply: {exc}", time=item.time)


def _parked(stream: str, seq: int, subject: str, reason: str, data: bytes | None) -> Row:
    return {"stream": stream, "seq": seq, "subject": subject, "reason": reason, "data": data}
