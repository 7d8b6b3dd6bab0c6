"""``voltbus`` commands on the read models: SQL, snapshots, rebuilds and checks of the projection, and the
training data it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import NatsUrl, ProjectorUrl, projector_checked, say, settings_for


def sql(
    query: Annotated[str | None, typer.Argument(help="SELECT ...; none opens a prompt")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="query this file (no projector may hold it)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or parquet")] = "table",
    out: Annotated[Path | None, typer.Option("--out", help="write the result here")] = None,
    projector_url: ProjectorUrl = None,
    nats_url: NatsUrl = None,
) -> None:
    """Query the projection with read-only SQL (through the running projector, or a --db file)."""
    from voltbus.services.projector.client import interactive, render, run_sql

    settings = projector_checked(settings_for(nats_url, projector_url), db)
    if query is None:
        return interactive(settings, db, say)
    render(run_sql(settings, query, db, truncate=True), fmt, out)


def export(
    to: Annotated[Path, typer.Option("--to", help="directory for the Parquet files")],
    db: Annotated[Path | None, typer.Option("--db", help="export this file (no projector may hold it)")] = None,
    projector_url: ProjectorUrl = None,
    nats_url: NatsUrl = None,
) -> None:
    """Write every projection table as a Parquet snapshot."""
    from voltbus.services.projector.client import export as export_tables

    export_tables(projector_checked(settings_for(nats_url, projector_url), db), to, db, say)


def replay(
    db: Annotated[Path, typer.Option("--db", help="the NEW DuckDB file to build (an existing one: see --from-seq)")],
    to_seq: Annotated[int | None, typer.Option(help="stop at this control-stream sequence")] = None,
    to_time: Annotated[str | None, typer.Option(help="stop at this time (epoch seconds or ISO 8601)")] = None,
    from_seq: Annotated[
        int | None,
        typer.Option(
            help="go on with the EXISTING --db file (a copy of a projection) from this control-stream sequence: "
            "its control checkpoint + 1, else refused"
        ),
    ] = None,
    progress_every: Annotated[float, typer.Option(help="seconds between progress lines")] = 1.0,
    nats_url: NatsUrl = None,
) -> None:
    """Rebuild every table from the log into a new database, up to a point in the past if asked (or go on with a
    copy of one: --from-seq)."""
    from voltbus.services.projector.client import parse_time, rebuild_sync

    until = parse_time(to_time) if to_time else None
    settings = settings_for(nats_url)
    rebuild_sync(settings, db, say, to_seq=to_seq, to_time=until, from_seq=from_seq, every=progress_every)


def verify(
    db: Annotated[Path | None, typer.Option("--db", help="verify this file (no projector may hold it)")] = None,
    nats_url: NatsUrl = None,
    projector_url: ProjectorUrl = None,
) -> None:
    """Compare every table of the projection (the running projector's, or --db) with a rebuild from the log."""
    from voltbus.services.projector.verify import verify_sync

    verify_sync(projector_checked(settings_for(nats_url, projector_url), db), db, say)


def reproject(
    adapter: Annotated[str, typer.Option("--adapter", help="adapter settings: a JSON object or a .json/.toml file")],
    db: Annotated[Path, typer.Option("--db", help="the NEW DuckDB file to build")],
    force: Annotated[bool, typer.Option(help="replace an existing file (never one a projector holds)")] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Rebuild the training tables from the log with other adapter settings (every other table comes along)."""
    from voltbus.services.ops.reproject import reproject_sync

    reproject_sync(settings_for(nats_url), db, adapter, force, say)


def data_check(
    db: Annotated[Path | None, typer.Option("--db", help="check this file (no projector may hold it)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="report, table, csv, json or parquet")] = "report",
    out: Annotated[Path | None, typer.Option("--out", help="write the rows here")] = None,
    strict: Annotated[bool, typer.Option(help="exit 1 when any problem count is not zero")] = False,
    projector_url: ProjectorUrl = None,
    nats_url: NatsUrl = None,
) -> None:
    """What would silently weaken training, per run, mode and resources version (the data_quality view)."""
    from voltbus.services.projector.quality import check_data

    check_data(projector_checked(settings_for(nats_url, projector_url), db), db, fmt, out, strict, typer.echo)


def export_training(
    to: Annotated[Path, typer.Option("--to", help="the file to write")],
    fmt: Annotated[str, typer.Option("--format", help="parquet (every column) or jsonl (OpenAI fine-tuning)")],
    table: Annotated[str, typer.Option(help="triplets or trajectories")] = "triplets",
    where: Annotated[str | None, typer.Option(help="SQL condition on the table's columns")] = None,
    run: Annotated[
        str | None, typer.Option(help="the rollouts this run's steps sampled (as train --offline --from-run)")
    ] = None,
    mode: Annotated[str | None, typer.Option(help="train, val or test")] = None,
    versions: Annotated[str | None, typer.Option(help="resources version N or LOW..HIGH")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="export from this file (no projector may hold it)")] = None,
    projector_url: ProjectorUrl = None,
    nats_url: NatsUrl = None,
) -> None:
    """Export triplets or trajectories as Parquet or as OpenAI fine-tuning JSONL; unusable rows are counted."""
    from voltbus.services.ops.training_export import export_training as write
    from voltbus.services.ops.training_export import selection

    clause, params = selection(table, where, run, mode, versions)
    settings = projector_checked(settings_for(nats_url, projector_url), db)
    write(settings, to, fmt, table, clause, params, db, say)
