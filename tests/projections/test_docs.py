"""docs/projections.md documents every table and column the projection SQL creates."""

from __future__ import annotations

from pathlib import Path

import duckdb

from voltbus.projections import blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "projections.md"


def test_every_table_and_column_is_documented() -> None:
    con = duckdb.connect()
    schemas, _ = blocks.load()
    for block in schemas:
        con.execute(block.sql)
    text = DOC.read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    columns = con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
    missing = [f"{t}.{c}" for t, c in columns if t not in rows or f"`{c}`" not in rows[t]]
    assert missing == []
