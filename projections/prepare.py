"""Preparing a batch: stored events in, the rows they add (as Arrow tables) and the training keys they touch
out; no DuckDB.

Rollout and attempt rows come from folding the lifecycle decider's ``evolve`` over each rollout's events,
never from a second copy of the lifecycle rules. The preparer runs in the projector's process, or in a
reader process of its own (``services/projector/reader.py``), where its Python work does not compete with the writer's.
"""

from __future__ import annotations

import collections
import logging
import zlib
from collections.abc import Callable

import msgspec
import pyarrow as pa

from voltbus.schemas import codec
from voltbus.schemas.rollouts import RolloutQueued
from voltbus.schemas.subjects import aggregate_of
from voltbus.services.eventlog import BadEvent, Envelope, Passed
from voltbus.services.lifecycle import RolloutState, decider
from voltbus.services.lifecycle.authority import refusal
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from . import lean
from .rows import ARROW, Row, activity_keys, control_row, count_activity, fold_tables, telemetry_rows

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(rollout_id, attempt_id)"""
KEYS = {"WorkerStatusReported": ("worker_id",), "ResourcesPublished": ("resources_id",), "RunStarted": ("run_id",)}
"""Blocks that replace rows by key: within one batch only the last row per key is kept."""

_NONE = decider.initial_state()
_state_decoder = msgspec.json.Decoder(RolloutState)


class Cut(msgspec.Struct, kw_only=True):
    """Where a batch of a stream ends and which training rows it touches (what ``Rows``, ``Prepared`` and a
    reader's share of a batch have in common)."""

    stream: str
    last: int
    """The sequence the stream's checkpoint moves to."""
    stamp: float
    """Stored time of the message at ``last``."""
    count: int
    """Events in the batch (each applied or quarantined)."""
    cleared: list[Key] = []
    """Attempts whose training rows are taken away (they were ended before the batch)."""
    candidates: list[Key] = []
    """Attempts whose training rows are recomputed if they have ended (by then)."""
    running: list[Key] = []
    """Attempts of the rollouts a control batch changed that are in progress after it (the others are candidates)."""


def cut_of(batch: Cut) -> dict[str, object]:
    """The ``Cut`` fields of a batch, to build another kind of batch from."""
    return {name: getattr(batch, name) for name in Cut.__struct_fields__}  # (structs.fields() reads annotations)


class Rows(Cut, kw_only=True):
    """What one batch adds, as row dicts per SQL block."""

    rows: dict[str, list[Row]]
    folded: list[tuple[RolloutState, int]] = []
    """The rollouts the batch changed, folded, each with the sequence of the last event that did: their
    rollout, attempt and state rows (``rows.fold_tables``)."""


class Prepared(Cut, kw_only=True):
    """A batch ready for the writer: its tables in the order ``tables`` gives them."""

    tables: list[tuple[str, pa.Table]]


def arrow(name: str, rows: list[Row]) -> pa.Table:
    """A block's rows as an Arrow table: the block's fixed schema (rows.ARROW) or inferred types."""
    schema = ARROW.get(name)
    return pa.Table.from_pylist(rows, schema=schema) if schema is not None else pa.Table.from_pylist(rows)


def tables(rows: dict[str, list[Row]]) -> list[tuple[str, pa.Table]]:
    """Every block's rows as Arrow, in the order the blocks first got a row (blocks write different
    tables, so any order lands the same); keyed blocks keep the last row per key."""
    out = []
    for name, block_rows in rows.items():
        if not block_rows:
            continue
        if name in KEYS:
            block_rows = list({tuple(r[k] for k in KEYS[name]): r for r in block_rows}.values())
        out.append((name, arrow(name, block_rows)))
    return out


def load_states(blobs: list[tuple[str, bytes]]) -> dict[str, RolloutState]:
    """Folded rollout states as ``rollout_states`` keeps them."""
    return {rid: _state_decoder.decode(blob) for rid, blob in blobs}


STATES_KEPT = 65_536
"""Folded rollout states a live projector's preparer keeps, the most recently changed: the others are read again from
the database when an event of theirs comes, so that its memory does not grow with the log (issue 25)."""

Part = tuple[int, int]
"""(index, count): which share of a stream a preparer prepares; (0, 1): all of it."""


def rollout_part(rollout_id: str, count: int) -> int:
    """The share a rollout's events belong to.

    >>> rollout_part("ro-1", 1), rollout_part("ro-1", 2) == rollout_part("ro-1", 2)
    (0, True)
    """
    return zlib.crc32(rollout_id.encode()) % count if count > 1 else 0


def span_part(subject: bytes | str, count: int) -> int:
    """The share a spans-stream message belongs to, by its shard subject (``<ns>.sp.<shard>``).

    >>> span_part(b"vb.sp.5", 2), span_part("vb.sp.6", 2), span_part(b"vb.sp.x", 2)
    (1, 0, 0)
    """
    token = subject.rsplit(b"." if isinstance(subject, bytes) else ".", 1)[-1]
    return int(token) % count if token.isdigit() and count > 1 else 0


class Preparer:
    """Positions and folded rollout states as of the batches prepared so far.

    A preparer of a share (``part``) of a stream sees every message of it but prepares only its share's:
    spans by their shard subject (the feed leaves the others undecoded), rollout events by rollout,
    everything else (and the gaps) in share 0. The shares' tables together are one preparer's."""

    def __init__(
        self,
        positions: dict[str, int],
        states: dict[str, RolloutState],
        part: Part = (0, 1),
        loader: Callable[[list[str]], dict[str, RolloutState]] | None = None,
    ) -> None:
        self.positions = dict(positions)
        self.states = states
        """Folded states, least recently changed first; with a ``loader`` only some (see ``trim``)."""
        self.part = part
        self.loader = loader
        """Where the states not kept are read from (the database's committed folds), for the rollouts of a batch."""
        self.changed: dict[str, int] = {}
        """Sequence of the event that last changed each kept state (``forget``)."""

    def trim(self) -> None:
        """Forget the least recently changed states past ``STATES_KEPT``: only when a ``loader`` reads them again and
        every batch prepared here is committed (what the loader reads is then what was forgotten)."""
        while self.loader is not None and len(self.states) > STATES_KEPT:
            oldest = next(iter(self.states))
            del self.states[oldest]
            self.changed.pop(oldest, None)

    def forget(self, committed: int, kept: int) -> None:
        """Forget the least recently changed states past ``kept`` that no event after ``committed`` changed (a reader
        process's: the projector's database holds them as forgotten, and reads them again for it)."""
        while len(self.states) > kept:
            oldest = next(iter(self.states))
            if self.changed.get(oldest, 0) > committed:
                return
            del self.states[oldest]
            self.changed.pop(oldest, None)

    def missing(self, items: list[Envelope | BadEvent | Passed]) -> list[str]:
        """The rollouts of this share with events in ``items`` whose states are not kept, but for those queued in
        the batch (none is stored: a rollout's first event must be first, ``expected_seq=0``)."""
        wanted: set[str] = set()
        new: set[str] = set()
        index, count = self.part
        for item in items:
            if not isinstance(item, Envelope) or (rid := aggregate_of(item.event)) is None or rid in self.states:
                continue
            if count > 1 and rollout_part(rid, count) != index:
                continue
            if rid not in wanted and isinstance(item.event, RolloutQueued):
                new.add(rid)
            elif rid not in new:
                wanted.add(rid)
        return sorted(wanted)

    def _load_missing(self, items: list[Envelope | BadEvent | Passed]) -> None:
        """Read the states of the batch's rollouts that are not kept, in one query."""
        if self.loader is not None and (wanted := self.missing(items)):
            self.states.update(self.loader(wanted))

    def prepare(self, stream: str, items: list[Envelope | BadEvent | Passed]) -> Prepared | None:
        """The batch's tables (None: every item is at or below the stream's position)."""
        batch = self.rows(stream, items)
        if batch is None:
            return None
        return Prepared(**cut_of(batch), tables=tables(batch.rows) + fold_tables(batch.folded))  # type: ignore[arg-type]

    def rows(self, stream: str, items: list[Envelope | BadEvent | Passed]) -> Rows | None:
        """The batch's row dicts; items already prepared are skipped, a hole in the sequence is recorded."""
        items = [i for i in items if i.seq > self.positions[stream]]
        if not items:
            return None
        if stream == "control" and self.loader is not None:
            self._load_missing(items)
        index, count = self.part
        rows: dict[str, list[Row]] = collections.defaultdict(list)
        touched: dict[str, int] = {}
        activity: dict[Key, Row] = {}
        cleared: set[Key] = set()
        last, stamp = self.positions[stream], 0.0
        for item in items:
            if item.seq != last + 1 and index == 0:
                log.error("GAP in %s: after seq %d came %d (messages missing from the log)", stream, last, item.seq)
                rows["gaps"].append({"stream": stream, "after_seq": last, "next_seq": item.seq})
            last, stamp = item.seq, item.time or stamp
            if isinstance(item, Passed):
                continue
            if isinstance(item, BadEvent):
                if stream == "spans" or index == 0:  # a spans message reaches only its share's preparer
                    rows["quarantine"].append(parked(stream, item))
                continue
            try:
                if stream == "spans":
                    self._telemetry(item, rows, activity)
                else:
                    self._control(item, rows, touched, cleared)
            except Exception as exc:  # one event that cannot be applied must not block the projection
                log.exception("quarantined %s seq %d", stream, item.seq)
                rows["quarantine"].append(parked(stream, unapplied(item, exc)))
        rows["activity_rows"] += activity.values()
        attempts = [(r, a) for r in touched for a in self.states[r].attempts]
        ended = [(r, a.attempt_id) for r, a in attempts if ended_status(a.status)]
        running = [(r, a.attempt_id) for r, a in attempts if not ended_status(a.status)]
        self.positions[stream] = last
        return Rows(
            stream=stream,
            last=last,
            stamp=stamp,
            count=len(items),
            rows=rows,
            folded=[(self.states[r], seq) for r, seq in touched.items()],
            cleared=sorted(cleared),
            candidates=ended + list(activity),
            running=running,
        )

    def _telemetry(self, env: Envelope, rows: dict[str, list[Row]], activity: dict[Key, Row]) -> None:
        found = telemetry_rows(env)  # every row of the message or, should one fail, none (it is quarantined)
        for name, row in found:
            rows[name].append(row)
        for key in activity_keys(env):
            count_activity(activity, key, env)

    def _control(self, env: Envelope, rows: dict[str, list[Row]], touched: dict[str, int], cleared: set[Key]) -> None:
        rollout_id = aggregate_of(env.event)
        index, count = self.part
        if rollout_id is None:
            if index == 0 and (row := control_row(env)) is not None:
                rows[row[0]].append(row[1])
            return
        if count > 1 and rollout_part(rollout_id, count) != index:
            return
        before = self.states.get(rollout_id, _NONE)
        if before.attempts and rollout_id not in touched:  # as the last batch left it: those may have training rows
            cleared.update((rollout_id, a.attempt_id) for a in before.attempts if ended_status(a.status))
        if (why := refusal(before, env.event, env.subject)) is not None:  # type: ignore[arg-type]
            rows["quarantine"].append(parked("control", refused(env, why)))
            return
        state = decider.evolve(before, env.event)  # type: ignore[arg-type]
        if state.status is not None:
            self.states.pop(rollout_id, None)  # to the end: the most recently changed
            self.states[rollout_id] = state
            touched[rollout_id] = self.changed[rollout_id] = env.seq


def ended_status(status: str) -> bool:
    """Whether an attempt with this status is no longer in progress."""
    return status not in ACTIVE_ATTEMPT


def unapplied(item: Envelope | BadEvent, exc: BaseException) -> BadEvent:
    """An event that could not be applied, as a quarantined message: its stored bytes (re-encoded when
    the decoder kept none) and the reason."""
    if isinstance(item, BadEvent):
        return item
    data = item.event.stored if lean.is_lean(item.event) else codec.encode(item.event)
    return BadEvent(seq=item.seq, subject=item.subject, data=data, reason=f"could not apply: {exc}", time=item.time)


def refused(env: Envelope, why: str) -> BadEvent:
    """A stored event the lifecycle does not record (``authority.refusal``), as a quarantined message."""
    data = codec.encode(env.event)
    return BadEvent(seq=env.seq, subject=env.subject, data=data, reason=f"refused: {why}", time=env.time)


def parked(stream: str, bad: BadEvent) -> Row:
    """The quarantine row of a message."""
    return {"stream": stream, "seq": bad.seq, "subject": bad.subject, "reason": bad.reason, "data": bad.data}
