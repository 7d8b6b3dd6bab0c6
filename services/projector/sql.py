"""Read-only SQL on a projection: which statements may run, and running them so that they can only read.

A query is checked with DuckDB's own parser (SELECT, or EXPLAIN of a SELECT), then run on a cursor of its own in a
READ ONLY transaction that is always rolled back, on a database that reaches no file, network or extension
(``projections.safety.SAFETY``); it is interrupted at its deadline and refused past its row or byte limit.
"""

from __future__ import annotations

import json
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


def check_read_only(sql: str, con: duckdb.DuckDBPyConnection) -> None:
    """Refuse anything but SELECT, or EXPLAIN (ANALYZE) of a SELECT, naming what was refused; ``con`` (any
    connection) parses each SELECT into its tree for the function checks.

    >>> con = duckdb.connect()
    >>> check_read_only("SELECT 1; EXPLAIN ANALYZE SELECT 2; /* c */ EXPLAIN (FORMAT json) FROM t", con)
    >>> check_read_only("DELETE FROM rollouts", con)
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.QueryRefused: read-only: only SELECT and EXPLAIN SELECT are allowed, got DELETE
    >>> check_read_only("EXPLAIN ANALYZE UPDATE rewards SET value = 100", con)
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.QueryRefused: read-only: only SELECT and EXPLAIN SELECT are allowed, got EXPLAIN UPDATE
    """
    if sql in _checked:
        return
    statements = _parse(sql)
    if not statements:
        raise QueryRefused("sql_error", "empty query")
    for statement in statements:
        kind, text = statement.type.name, statement.query
        if statement.type == _EXPLAIN:
            inner, text = _explained(statement.query)
            kind = f"EXPLAIN {inner}"
        if kind not in ("SELECT", "EXPLAIN SELECT"):
            raise QueryRefused("read_only", f"read-only: only SELECT and EXPLAIN SELECT are allowed, got {kind}")
        _check_tree(text, con)
    with _checked_lock:
        while len(_checked) >= CHECKED_KEPT:
            _checked.pop(next(iter(_checked)))
        _checked[sql] = None


CHECKED_KEPT = 256
"""Query texts found read-only, kept (oldest out first) so that a text asked again is not parsed and walked again: the
verdict depends on the text alone. A store client asks the same few texts (``query_spans`` per finished rollout), and
their check cost more than running them (~10 ms each; BENCHMARKS.md, "Agent Lightning's algorithm pattern")."""
_checked: dict[str, None] = {}
_checked_lock = threading.Lock()


def _check_tree(select: str, con: duckdb.DuckDBPyConnection) -> None:
    """Refuse a SELECT that holds a write (a query node outside ``QUERY_NODES``), or calls a table function outside
    ``TABLE_FUNCTIONS`` (checkpoints, logging switches, raw Arrow pointers, SQL in a string...) or a scalar function of
    ``SCALAR_DENIED``, anywhere in it.

    >>> _check_tree("SELECT * FROM range(3), (SELECT 1 FROM duckdb_tables())", duckdb.connect())
    >>> _check_tree("SELECT (SELECT count(*) FROM checkpoint())", duckdb.connect())
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.QueryRefused: read-only: table function checkpoint() is not allowed in a query
    """
    tree = json.loads(con.execute("SELECT json_serialize_sql($q)", {"q": select}).fetchone()[0])  # type: ignore[index]
    if tree.get("error"):
        raise QueryRefused("read_only", f"read-only: the query cannot be checked ({tree.get('error_message')})")
    for kind, name in _functions(tree):
        if kind == "node" and name not in QUERY_NODES:  # e.g. WITH x AS (DELETE ... RETURNING *) SELECT ...
            raise QueryRefused(
                "read_only", f"read-only: a {name.removesuffix('_QUERY_NODE')} is not allowed in a query"
            )
        if (kind == "table" and name not in TABLE_FUNCTIONS) or (kind == "scalar" and name in SCALAR_DENIED):
            raise QueryRefused("read_only", f"read-only: {kind} function {name}() is not allowed in a query")


def _functions(node: object) -> list[tuple[str, str]]:
    """Every (table or scalar, name) function call and ("node", type) query node in a serialized statement."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        if str(node.get("type", "")).endswith("_NODE"):
            found.append(("node", str(node["type"])))
        if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
            found.append(("table", str(node["function"].get("function_name"))))
            node = {k: v for k, v in node.items() if k != "function"} | {"arguments": node["function"].get("arguments")}
        elif "function_name" in node:
            found.append(("scalar", str(node["function_name"])))
        for value in node.values():
            found += _functions(value)
    elif isinstance(node, list):
        for value in node:
            found += _functions(value)
    return found


TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree", "summary"}
    | {"pragma_table_info", "pragma_show", "pragma_version", "pragma_database_size", "pragma_storage_info"}
    | {"pragma_metadata_info", "pragma_platform", "pragma_collations", "pragma_user_agent", "pg_timezone_names"}
    | {"icu_calendar_names", "test_all_types", "test_vector_types", "duckdb_columns", "duckdb_constraints"}
    | {"duckdb_databases", "duckdb_dependencies", "duckdb_functions", "duckdb_indexes", "duckdb_keywords"}
    | {"duckdb_memory", "duckdb_optimizers", "duckdb_schemas", "duckdb_sequences", "duckdb_settings"}
    | {"duckdb_tables", "duckdb_temporary_files", "duckdb_types", "duckdb_views", "duckdb_variables"}
)
"""The table functions a query may call: generators and the catalog. Every other one (file and URL readers,
which the database refuses anyway, ``checkpoint``, logging and profiling switches, ``query`` with SQL in a string,
scans of raw Arrow pointers) is refused before the query runs."""
QUERY_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
"""The query nodes of a read: any other (a DELETE, UPDATE or INSERT in a CTE) is refused."""
SCALAR_DENIED = frozenset({"setseed", "nextval", "json_execute_serialized_sql"})
"""Scalar functions with an effect beyond the query's answer."""


def _parse(sql: str) -> list[duckdb.Statement]:
    try:
        return duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused("sql_error", f"SQL error: {exc}") from None


def _explained(text: str) -> tuple[str, str]:
    """The type and text of the one statement an EXPLAIN wraps, or what keeps it from being known ("(unknown)")."""
    head = _EXPLAIN_HEAD.match(text, _COMMENTS.match(text).end())  # type: ignore[union-attr]
    try:
        inner = duckdb.extract_statements(text[head.end() :]) if head else []
    except duckdb.Error:
        inner = []
    return (inner[0].type.name, inner[0].query) if len(inner) == 1 else ("(unknown)", "")


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
    cursor = con.cursor()
    try:
        check_read_only(sql, cursor)
    except QueryRefused:
        cursor.close()
        raise
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
    except duckdb.OutOfMemoryException as exc:
        why = str(exc).splitlines()[0]
        raise QueryRefused(
            "out_of_memory", f"the query needs more memory than DuckDB has under projector.duckdb_memory_limit: {why}"
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
