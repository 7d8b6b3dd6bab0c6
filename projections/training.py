"""Training tables: when an attempt has ended, its stored telemetry goes through the adapter and its
``triplets`` / ``trajectories`` / ``training_attempts`` rows are replaced, inside the projector's transaction.

An ended attempt is recomputed again whenever more of its telemetry arrives (a late span flush or
reward), so the tables after any interleaving of the two streams equal the tables after a rebuild.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from typing import Any

import duckdb
import msgspec
import pyarrow as pa

from voltbus.schemas.base import derive_id
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from .adapter import ADAPTER_VERSION, AdapterSettings, AttemptInput, CallRow, RewardRow, SpanRow, adapt, settings_id
from .blocks import Block, run

Key = tuple[str, str]
_json = msgspec.json.Decoder()
CATCH_UP_CHUNK = 1000
"""Attempts per transaction of a deferred pass: each chunk's telemetry is read in one query per table."""


def task_id(metadata: dict[str, Any], input_: Any) -> str:
    """The GRPO group of a rollout: ``task_id`` / ``data_id`` in its metadata or input, else a hash of the input
    (from the metadata and the decoded input, as the ``rollouts`` table holds them).

    >>> task_id({}, {"q": 1, "id": "t7"})
    't7'
    >>> task_id({}, {"b": 1, "a": 2}) == task_id({}, {"a": 2, "b": 1})
    True
    """
    for source in (metadata, input_):
        if isinstance(source, dict):
            for key in ("task_id", "data_id", "id"):
                value = source.get(key)
                value = _json.decode(value) if isinstance(value, msgspec.Raw) else value
                if isinstance(value, str | int) and not isinstance(value, bool):
                    return str(value)
    canonical = msgspec.json.encode(input_, order="deterministic")
    return "input:" + derive_id(canonical.decode())[:16]


def record_settings(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block], settings: AdapterSettings) -> None:
    """Note the settings in ``training_meta``."""
    params = {
        "settings_id": settings_id(settings),
        "adapter_version": ADAPTER_VERSION,
        "settings": msgspec.json.encode(settings).decode(),
    }
    con.execute(blocks["training_settings"].sql, params)


def refresh(
    con: duckdb.DuckDBPyConnection,
    blocks: dict[str, Block],
    cleared: Iterable[Key],
    candidates: Iterable[Key],
    settings: AdapterSettings,
) -> set[Key]:
    """Replace the training rows of the ``candidates`` that have ended (as the tables say, this transaction's
    rows included) and take away those of ``cleared``; an attempt in progress has none. Only an attempt that has
    rows (its ``training_attempts`` row, found by index) costs DELETEs. Returns the candidates that have ended."""
    keys = sorted(set(candidates))
    done = _ended(con, blocks, keys) if keys else []
    ended = {(d["rollout_id"], d["attempt_id"]) for d in done}
    with_rows = {row[:2] for row in _of_keys(con, blocks["training_found_attempts"], ended)} if ended else set()
    gone = sorted(set(cleared) | with_rows)
    if gone:
        _clear(con, blocks, gone)
    if not done:
        return ended
    inputs = _inputs(con, blocks, done)
    outputs = [adapt(i, settings) for i in inputs]
    _insert(con, blocks["triplet_rows"], "triplets", [_row(t) for o in outputs for t in o.triplets])
    _insert(con, blocks["trajectory_rows"], "trajectories", [_row(t) for o in outputs for t in o.trajectories])
    _insert(con, blocks["training_attempt_rows"], "training_attempts", [_row(o.summary) for o in outputs])
    return ended


def _clear(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block], keys: list[Key]) -> None:
    """Take away the training rows of ``keys``: each table's rows of the keys, deleted by row id."""
    for table in ("triplets", "trajectories", "attempts"):
        rowids = [row[2] for row in _of_keys(con, blocks[f"training_found_{table}"], keys)]
        if rowids:
            con.execute(blocks[f"training_clear_{table}"].sql, {"rowids": rowids})


