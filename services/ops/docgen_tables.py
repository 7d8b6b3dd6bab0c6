"""The generated table reference (``docs/reference/tables.md``): every table and view of a projection
database with its DuckDB column types, read from a database the ``schema`` blocks of ``projections/*.sql``
create in memory. What each column means is in ``docs/projections.md``; this page is the types, in one place.
"""

from __future__ import annotations

import duckdb

from voltbus.projections import blocks
from voltbus.projections.blocks import SQL_DIR, parse

_SQL = {b.name: b.sql for b in parse((SQL_DIR / "queries" / "catalog.sql").read_text(), "catalog.sql")}

INTRO = [
    "# Projection tables",
    "",
    "Every table and view of a projection database (the projector's DuckDB file, a `voltbus replay` or a",
    "`voltbus export`), with the DuckDB type of each column, generated from the `schema` blocks of",
    "`projections/*.sql`. What each table holds and what its columns mean: [projections.md](../projections.md#tables).",
    "`key`: part of the table's primary key; `null`: whether the column may be NULL.",
    "",
]


def _relations(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(_SQL["relations"]).fetchall()}


def _keys(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {c for r in con.execute(_SQL["keys"], {"name": table}).fetchall() for c in r[0]}


def _table(con: duckdb.DuckDBPyConnection, name: str, file: str) -> list[str]:
    kind = con.execute(_SQL["kind"], {"name": name}).fetchone()
    view = kind is not None and kind[0] == "VIEW"
    columns = con.execute(_SQL["columns"], {"name": name}).fetchall()
    keys = _keys(con, name)
    lines = [f"## `{name}`", "", f"{'View' if view else 'Table'}, `projections/{file}`.", ""]
    lines += ["| column | type | key | null |", "|---|---|---|---|"]
    for column, type_, nullable in columns:
        key, null = "yes" if column in keys else "", "yes" if nullable == "YES" else ""
        lines.append(f"| `{column}` | `{type_}` | {key} | {null} |")
    return [*lines, ""]


def tables_markdown(header: str) -> str:
    """Every projection table and view, in the order the schema blocks create them."""
    schemas, _ = blocks.load()
    con = duckdb.connect(":memory:")
    lines = [header + INTRO[0], *INTRO[1:]]
    try:
        made: list[tuple[str, str]] = []
        for block in schemas:
            before = _relations(con)
            con.execute(block.sql)
            made += [(name, block.file) for name in sorted(_relations(con) - before)]
        lines += ["| table | file |", "|---|---|"]
        lines += [f"| [`{name}`](#{name}) | `projections/{file}` |" for name, file in made]
        lines.append("")
        for name, file in made:
            lines += _table(con, name, file)
    finally:
        con.close()
    return "\n".join(lines).rstrip() + "\n"
