"""``voltbus verify``: does a projection (the running projector's, or a file) equal the log? Each table's digest
against that of a rebuild from the log to the same positions, made in a temporary file."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path

import duckdb

from voltbus.projections import integrity
from voltbus.schemas.errors import VoltbusError
from voltbus.services.eventlog import EventLog
from voltbus.services.settings import Settings

from .client import rebuild_into, run_sql
from .follow import ends_at
from .projector import STREAMS, Projector

Digests = dict[str, tuple[int, str]]


def live_digests(settings: Settings, db: Path | None, min_seq: dict[str, int]) -> tuple[Digests, dict[str, int]]:
    """The digests of ``db``, or of the running projector's database once it has applied ``min_seq`` (training rows
    of attempts that waited for their telemetry included), and the positions they were taken at."""
    sql = _with_positions(integrity.digests_sql())
    rows = run_sql(settings, sql, db, min_seq=None if db else min_seq).to_pylist()
    positions = {r["name"][1:]: int(r["rows"]) for r in rows if r["name"].startswith("@")}
    return {r["name"]: (int(r["rows"]), r["digest"]) for r in rows if not r["name"].startswith("@")}, positions


def _with_positions(sql: str) -> str:
    """``sql`` (the digests) with the checkpoints of the same snapshot, as rows named ``@<stream>``."""
    body, order = sql.rsplit("ORDER BY", 1)
    return f"{body} UNION ALL SELECT '@' || stream AS name, seq AS rows, '' AS digest FROM checkpoints ORDER BY{order}"


def digests(con: duckdb.DuckDBPyConnection) -> Digests:
    """Every table's row count and digest."""
    return {name: (int(rows), digest) for name, rows, digest in con.execute(integrity.digests_sql()).fetchall()}


async def verify(settings: Settings, db: Path | None, say: Callable[[str], None]) -> list[str]:
    """The tables of the projection that differ from the log's, one line each (none: it equals the log)."""
    log_ = await EventLog.connect(settings.nats, name="voltbus-verify")
    try:
        live, positions = await asyncio.to_thread(live_digests, settings, db, await ends_at(log_))
        ends = {stream: positions.get(stream, 0) for stream in STREAMS}
        with tempfile.TemporaryDirectory(prefix="voltbus-verify-") as tmp:
            projector = Projector(Path(tmp) / "log.duckdb", defer_training=True)
            try:
                await rebuild_into(settings, projector, log_, ends, say, "verify", 1.0)
                rebuilt = digests(projector.con)
            finally:
                projector.close()
    finally:
        await log_.close()
    return integrity.differences(live, rebuilt)


def verify_sync(settings: Settings, db: Path | None, say: Callable[[str], None]) -> None:
    """``verify`` for the command line: a line per table that differs, and exit 1 (ProjectionDiffers) if any does."""
    different = asyncio.run(verify(settings, db, say))
    for line in different:
        say(f"differs: {line}")
    if different:
        raise ProjectionDiffers(f"{len(different)} tables of the projection differ from the log")
    say(f"verify: all {len(integrity.expected_tables())} tables equal a rebuild from the log")


class ProjectionDiffers(VoltbusError):
    """A projection whose tables are not what the log gives."""