def _of_keys(con: duckdb.DuckDBPyConnection, block: Block, keys: Iterable[Key]) -> list[tuple[Any, ...]]:
    """The rows ``block`` finds for the attempt ids of ``keys`` (each row begins with its rollout_id and attempt_id)
    that are rows of ``keys`` themselves. The block looks the ids up by a one-column index and the pairs are matched
    here: as one SQL join on both columns, DuckDB read the whole table at every commit (BENCHMARKS.md,
    "Projections")."""
    wanted = set(keys)
    rows = con.execute(block.sql, {"attempt_ids": sorted({a for _, a in wanted})}).fetchall()
    return [row for row in rows if row[:2] in wanted]


def without_rows(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block]) -> set[Key]:
    """The ended attempts that have no training rows: their refresh never ran (a replay stopped before its
    training pass, or a projector stopped while it held them)."""
    return set(con.execute(blocks["training_missing"].sql, {"active": sorted(ACTIVE_ATTEMPT)}).fetchall())


def catch_up(
    con: duckdb.DuckDBPyConnection,
    blocks: dict[str, Block],
    settings: AdapterSettings,
    keys: Collection[Key],
    progress: Callable[[int, int], None] | None = None,
    chunk: int = CATCH_UP_CHUNK,
) -> None:
    """The training rows of ended attempts that have none (``keys``), ``chunk`` attempts per transaction in the
    order their telemetry was stored; ``progress(done, total)`` after each chunk."""
    ordered: list[Key] = con.execute(blocks["training_order"].sql, _key_lists(keys)).fetchall()  # type: ignore[assignment]
    for start in range(0, len(ordered), chunk):
        part = ordered[start : start + chunk]
        con.begin()
        try:
            refresh(con, blocks, [], part, settings)
            con.commit()
        except BaseException:
            con.rollback()
            raise
        if progress is not None:
            progress(start + len(part), len(ordered))


class Held:
    """Ended attempts whose refresh waits for their telemetry, each with where the control batch that ended it was
    stored (time, sequence): the spans stream is read apart from the control stream and lags behind it, so a refresh
    when the end is applied would mostly see none of the spans stored before it, and be done again when they arrive
    (twice for nearly every attempt at 256 rollouts in flight, BENCHMARKS.md, "Projections"). Such an attempt is
    refreshed once the spans stream has applied a message stored at or after its end, or when the spans stream has
    nothing more; until then a query that waits for a control sequence at or past its end waits for it too."""

    def __init__(self) -> None:
        self.ends: dict[Key, tuple[float, int]] = {}

    def after(
        self, ended: Iterable[Key], at: tuple[float, int], telemetry_at: float
    ) -> tuple[dict[Key, tuple[float, int]], set[Key]]:
        """What is held and what is due once a commit has ended ``ended`` (control stored up to ``at``: time,
        sequence) and applied telemetry stored up to ``telemetry_at``; nothing changes until ``keep`` takes the
        first (replaced, never changed in place: other threads read it)."""
        held = dict(self.ends)
        if at[0] > telemetry_at:
            held.update(dict.fromkeys(ended, at))
        due = {k for k, (t, _) in held.items() if t <= telemetry_at}
        return {k: v for k, v in held.items() if k not in due}, due

    def keep(self, held: dict[Key, tuple[float, int]]) -> None:
        """After the commit that ``after`` was for."""
        self.ends = held

    def blocks(self, control_seq: int) -> bool:
        """Whether an attempt ended at or before ``control_seq`` is still held."""
        return any(seq <= control_seq for _, seq in self.ends.values())


def active_attempts(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block]) -> set[Key]:
    """Every attempt in progress, as the tables say (as many as run at once, not a history)."""
    rows = con.execute(blocks["active_attempts"].sql, {"active": sorted(ACTIVE_ATTEMPT)}).fetchall()
    return set(rows)


