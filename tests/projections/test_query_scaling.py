"""The store's queries read what they are about, not every row the projection ever got (issue 25): DuckDB's own
account (``EXPLAIN (ANALYZE, FORMAT json)``) of the rows each scan read, on a projection of 100,000 rollouts with
random ids whose spans fill several row groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from voltbus.projections import blocks
from voltbus.services.clients.store.finished import NEAR_SPANS
from voltbus.services.clients.store.queries import _QUERIES, _filters, order_clause
from voltbus.services.projector.projector import limits

ROLLOUTS = 100_000
SPANS_EACH = 4
"""Spans per rollout, stored together in stream order (as a runner's flush stores them): 400,000 span rows."""
ROW_GROUP = 122_880
"""DuckDB's rows per row group: what it skips or reads at once."""


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    path: Path = tmp_path_factory.mktemp("scaling") / "projection.duckdb"
    con = duckdb.connect(str(path), config=limits())  # the projector's settings
    for block in blocks.load()[0]:
        con.execute(block.sql)
    rid, aid = "'ro-' || substr(md5((i // 4)::VARCHAR), 1, 12)", "'at-' || substr(md5((i // 4)::VARCHAR), 13, 8)"
    con.execute(
        f"INSERT INTO spans BY NAME SELECT i AS seq, 'e' || i AS event_id, {rid} AS rollout_id, {aid} AS attempt_id,"
        " i % 4 + 1 AS sequence_id, 't' || i AS trace_id, 's' || i AS span_id, 'n' AS name, 0 AS seq_index"
        f" FROM range({ROLLOUTS * SPANS_EACH}) t(i)"
    )
    con.execute(
        "INSERT INTO attempt_activity SELECT rollout_id, attempt_id, 0, count(*), min(seq), max(seq) FROM spans"
        " GROUP BY ALL ORDER BY min(seq)"
    )
    con.execute(
        "INSERT INTO rollouts BY NAME SELECT rollout_id, 'succeeded' AS status, first_seq AS start_time,"
        " 1 AS attempt_count, attempt_id AS latest_attempt_id, last_seq FROM attempt_activity ORDER BY first_seq"
    )
    con.execute("INSERT INTO rollout_states SELECT rollout_id, '{}'::BLOB FROM rollouts ORDER BY start_time")
    con.execute(
        "INSERT INTO attempts BY NAME SELECT rollout_id, attempt_id, 1 AS sequence_id, 'running' AS status,"
        " 0.0 AS start_time, last_seq FROM attempt_activity ORDER BY first_seq"
    )
    con.execute("CHECKPOINT")
    return con


def scans(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> dict[str, int]:
    """Rows each table scan of ``sql`` read (summed per table), as DuckDB's profile reports them."""
    [(_, text)] = con.execute("EXPLAIN (ANALYZE, FORMAT json) " + sql, params).fetchall()
    read: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        if node.get("type") == "TABLE_SCAN":
            info = node["extra_info"]
            table = info.get("Table", info.get("Function", "?")).rsplit(".", 1)[-1]  # an Arrow scan has no table
            read[table] = read.get(table, 0) + int(node.get("rows_scanned", 0))
        for child in node.get("children", []):
            walk(child)

    for node in json.loads(text)["operator"]:
        walk(node)
    return read


def ids(con: duckdb.DuckDBPyConnection, first: int, n: int) -> list[str]:
    """``n`` rollouts in stream order from the ``first``-th (a batch that finished together)."""
    found = con.execute("SELECT rollout_id FROM rollouts ORDER BY start_time LIMIT ? OFFSET ?", [n, first])
    return [r[0] for r in found.fetchall()]


def test_query_spans_reads_the_stream_range_of_its_rollout(con: duckdb.DuckDBPyConnection) -> None:
    [rid] = ids(con, ROLLOUTS // 2, 1)
    sql = _QUERIES["query_spans"].replace("{order}", order_clause("query_spans", None, "asc"))
    params = _filters(
        "and",
        **dict.fromkeys(["trace_id", "trace_id_contains", "span_id", "span_id_contains"]),
        **dict.fromkeys(["parent_id", "parent_id_contains", "name", "name_contains"]),
    ) | {"rollout_id": rid, "attempt_scope": "latest", "attempt_id": "", "limit": None, "offset": 0}
    rows = con.execute(sql, params).fetchall()
    assert len(rows) == SPANS_EACH
    read = scans(con, sql, params)
    assert read["spans"] <= ROW_GROUP, read  # one row group, not the table's 400,000 rows
    assert read["attempt_activity"] < 100 and read["rollouts"] < 100, read  # by their indexes


def test_a_poll_of_rollouts_in_flight_reads_them_by_index(con: duckdb.DuckDBPyConnection) -> None:
    wanted = ids(con, 1000, 128)
    sql = _QUERIES["query_rollouts"].replace("{order}", order_clause("query_rollouts", None, "asc"))
    params = _filters("and", status_in=None, rollout_id_in=wanted, rollout_id_contains=None)
    params |= {"limit": None, "offset": 0}
    assert len(con.execute(sql, params).fetchall()) == 128
    read = scans(con, sql, params)
    assert read["rollouts"] <= 1024 and read["rollout_states"] <= 1024, read


def test_or_logic_still_reads_every_rollout(con: duckdb.DuckDBPyConnection) -> None:
    """With ``or`` the id list is not a filter of its own: every rollout is a candidate (and found)."""
    sql = _QUERIES["query_rollouts"].replace("{order}", order_clause("query_rollouts", None, "asc"))
    params = _filters("or", status_in=["succeeded"], rollout_id_in=ids(con, 0, 2), rollout_id_contains=None)
    params |= {"limit": 5, "offset": 0}
    rows = con.execute(sql, params).fetchall()
    assert len(rows) == 5 and rows[0][-1] == ROLLOUTS  # the page, and the total: every rollout matched


def rollouts_page(logic: str = "and", limit: int = -1, offset: int = 0, **given: Any) -> dict[str, Any]:
    """``query_rollouts``' parameters, as the store client binds them."""
    filters = dict.fromkeys(["status_in", "rollout_id_in", "rollout_id_contains"]) | given
    return _filters(logic, **filters) | {"limit": None if limit < 0 else limit, "offset": offset}


def test_a_page_of_ended_rollouts_reads_only_its_states(con: duckdb.DuckDBPyConnection) -> None:
    """A status filter matches every rollout: the page of 64 reads their 64 states, not all 100,000 (the state was
    joined to every matching row, which a window then numbered: 8.3 s of CPU at 1,000,000 rollouts)."""
    sql = _QUERIES["query_rollouts"].replace("{order}", order_clause("query_rollouts", "end_time", "desc"))
    params = rollouts_page(status_in=["succeeded"], limit=64, offset=100)
    rows = con.execute(sql, params).fetchall()
    assert len(rows) == 64 and rows[0][-1] == ROLLOUTS
    read = scans(con, sql, params)
    assert read["rollout_states"] <= 2048, read


BEFORE = """
WITH picked AS (
    SELECT * FROM rollouts
    WHERE NOT ($use_rollout_id_in AND $logic = 'and') OR list_contains($rollout_id_in, rollout_id)
),

picked_states AS (
    SELECT * FROM rollout_states
    WHERE NOT ($use_rollout_id_in AND $logic = 'and') OR list_contains($rollout_id_in, rollout_id)
),

rollouts_with_state AS (
    SELECT picked.*, picked_states.state
    FROM picked
    JOIN picked_states USING (rollout_id)
),

conditions AS (
    SELECT
        *,
        CASE WHEN $use_status_in THEN list_contains($status_in, status) END AS by_status,
        CASE WHEN $use_rollout_id_in THEN list_contains($rollout_id_in, rollout_id) END AS by_ids,
        CASE WHEN $use_rollout_id_contains THEN contains(rollout_id, $rollout_id_contains) END AS by_contains
    FROM rollouts_with_state
),

matching AS (
    SELECT * FROM conditions
    WHERE CASE
        WHEN $logic = 'or'
            THEN $no_filter OR coalesce(by_status, FALSE) OR coalesce(by_ids, FALSE) OR coalesce(by_contains, FALSE)
        ELSE coalesce(by_status, TRUE) AND coalesce(by_ids, TRUE) AND coalesce(by_contains, TRUE)
    END
),

page AS (
    SELECT state, last_seq, row_number() OVER (ORDER BY {order}) AS page_position FROM matching
    ORDER BY page_position
    LIMIT $limit OFFSET $offset
),

totals AS (
    SELECT count(*) AS total FROM matching
),

final AS (
    SELECT page.*, totals.total FROM totals LEFT JOIN page ON TRUE
    ORDER BY page.page_position
)

SELECT * FROM final;
"""
"""``query_rollouts`` as it was: every matching rollout joined with its state and numbered by a window."""


@pytest.mark.parametrize(
    ("sort", "given"),
    [
        (("start_time", "asc"), {"status_in": ["succeeded"], "limit": 64}),
        (("end_time", "desc"), {"status_in": ["failed", "cancelled"], "limit": 10, "offset": 5}),
        (("attempt_count", "asc"), {"limit": 64, "offset": 1000}),
        (("mode", "desc"), {"rollout_id_contains": "ro-a"}),
        (("end_time", "asc"), {"logic": "or", "status_in": ["failed"], "rollout_id_contains": "ro-ff", "limit": 50}),
        (("status", "asc"), {"status_in": ["failed"], "limit": 5, "offset": 10**6}),
        (("rollout_id", "desc"), {"limit": 0}),
        (("start_time", "asc"), {"logic": "or", "limit": 3}),
    ],
)
def test_the_page_and_total_are_those_of_a_window_over_every_match(
    con: duckdb.DuckDBPyConnection, sort: tuple[str, str], given: dict[str, Any]
) -> None:
    """Varied statuses, modes, end times (with ties and nulls) and states: the same rows, order and total."""
    order = order_clause("query_rollouts", *sort)
    con.begin()
    try:
        h = "(hash(rollout_id) % 1000)::INTEGER"  # a number per rollout, 0 to 999
        con.execute(
            f"UPDATE rollouts SET status = ['succeeded', 'failed', 'cancelled'][{h} % 3 + 1],"
            f" mode = CASE WHEN {h} % 5 = 0 THEN NULL ELSE 'm' || {h} % 4 END,"
            f" end_time = CASE WHEN {h} % 7 = 0 THEN NULL ELSE {h} END, attempt_count = {h} % 3 + 1"
        )
        con.execute("UPDATE rollout_states SET state = rollout_id::BLOB")
        for wanted in (None, ids(con, 5000, 300)):  # and each with an id list
            params = rollouts_page(**given, rollout_id_in=wanted)
            got = con.execute(_QUERIES["query_rollouts"].replace("{order}", order), params).fetchall()
            assert got == con.execute(BEFORE.replace("{order}", order), params).fetchall()
            assert got[0][-1] > 0
    finally:
        con.rollback()


def test_spans_of_a_batch_finished_together_are_read_from_its_range(con: duckdb.DuckDBPyConnection) -> None:
    wanted = ids(con, 70_000, 128)
    params = {"rollout_ids": wanted, "anchor": wanted[0], "near": NEAR_SPANS}
    rows = con.execute(_QUERIES["spans_of_finished"], params).fetchall()
    assert len(rows) == 128 * SPANS_EACH
    read = scans(con, _QUERIES["spans_of_finished"], params)
    assert read["spans"] <= 2 * ROW_GROUP and read["rollouts"] <= 1024, read


def test_old_rollouts_in_a_batch_are_deferred_not_read_with_the_whole_table(con: duckdb.DuckDBPyConnection) -> None:
    """A client that listed old rollouts (e.g. ``query_rollouts(status_in=["succeeded"])``) saw them finished: a fetch
    of new ones' spans leaves them out instead of reading every span stored between them."""
    new, old = ids(con, 90_000, 100), ids(con, 0, 20) + ids(con, 40_000, 8)
    params = {"rollout_ids": [*new[:1], *old, *new[1:]], "anchor": new[0], "near": NEAR_SPANS}
    rows = fetched(con, params)
    assert sorted(rid for rid, deferred in rows if deferred) == sorted(old)
    assert sorted({rid for rid, deferred in rows if not deferred}) == sorted(new)
    assert len([rid for rid, deferred in rows if not deferred]) == 100 * SPANS_EACH
    read = scans(con, _QUERIES["spans_of_finished"], params)
    assert read["spans"] <= 2 * ROW_GROUP, read  # 400,000 when the range spanned the old ones
    anchored_old = params | {"anchor": old[0]}  # asked about an old one: the new ones wait instead
    assert {rid for rid, deferred in fetched(con, anchored_old) if deferred} == set(new) | set(old[20:])


def fetched(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> list[tuple[str, bool]]:
    """(rollout id, deferred) of each row ``spans_of_finished`` answers."""
    sql = _QUERIES["spans_of_finished"].rstrip().rstrip(";")
    return [(r[0], r[1]) for r in con.execute(f"SELECT rollout_id, deferred FROM ({sql})", params).fetchall()]


def statements(block: str) -> list[str]:
    """The statements of a projection block, in order."""
    return [s for s in blocks.load()[1][block].sql.split(";\n") if s.strip(" ;\n")]


@pytest.mark.parametrize("n", [20, 150])
@pytest.mark.parametrize("block", ["attempt_rows", "activity_rows"])
def test_the_upsert_of_attempts_reads_their_rows_by_index(con: duckdb.DuckDBPyConnection, block: str, n: int) -> None:
    """Writing 2n + 1 attempts (n stored, n new, and a stored attempt id under another rollout) reads about those
    rows, not the table's 100,000: DuckDB's INSERT OR REPLACE / ON CONFLICT runs as a MERGE whose join on the
    two-column key scanned every row (58-115 ms for 40 attempts at 1,000,000), and a join of more than 50 keys read
    every row under DuckDB's default ``dynamic_or_filter_threshold``. The rows end as the upsert leaves them."""
    table = "attempts" if block == "attempt_rows" else "attempt_activity"
    con.begin()
    try:
        order = "last_seq" if table == "attempts" else "first_seq"
        cursor = con.execute(f"SELECT * FROM {table} ORDER BY {order} LIMIT {n} OFFSET 5000")
        names = [d[0] for d in cursor.description]
        stored = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        fresh = [dict(stored[0], rollout_id=f"ro-new{i}", attempt_id=f"at-new{i}") for i in range(n)]
        twin = dict(stored[1], rollout_id="ro-twin")  # the attempt id of another rollout's attempt
        if table == "attempts":
            batch = [dict(r, status="succeeded") for r in stored + fresh + [twin]]
        else:
            batch = [dict(r, events=3, last_seq=10**9) for r in stored + fresh + [twin]]
        before = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        con.register("batch", pa.Table.from_pylist(batch))
        read: dict[str, int] = {}
        for sql in statements(block):
            for name, rows in scans(con, sql, {}).items():
                read[name] = read.get(name, 0) + rows
        assert read.get(table, 0) <= 1024, read  # by the attempt id's index, not 100,000 rows
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == before + n + 1
        keys = [(r["rollout_id"], r["attempt_id"]) for r in batch] + [(stored[1]["rollout_id"], "none")]
        got = {
            (r[0], r[1]): r[2]
            for r in con.execute(
                f"SELECT rollout_id, attempt_id, {'status' if table == 'attempts' else 'events'} FROM {table}"
            ).fetchall()
            if r[1] in {k[1] for k in keys}
        }
        if table == "attempts":
            assert all(got[(r["rollout_id"], r["attempt_id"])] == "succeeded" for r in batch)
        else:
            for r in stored:
                assert got[(r["rollout_id"], r["attempt_id"])] == r["events"] + 3
            assert all(got[(r["rollout_id"], r["attempt_id"])] == 3 for r in fresh + [twin])
        assert len(got) == len(batch)  # the twin is a row of its own; the other rollout's attempt is still there
    finally:
        con.rollback()


@pytest.mark.parametrize("block", ["rollout_rows", "state_rows"])
def test_a_batch_of_rollouts_past_fifty_is_written_by_index(con: duckdb.DuckDBPyConnection, block: str) -> None:
    """150 stored and 150 new rollouts replaced in one batch (a projector behind the log gets such batches) read
    about those rows: under DuckDB's default ``dynamic_or_filter_threshold`` (50) the MERGE read all 100,000."""
    table = "rollouts" if block == "rollout_rows" else "rollout_states"
    con.begin()
    try:
        cursor = con.execute(f"SELECT * FROM {table} LIMIT 150 OFFSET 5000")
        names = [d[0] for d in cursor.description]
        stored = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        batch = stored + [dict(stored[0], rollout_id=f"ro-new{i}") for i in range(150)]
        con.register("batch", pa.Table.from_pylist(batch))
        read = scans(con, statements(block)[0], {})
        assert read.get(table, 0) <= 1024, read
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == ROLLOUTS + 150
    finally:
        con.rollback()


@pytest.mark.parametrize(
    ("block", "key"),
    [("training_done", "attempt_ids"), ("training_rollouts", "rollout_ids"), ("states_of", "rollout_ids")],
)
def test_the_lookups_of_a_large_commit_read_by_index(con: duckdb.DuckDBPyConnection, block: str, key: str) -> None:
    """The training refresh's and the folds' lookups of 300 keys read about those rows: ``IN (SELECT unnest(...))``
    of more than 50 keys read the whole table (17-45 ms per lookup at 1,000,000 rollouts)."""
    column = key.removesuffix("s")
    wanted = [r[0] for r in con.execute(f"SELECT {column} FROM attempts LIMIT 300 OFFSET 7000").fetchall()]
    sql = blocks.load()[1][block].sql
    assert len(con.execute(sql, {key: wanted}).fetchall()) >= 300
    read = scans(con, sql, {key: wanted})
    assert sum(read.values()) <= 2048, read
