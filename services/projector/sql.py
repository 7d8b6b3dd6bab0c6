"""Read-only SQL against the projector's database: statement checks and Arrow results."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from voltbus.schemas.errors import InvalidCommand

READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def check_read_only(sql: str) -> None:
    """Refuse anything but SELECT / EXPLAIN, naming what was refused.

    >>> check_read_only("SELECT 1; EXPLAIN SELECT 2")
    >>> check_read_only("DELETE FROM rollouts")
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.InvalidCommand: read-only: only SELECT and EXPLAIN queries are allowed, got DELETE
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise InvalidCommand(f"SQL error: {exc}") from None
    if not statements:
        raise InvalidCommand("empty query")
    for statement in statements:
        if statement.type not in READ_ONLY:
            raise InvalidCommand(f"read-only: only SELECT and EXPLAIN queries are allowed, got {statement.type.name}")


TRUNCATED = b"voltbus.truncated_to"
"""Schema metadata key of a result cut at the row limit (its value: the rows kept)."""


def query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    max_rows: int,
    params: dict[str, object] | None = None,
    truncate: bool = False,
) -> pa.Table:
    """Run a read-only query on its own cursor (a committed snapshot); the last statement's rows.

    ``params`` bind ``$name`` placeholders. At most ``max_rows + 1`` rows are ever read: a longer
    result is refused (InvalidCommand), or with ``truncate`` cut to ``max_rows`` rows and marked in
    its schema metadata (``truncated_to``)."""
    check_read_only(sql)
    cursor = con.cursor()
    try:
        relation = cursor.sql(sql, params=params) if params else cursor.sql(sql)
        table = _first_rows(relation, max_rows + 1) if relation is not None else pa.table({})
    except duckdb.Error as exc:
        raise InvalidCommand(f"SQL error: {exc}") from None
    finally:
        cursor.close()
    if table.num_rows <= max_rows:
        return table
    if not truncate:
        raise InvalidCommand(f"the result has more than {max_rows} rows (projector.max_rows): add a LIMIT")
    metadata = {**(table.schema.metadata or {}), TRUNCATED: str(max_rows).encode()}
    return table.slice(0, max_rows).replace_schema_metadata(metadata)


def _first_rows(relation: duckdb.DuckDBPyRelation, count: int) -> pa.Table:
    """The first ``count`` rows of ``relation``, reading no further (bounded memory)."""
    reader = relation.to_arrow_reader(min(count, 10_000))
    batches, rows = [], 0
    for batch in reader:
        batches.append(batch)
        rows += batch.num_rows
        if rows >= count:
            break
    return pa.Table.from_batches(batches, schema=reader.schema).slice(0, count)


def truncated_to(table: pa.Table) -> int | None:
    """The row limit a result was cut at, or None when it is whole."""
    value = (table.schema.metadata or {}).get(TRUNCATED)
    return int(value) if value is not None else None