def _ended(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block], keys: list[Key]) -> list[dict[str, Any]]:
    """The attempts of ``keys`` no longer in progress, with their rollout's mode, input and metadata, in key order
    (two lookups by index, joined here)."""
    done = sorted(row[:2] for row in _of_keys(con, blocks["training_done"], keys) if row[2] not in ACTIVE_ATTEMPT)
    if not done:
        return []
    found = _query(con, blocks["training_rollouts"], {"rollout_ids": sorted({r for r, _ in done})})
    rollouts = {row["rollout_id"]: row for row in found}
    return [{**rollouts[r], "attempt_id": a} for r, a in done if r in rollouts]


def _key_lists(keys: Iterable[Key]) -> dict[str, list[str]]:
    """Keys as the blocks take them: two aligned lists (cheaper for DuckDB than a registered table)."""
    pairs = list(keys)
    return {"rollout_ids": [r for r, _ in pairs], "attempt_ids": [a for _, a in pairs]}


def _query(con: duckdb.DuckDBPyConnection, block: Block, params: dict[str, Any]) -> list[dict[str, Any]]:
    result = con.execute(block.sql, params)
    names = [d[0] for d in result.description or []]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


_SCHEMAS: dict[tuple[str, tuple[str, ...]], pa.Schema] = {}
"""Arrow types of the training tables' columns, by (table, columns): no batch pays for type inference."""


def _insert(con: duckdb.DuckDBPyConnection, block: Block, table: str, rows: list[dict[str, Any]]) -> None:
    """Add ``rows`` to ``table`` through ``block``, typed as the table's columns."""
    if not rows:
        return
    names = tuple(rows[0])
    schema = _SCHEMAS.get((table, names))
    if schema is None:
        columns = con.table(table).limit(0).to_arrow_table().schema
        schema = _SCHEMAS[table, names] = pa.schema([columns.field(n) for n in names])
    run(con, block.sql, pa.Table.from_pylist(rows, schema=schema))


def _row(struct: msgspec.Struct) -> dict[str, Any]:
    row = msgspec.structs.asdict(struct)
    if "dimensions" in row:
        row["dimensions"] = msgspec.json.encode(row["dimensions"]).decode()
    return row


def _inputs(con: duckdb.DuckDBPyConnection, blocks: dict[str, Block], done: list[dict[str, Any]]) -> list[AttemptInput]:
    keys: dict[str, Any] = _key_lists((d["rollout_id"], d["attempt_id"]) for d in done)
    bound = con.execute(blocks["training_from_seq"].sql, {"attempt_ids": keys["attempt_ids"]}).fetchone()
    keys["from_seq"] = bound[0]  # type: ignore[index]  # where the keys' telemetry begins: older rows are not read
    found: dict[str, dict[Key, list[Any]]] = {n: defaultdict(list) for n in ("spans", "calls", "rewards")}
    for row in _query(con, blocks["training_spans"], keys):
        row["attributes"] = _json.decode(row["attributes"] or "{}")
        found["spans"][row.pop("rollout_id"), row.pop("attempt_id")].append(msgspec.convert(row, SpanRow))
    for row in _query(con, blocks["training_calls"], keys):
        found["calls"][row.pop("rollout_id"), row.pop("attempt_id")].append(msgspec.convert(row, CallRow))
    for row in _query(con, blocks["training_rewards"], keys):
        row["dimensions"] = _json.decode(row["dimensions"] or "{}")
        found["rewards"][row.pop("rollout_id"), row.pop("attempt_id")].append(msgspec.convert(row, RewardRow))
    inputs = []
    for d in done:
        key = (d["rollout_id"], d["attempt_id"])
        metadata, input_ = _json.decode(d["metadata"] or "{}"), _json.decode(d["input"] or "null")
        inputs.append(
            AttemptInput(
                rollout_id=key[0],
                attempt_id=key[1],
                task_id=task_id(metadata, input_),
                mode=d["mode"],
                spans=found["spans"][key],
                calls=found["calls"][key],
                rewards=found["rewards"][key],
            )
        )
    return inputs
