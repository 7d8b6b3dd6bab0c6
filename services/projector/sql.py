"""Read-only SQL on a projection: which statements may run, and running them so that they can only read.

A query is checked with DuckDB's own parser (SELECT, or EXPLAIN of a SELECT), then run on a cursor of its own in a
READ ONLY transaction that is always rolled back, on a database that reaches no file, network or extension
(``projections.projector.SAFETY``); it is interrupted at its deadline and refused past its row or byte limit.
"""

from __future__ import annotations

import re
import threading
from typing import NamedTuple

import duckdb
import pyarrow as pa

from voltbus.schemas.errors import QueryRefused
from voltbus.services.settings import ProjectorSettings

_SELECT, _EXPLAIN = duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN
_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)
_EXPLAIN_HEAD = re.compile(r"EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\((?:[^()']|'[^']*')*\)\s*)?", re.I)
BATCH_ROWS = 1024
"""Rows per Arrow batch read from a result (the byte limit is checked after each)."""


class Limits(NamedTuple):
    """What one query may take: rows, bytes of its Arrow answer, seconds of running."""

    max_rows: int = 100_000
    max_bytes: int = 64 << 20
    timeout_s: float = 30.0


def check_read_only(sql: str) -> None:
    """Refuse anything but SELECT, or EXPLAIN (ANALYZE) of a SELECT, naming what was refused.

    >>> check_read_only("SELECT 1; EXPLAIN ANALYZE SELECT 2; /* c */ EXPLAIN (FORMAT json) FROM t")
    >>> check_read_only("DELETE FROM rollouts")
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.QueryRefused: read-only: only SELECT and EXPLAIN SELECT are allowed, got DELETE
    >>> check_read_only("EXPLAIN ANALYZE UPDATE rewards SET value = 100")
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.QueryRefused: read-only: only SELECT and EXPLAIN SELECT are allowed, got EXPLAIN UPDATE
    """
    statements = _parse(sql)
    if not statements:
        raise QueryRefused("sql_error", "empty query")
    for statement in statements:
        kind = statement.type.name
        if statement.type == _EXPLAIN:
            kind = f"EXPLAIN {_explained(statement.query)}"
        if kind not in ("SELECT", "EXPLAIN SELECT"):
            raise QueryRefused("read_only", f"read-only: only SELECT and EXPLAIN SELECT are allowed, got {kind}")


def _parse(sql: str) -> list[duckdb.Statement]:
    try:
        return duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused("sql_error", f"SQL error: {exc}") from None


def _explained(text: str) -> str:
    """The type of the one statement an EXPLAIN wraps, or what keeps it from being known ("(unknown)")."""
    head = _EXPLAIN_HEAD.match(text, _COMMENTS.match(text).end())  # type: ignore[union-attr]
    try:
        inner = duckdb.extract_statements(text[head.end() :]) if head else []
    except duckdb.Error:
        inner = []
    return inner[0].type.name if len(inner) == 1 else "(unknown)"


TRUNCATED = b"voltbus.truncated_to"
"""Schema metadata key of a result cut at the row limit (its value: the rows kept)."""


def query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    limits: Limits,
    params: dict[str, object] | None = None,
    truncate: bool = False,
    running: set[duckdb.DuckDBPyConnection] | None = None,
    timer: bool = True,
) -> pa.Table:
    """Run a read-only query on its own cursor, in a READ ONLY transaction rolled back at the end; the last
    statement's rows.

    ``params`` bind ``$name`` placeholders. At most ``max_rows + 1`` rows are ever read: a longer result is refused
    (QueryRefused ``too_many_rows``), or with ``truncate`` cut to ``max_rows`` rows and marked in its schema metadata
    (``truncated_to``). An answer over ``max_bytes`` is refused (``too_large``); a query still running after
    ``timeout_s`` is interrupted (``timeout``) by a timer thread, or without ``timer`` by the caller (through
    ``running``, which holds the cursor while it runs: a thread per query costs more than a small query)."""
    check_read_only(sql)
    cursor = con.cursor()
    deadline = threading.Timer(limits.timeout_s, cursor.interrupt) if timer else None
    if running is not None:
        running.add(cursor)
    try:
        cursor.execute("BEGIN TRANSACTION READ ONLY")
        if deadline is not None:
            deadline.start()
        relation = cursor.sql(sql, params=params) if params else cursor.sql(sql)
        table = _first_rows(relation, limits) if relation is not None else pa.table({})
    except duckdb.InterruptException:
        raise QueryRefused(
            "timeout", f"the query ran past {limits.timeout_s:g} s and was interrupted (projector.sql_timeout_s)"
        ) from None
    except duckdb.Error as exc:
        raise QueryRefused("sql_error", f"SQL error: {exc}") from None
    finally:
        if deadline is not None:
            deadline.cancel()
        if running is not None:
            running.discard(cursor)
        cursor.close()  # the transaction ends unapplied: nothing it did, if anything, is kept
    if table.num_rows <= limits.max_rows:
        return table
    if not truncate:
        raise QueryRefused(
            "too_many_rows", f"the result has more than {limits.max_rows} rows (projector.max_rows): add a LIMIT"
        )
    metadata = {**(table.schema.metadata or {}), TRUNCATED: str(limits.max_rows).encode()}
    return table.slice(0, limits.max_rows).replace_schema_metadata(metadata)


def _first_rows(relation: duckdb.DuckDBPyRelation, limits: Limits) -> pa.Table:
    """The first ``max_rows + 1`` rows of ``relation``, reading no further (bounded memory)."""
    count = limits.max_rows + 1
    reader = relation.to_arrow_reader(min(count, BATCH_ROWS))
    batches, rows, size = [], 0, 0
    for batch in reader:
        batches.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if size > limits.max_bytes:
            raise QueryRefused(
                "too_large",
                f"the result is larger than {limits.max_bytes} bytes (projector.max_result_bytes):"
                " select fewer columns or rows",
            )
        if rows >= count:
            break
    return pa.Table.from_batches(batches, schema=reader.schema).slice(0, count)


def truncated_to(table: pa.Table) -> int | None:
    """The row limit a result was cut at, or None when it is whole."""
    value = (table.schema.metadata or {}).get(TRUNCATED)
    return int(value) if value is not None else None


def limits_of(cfg: ProjectorSettings) -> Limits:
    """The query limits a projector's settings give."""
    return Limits(cfg.max_rows, cfg.max_result_bytes, cfg.sql_timeout_s)
