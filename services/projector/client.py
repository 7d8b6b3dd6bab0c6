"""Clients of the projection: SQL over the projector's endpoint or on a file no one is writing,
Parquet export, and rebuilding a database from the log with progress."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import httpx
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet

from voltbus.projections.adapter import AdapterSettings
from voltbus.projections.ipc import from_ipc
from voltbus.projections.safety import SAFETY
from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.services.eventlog import EventLog
from voltbus.services.progress import Meter
from voltbus.services.settings import Settings

from . import rewind
from .follow import ends_at, project
from .forks import Forks, owned
from .projector import PROJECTION_VERSION, STREAMS, Projector, limits
from .sql import limits_of, query, truncated_to

INTERNAL = {"rollout_states"}
"""Tables that are the projector's own bookkeeping, not exported."""


class ProjectionUnavailable(VoltbusError):
    """Neither a running projector nor a readable database file answered."""


def open_read_only(db: Path, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a database no process is writing, that reaches no other file (``SAFETY``), with
    DuckDB's ``memory_limit`` (None: DuckDB's default)."""
    if not db.exists():
        raise ProjectionUnavailable(f"no database at {db}")
    try:
        return duckdb.connect(str(db), read_only=True, config=SAFETY | limits(memory_limit=memory_limit))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise ProjectionUnavailable(
                f"{db} is open by a running projector: query it through the projector (`voltbus sql` without --db)"
            ) from None
        raise


def run_sql(
    settings: Settings,
    sql: str,
    db: Path | None = None,
    params: dict[str, object] | None = None,
    truncate: bool = False,
    min_seq: dict[str, int] | None = None,
) -> pa.Table:
    """Rows of a read-only query (``$name`` placeholders bound from ``params``), from ``db`` if given, else from
    the running projector (once it applied ``min_seq``, if given). Past ``projector.max_rows`` rows: an error, or
    with ``truncate`` the first ``max_rows`` rows, marked (``sql.truncated_to``)."""
    if db is not None:
        with open_read_only(db, settings.projector.duckdb_memory_limit) as con:
            return query(con, sql, limits_of(settings.projector), params, truncate)
    url = settings.projector.url.rstrip("/") + "/sql"
    try:
        body = {"sql": sql, "params": params or {}, "truncate": truncate, "min_seq": min_seq or {}, "timeout": 50}
        response = httpx.post(url, json=body, headers=settings.projector.auth_headers, timeout=60)
    except httpx.TransportError as exc:
        raise ProjectionUnavailable(
            f"no projector answers at {url} ({exc}); start one with `voltbus projector`, or pass --db FILE"
        ) from None
    if response.status_code != 200:
        raise InvalidCommand(response.json().get("error", response.text))
    return from_ipc(response.content)


def render(table: pa.Table, fmt: str, out: Path | None = None) -> None:
    """Print ``table`` as text, csv or json lines, or write it as Parquet to ``out``."""
    if fmt == "parquet":
        if out is None:
            raise InvalidCommand("--format parquet needs --out FILE")
        pyarrow.parquet.write_table(table, out)
    elif fmt == "csv":
        pyarrow.csv.write_csv(table, out or sys.stdout.buffer)
    elif fmt == "json":
        import json

        text = "".join(json.dumps(row, default=str) + "\n" for row in table.to_pylist())
        out.write_text(text) if out else sys.stdout.write(text)
    else:
        duckdb.from_arrow(table).show(max_rows=100, max_width=200)
    if (cut := truncated_to(table)) is not None:
        print(f"truncated to {cut} rows (projector.max_rows): add a LIMIT to choose them", file=sys.stderr)


def interactive(settings: Settings, db: Path | None, say: Callable[[str], None]) -> None:
    """A prompt: one query per line, until ``.quit``, ``.exit`` or the end of the input (Ctrl-D); a query that
    fails prints its error and the prompt goes on."""
    say("read-only SQL on the projection; end with Ctrl-D or .quit")
    while True:
        try:
            line = input("voltbus> ").strip()
        except EOFError:
            return
        if line in (".quit", ".exit"):
            return
        if line:
            try:
                render(run_sql(settings, line, db, truncate=True), "table")
            except VoltbusError as exc:
                say(f"error: {exc}")


def export(settings: Settings, to: Path, db: Path | None, say: Callable[[str], None]) -> None:
    """Write every table as Parquet into ``to`` (from ``db``, or through the running projector)."""
    to.mkdir(parents=True, exist_ok=True)
    listing = run_sql(settings, "SELECT table_name, estimated_size FROM duckdb_tables()", db).to_pylist()
    sizes = {row["table_name"]: row["estimated_size"] or 0 for row in listing if row["table_name"] not in INTERNAL}
    meter = Meter("export", sum(sizes.values()), say, unit="rows")
    for name in sorted(sizes):
        rows = export_table(settings, name, to / f"{name}.parquet", db, meter)
        say(f"{name}: {rows} rows -> {to / (name + '.parquet')}")
    say(meter.summary(f"in {len(sizes)} tables -> {to}"))


def export_table(settings: Settings, name: str, path: Path, db: Path | None, meter: Meter) -> int:
    """Write one table as Parquet, in pages of at most ``projector.max_rows`` rows (so a table larger
    than one SQL answer may hold is exported whole); returns its row count."""
    page, written, writer = settings.projector.max_rows, 0, None
    while True:
        chunk = run_sql(settings, f'SELECT * FROM "{name}" ORDER BY ALL LIMIT {page} OFFSET {written}', db)
        if writer is None:
            writer = pyarrow.parquet.ParquetWriter(path, chunk.schema)
        writer.write_table(chunk)
        written += chunk.num_rows
        meter.add(chunk.num_rows)
        if chunk.num_rows < page:
            writer.close()
            return written


def parse_time(text: str) -> float:
    """Seconds since the epoch from a number or an ISO 8601 time (UTC when no zone is given)."""
    try:
        return float(text)
    except ValueError:
        stamp = dt.datetime.fromisoformat(text)
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)).timestamp()


async def rebuild(
    settings: Settings,
    db: Path,
    say: Callable[[str], None],
    to_seq: int | None = None,
    to_time: float | None = None,
    from_seq: int | None = None,
    adapter: AdapterSettings | None = None,
    label: str = "replay",
    every: float = 1.0,
    forks: Forks | None = None,
) -> dict[str, int]:
    """Build ``db`` from the log, up to a sequence or a time, printing rate and ETA (a line at most every
    ``every`` seconds); return the positions.

    ``from_seq``: go on with the projection ``db`` already holds, whose control checkpoint must be
    ``from_seq - 1`` (``continued``); 1 on a new file is a rebuild from the start. ``adapter``: the settings of
    the training tables (default ``AdapterSettings()``). ``forks``: the caller's readers' fork server (else the
    rebuild starts its own, when its settings allow readers, and stops it at its end)."""
    if to_seq is not None and to_time is not None:
        raise InvalidCommand("--to-seq and --to-time: give one of them")
    async with contextlib.AsyncExitStack() as stack:
        forks = await stack.enter_async_context(owned(forks, settings.projector.forks))  # before the bus: ~0.5 s
        log_ = await EventLog.connect(settings.nats, name=f"voltbus-{label}")
        stack.push_async_callback(log_.close)
        ends = await ends_at(log_, to_seq, to_time)
        going_on = from_seq is not None and await continued(log_, db, from_seq, ends)
        # a new file leaves its training tables for one pass at the end; one that goes on keeps them up as a
        # live projector does (telemetry of attempts that ended before its checkpoint makes their rows again)
        cfg = settings.projector
        projector = Projector(
            db,
            adapter,
            defer_training=not going_on,
            threads=cfg.duckdb_threads,
            memory_limit=cfg.duckdb_memory_limit,
            checkpoint_threshold=cfg.duckdb_checkpoint_threshold,
        )
        stack.callback(projector.close)
        return await rebuild_into(settings, projector, log_, ends, say, label, every, forks)


async def rebuild_into(
    settings: Settings,
    projector: Projector,
    log_: EventLog,
    ends: dict[str, int],
    say: Callable[[str], None],
    label: str,
    every: float,
    forks: Forks | None = None,
) -> dict[str, int]:
    """Apply the log from ``projector``'s checkpoints to ``ends`` with progress, then the deferred training pass
    (``forks``: the readers' fork server, see ``follow.project``)."""
    at = dict(projector.positions)
    meter = Meter(label, sum(max(0, ends[s] - at[s]) for s in ends), say, unit="events", every=every)

    def progress(stream: str, position: int, end: int) -> None:
        meter.add(projector.applied - meter.done)

    db, spans = projector.path, f"spans {at['spans'] + 1}..{ends['spans']}"
    say(f"{label}: control {at['control'] + 1}..{ends['control']} and {spans} into {db}")
    await project(projector, log_, ends=ends, progress=progress, forks=forks, **settings.projector.feeding)
    meter.done = projector.applied
    positions = dict(projector.positions)
    say(meter.summary(f"rebuilt {db}; control seq {positions['control']}, spans seq {positions['spans']}"))
    await asyncio.to_thread(training_pass, projector, label, say)
    return positions


async def continued(log_: EventLog, db: Path, from_seq: int, ends: dict[str, int]) -> bool:
    """Whether ``db`` holds a projection to go on with from control sequence ``from_seq`` (False: a new file,
    ``from_seq`` 1). Anything else is refused before the file is touched: a missing file past 1, one a projector
    holds, another projection version, a control checkpoint other than ``from_seq - 1``, checkpoints the log no
    longer holds as applied (a copy of another log), or checkpoints past ``ends``."""
    if from_seq < 1:
        raise InvalidCommand(f"--from-seq {from_seq}: sequences start at 1")
    stored = await asyncio.to_thread(stored_checkpoints, db)
    if stored is None:
        if from_seq == 1:
            return False
        raise InvalidCommand(
            f"--from-seq {from_seq} goes on with an existing database whose control checkpoint is {from_seq - 1}, "
            f"and {db} does not exist: replay without --from-seq builds it from the start"
        )
    version, checkpoints = stored
    if version is None:
        raise InvalidCommand(f"{db} is not a projection (it has no projection_meta version): it cannot be continued")
    if version != str(PROJECTION_VERSION):
        raise InvalidCommand(
            f"{db} was built by projection version {version}, not {PROJECTION_VERSION}: it cannot be continued; "
            "replay without --from-seq into a new file"
        )
    at = {s: checkpoints.get(s, (0, 0.0))[0] for s in STREAMS}
    if at["control"] != from_seq - 1:
        raise InvalidCommand(
            f"--from-seq {from_seq} does not continue {db}: its control checkpoint is {at['control']}, "
            f"so it goes on with --from-seq {at['control'] + 1}"
        )
    for stream in STREAMS:
        divergence = await rewind.check(log_, stream, *checkpoints.get(stream, (0, 0.0)))
        if divergence is not None:
            raise InvalidCommand(
                f"{db} is not a projection of this log ({stream}: {divergence.reason}): "
                "replay without --from-seq into a new file"
            )
    if any(ends[s] < at[s] for s in STREAMS):
        raise InvalidCommand(
            f"{db} is past where this replay stops (control seq {ends['control']}, spans seq {ends['spans']}): "
            f"its checkpoints are control {at['control']}, spans {at['spans']}, and a database is never taken back; "
            "replay without --from-seq into a new file"
        )
    return True


def stored_checkpoints(db: Path) -> tuple[str | None, dict[str, tuple[int, float]]] | None:
    """The projection version that built ``db`` (None: not a projection) and its checkpoints (seq, stored time);
    None when there is no such file."""
    if not db.exists():
        return None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise InvalidCommand(f"{db} is open by a running projector: continue a copy of it, or stop it") from None
        raise InvalidCommand(f"{db} is not a DuckDB database ({exc}): --from-seq goes on with a projection") from None
    with con:
        try:
            row = con.execute("SELECT value FROM projection_meta WHERE key = 'version'").fetchone()
            rows = con.execute("SELECT stream, seq, updated_at FROM checkpoints").fetchall()
        except duckdb.CatalogException:
            return None, {}
    return (row[0] if row else None), {stream: (seq, stamp) for stream, seq, stamp in rows}


def training_pass(projector: Projector, label: str, say: Callable[[str], None]) -> None:
    """A rebuild's deferred training pass, with progress."""
    meter = Meter(f"{label}: training rows", 0, say, unit="attempts")

    def progress(done: int, total: int) -> None:
        meter.total = total
        meter.add(done - meter.done)

    meter.done = projector.finish_training(progress)
    say(meter.summary())


def rebuild_sync(settings: Settings, db: Path, say: Callable[[str], None], **kwargs: object) -> None:
    """``rebuild`` for the command line; an existing file only goes on with ``from_seq`` (never overwritten)."""
    if db.exists() and kwargs.get("from_seq") is None:
        raise InvalidCommand(
            f"{db} already exists: replay builds a new database, choose another path "
            "(to go on with this one, pass --from-seq: its control checkpoint + 1)"
        )
    asyncio.run(rebuild(settings, db, say, **kwargs))  # type: ignore[arg-type]
