"""What a projection must hold, and a digest of each table: a file missing a table is rebuilt from the log when
it is opened (never given the table back empty), and ``voltbus verify`` compares the digests of a projection with
those of a rebuild from the log at the same positions."""

from __future__ import annotations

import functools

import duckdb

from .blocks import SQL_DIR, load, parse

_CATALOG = {b.name: b.sql for b in parse((SQL_DIR / "queries" / "catalog.sql").read_text(), "catalog.sql")}


@functools.cache
def expected_tables() -> tuple[str, ...]:
    """Every table the schema blocks create, by name."""
    with duckdb.connect(":memory:") as con:
        for block in load()[0]:
            con.execute(block.sql)
        return tuple(name for (name,) in con.execute(_CATALOG["tables"]).fetchall())


def missing_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables a projection should have and ``con``'s database lacks."""
    present = {name for (name,) in con.execute(_CATALOG["tables"]).fetchall()}
    return [name for name in expected_tables() if name not in present]


def digests_sql() -> str:
    """One query, so one snapshot: each table's row count and an order-free digest of its rows (a sum of row
    hashes, so that two equal rows do not cancel out), with the positions it was taken at in ``checkpoints``."""
    parts = [
        f"SELECT '{name}' AS name, count(*) AS rows, coalesce(sum(hash(t)), 0)::VARCHAR AS digest FROM \"{name}\" t"
        for name in expected_tables()
    ]
    return "\n UNION ALL ".join(parts) + "\nORDER BY name"


def differences(live: dict[str, tuple[int, str]], rebuilt: dict[str, tuple[int, str]]) -> list[str]:
    """A line per table whose rows differ (or is missing on one side).

    >>> differences({"a": (1, "9"), "b": (2, "7")}, {"a": (1, "9"), "b": (2, "8")})
    ['b: 2 rows, digest 7; the log gives 2 rows, digest 8']
    """
    lines = []
    for name in sorted(live.keys() | rebuilt.keys()):
        ours, theirs = live.get(name), rebuilt.get(name)
        if ours != theirs:
            have = f"{ours[0]} rows, digest {ours[1]}" if ours else "missing"
            want = f"{theirs[0]} rows, digest {theirs[1]}" if theirs else "no such table"
            lines.append(f"{name}: {have}; the log gives {want}")
    return lines
