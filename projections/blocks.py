"""Loads the ``-- name:`` blocks of the projection SQL files: each file's ``schema`` plus one block per
event tag (or derived row kind) it consumes. The first comment line of a block says what it does."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa

SQL_DIR = Path(__file__).parent
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.M)


class Block(msgspec.Struct, frozen=True, kw_only=True):
    """One named SQL block."""

    file: str
    name: str
    doc: str
    sql: str


def parse(text: str, file: str) -> list[Block]:
    """The blocks of one SQL file.

    >>> text = "-- name: schema\\n-- Make.\\nCREATE TABLE t (a INT);\\n-- name: X\\n-- Add.\\nSELECT 1;"
    >>> [(b.name, b.doc, b.sql) for b in parse(text, "f")]
    [('schema', 'Make.', 'CREATE TABLE t (a INT);'), ('X', 'Add.', 'SELECT 1;')]
    """
    parts = _NAME.split(text)
    blocks = []
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip().splitlines()
        doc = lines[0].removeprefix("--").strip() if lines and lines[0].startswith("--") else ""
        blocks.append(Block(file=file, name=name, doc=doc, sql="\n".join(lines[1:] if doc else lines).strip()))
    return blocks


def load(directory: Path = SQL_DIR) -> tuple[list[Block], dict[str, Block]]:
    """Every file's schema blocks (in file order) and every other block by name (names are unique)."""
    schemas: list[Block] = []
    named: dict[str, Block] = {}
    for path in sorted(directory.glob("*.sql")):
        for block in parse(path.read_text(), path.name):
            if block.name == "schema":
                schemas.append(block)
            elif block.name in named:
                raise ValueError(f"block {block.name!r} is defined twice ({named[block.name].file}, {path.name})")
            else:
                named[block.name] = block
    return schemas, named


def run(con: duckdb.DuckDBPyConnection, sql: str, batch: pa.Table) -> None:
    """Run a block's SQL over ``batch``, the Arrow table the SQL reads as ``batch``.

    The table is registered as a view of ``con`` alone (other connections, the SQL endpoint's included, never see
    it). DuckDB's cheaper replacement scan of a Python variable counts as external access, which the projector's
    database refuses (``SAFETY``, safety.py), so the table is named explicitly; registering again replaces
    it. A table of the schema named ``batch`` would be shadowed, so none is (tests/projections/test_sql_files.py)."""
    con.register("batch", batch)
    con.execute(sql)
