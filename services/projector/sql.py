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


def query(con: duckdb.DuckDBPyConnection, sql: str, max_rows: int, params: dict[str, object] | None = None) -> pa.Table:
    """Run a read-only query on its own cursor (a committed snapshot); the last statement's rows.

    ``params`` bind ``$name`` placeholders."""
    check_read_only(sql)
    cursor = con.cursor()
    try:
        relation = cursor.sql(sql, params=params) if params else cursor.sql(sql)
        table = relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as exc:
        raise InvalidCommand(f"SQL error: {exc}") from None
    finally:
        cursor.close()
    if table.num_rows > max_rows:
        raise InvalidCommand(f"the result has {table.num_rows} rows, over the {max_rows}-row limit: add a LIMIT")
    return table


def to_ipc(table: pa.Table) -> bytes:
    """An Arrow IPC stream of ``table``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """The table in an Arrow IPC stream."""
    return pa.ipc.open_stream(data).read_all()
