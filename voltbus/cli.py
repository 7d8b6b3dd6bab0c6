"""The ``voltbus`` command line: one subcommand per service plus operations commands.

Each command builds Settings once, applies its flags, and calls a service's entry point. Errors a
user can fix are printed as one line (``voltbus: error: ...``) with exit code 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from voltbus.schemas.errors import VoltbusError
from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

app = typer.Typer(
    name="voltbus",
    help="Event-sourced RL and prompt optimization for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
schemas_app = typer.Typer(help="The event contract.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")
model_app = typer.Typer(help="Tiny local models for the CPU path (needs voltbus[learn]).", no_args_is_help=True)
app.add_typer(model_app, name="model")
data_app = typer.Typer(help="Training data: quality checks.", no_args_is_help=True)
app.add_typer(data_app, name="data")
docs_app = typer.Typer(help="The generated references under docs/reference/.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")

NatsUrl = Annotated[str | None, typer.Option("--nats-url", help="NATS URL [env: VOLTBUS_NATS__URL]")]


def settings_for(nats_url: str | None = None) -> Settings:
    """Settings from the environment, with command-line flags on top."""
    settings = Settings()
    if nats_url:
        settings.nats.url = nats_url
    configure_logging(settings.log_level)
    return settings


def say(line: str) -> None:
    """Progress output for people."""
    typer.echo(f"voltbus: {line}")


@app.command()
def check(
    nats_url: NatsUrl = None,
    rollouts: Annotated[int, typer.Option(help="Rollouts to enqueue")] = 1000,
    spans: Annotated[int, typer.Option(help="Spans to publish")] = 5000,
    namespace: Annotated[str, typer.Option(help="Namespace the check writes to")] = "vbcheck",
) -> None:
    """Self-check a running bus: append, conflict, deduplicate, publish spans, replay."""
    from voltbus.services.selfcheck import run_selfcheck

    settings = settings_for(nats_url)
    settings.nats.namespace = namespace
    asyncio.run(run_selfcheck(settings.nats, rollouts, spans, say))
    say("self-check passed")


@app.command()
def demo(
    steps: Annotated[int, typer.Option(help="most GRPO steps")] = 200,
    budget_s: Annotated[float, typer.Option("--budget-s", help="stop after this many seconds of training")] = 270,
    tasks_per_step: Annotated[int, typer.Option(help="distinct tasks per step")] = 16,
    group_size: Annotated[int, typer.Option(help="rollouts per task (the GRPO group)")] = 8,
) -> None:
    """The main job on embedded defaults: train the arith_rl example's CPU policy through the whole system."""
    from voltbus.services.demo import run_demo

    settings = settings_for()
    if settings.log_level.upper() == "INFO":
        configure_logging("WARNING")  # keep the demo's output to its own progress lines
    run_demo(settings, steps, budget_s, tasks_per_step, group_size, say)


@app.command()
def coordinator(nats_url: NatsUrl = None) -> None:
    """Run the coordinator: attempt timeouts and unresponsiveness, retries, dead letters."""
    from voltbus.services.coordinator.app import run

    settings = settings_for(nats_url)
    asyncio.run(run(settings))


@app.command()
def gateway(
    nats_url: NatsUrl = None,
    upstream: Annotated[
        list[str] | None,
        typer.Option(help="Engine base URL with /v1; repeat for several engines [env: VOLTBUS_GATEWAY__UPSTREAM_URLS]"),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8766)")] = None,
) -> None:
    """Run the gateway: an OpenAI-compatible proxy that records every model call with its token ids."""
    from voltbus.services.gateway.app import main

    settings = settings_for(nats_url)
    updates = {"upstream_urls": upstream or None, "port": port}
    settings.gateway = settings.gateway.model_copy(update={k: v for k, v in updates.items() if v is not None})
    main(settings)


DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file [env: VOLTBUS_PROJECTOR__DB]")]


@app.command()
def projector(
    nats_url: NatsUrl = None, db: DbOption = None, port: Annotated[int | None, typer.Option()] = None
) -> None:
    """Run the projector: DuckDB read models from the log, and read-only SQL at /sql."""
    from voltbus.services.projector.app import run

    settings = settings_for(nats_url)
    settings.projector = settings.projector.model_copy(update={k: v for k, v in {"db": db, "port": port}.items() if v})
    asyncio.run(run(settings))


@app.command()
def dashboard(
    port: Annotated[int | None, typer.Option(help="Port (default 8780)")] = None,
    projector_url: Annotated[
        str | None, typer.Option(help="The projector's URL [env: VOLTBUS_DASHBOARD__PROJECTOR_URL]")
    ] = None,
) -> None:
    """Run the dashboard: a live web page of the projections (statuses, reward curve, runners, spans)."""
    from voltbus.services.dashboard.app import run

    settings = settings_for()
    updates = {"port": port, "projector_url": projector_url}
    settings.dashboard = settings.dashboard.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings))


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SELECT ...; none opens a prompt")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="query this file (no projector may hold it)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or parquet")] = "table",
    out: Annotated[Path | None, typer.Option("--out", help="write the result here")] = None,
) -> None:
    """Query the projection with read-only SQL (through the running projector, or a --db file)."""
    from voltbus.services.projector.client import interactive, render, run_sql

    settings = settings_for()
    if query is None:
        return interactive(settings, db, say)
    render(run_sql(settings, query, db, truncate=True), fmt, out)


@app.command()
def export(
    to: Annotated[Path, typer.Option("--to", help="directory for the Parquet files")],
    db: Annotated[Path | None, typer.Option("--db", help="export this file (no projector may hold it)")] = None,
) -> None:
    """Write every projection table as a Parquet snapshot."""
    from voltbus.services.projector.client import export as export_tables

    export_tables(settings_for(), to, db, say)


@app.command()
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


@app.command()
def verify(
    db: Annotated[Path | None, typer.Option("--db", help="verify this file (no projector may hold it)")] = None,
    nats_url: NatsUrl = None,
) -> None:
    """Compare every table of the projection (the running projector's, or --db) with a rebuild from the log."""
    from voltbus.services.projector.verify import verify_sync

    verify_sync(settings_for(nats_url), db, say)


@app.command()
def reproject(
    adapter: Annotated[str, typer.Option("--adapter", help="adapter settings: a JSON object or a .json/.toml file")],
    db: Annotated[Path, typer.Option("--db", help="the NEW DuckDB file to build")],
    force: Annotated[bool, typer.Option(help="replace an existing file (never one a projector holds)")] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Rebuild the training tables from the log with other adapter settings (every other table comes along)."""
    from voltbus.services.projector.reproject import reproject_sync

    reproject_sync(settings_for(nats_url), db, adapter, force, say)


@data_app.command("check")
def data_check(
    db: Annotated[Path | None, typer.Option("--db", help="check this file (no projector may hold it)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="report, table, csv, json or parquet")] = "report",
    out: Annotated[Path | None, typer.Option("--out", help="write the rows here")] = None,
    strict: Annotated[bool, typer.Option(help="exit 1 when any problem count is not zero")] = False,
) -> None:
    """What would silently weaken training, per run, mode and resources version (the data_quality view)."""
    from voltbus.services.projector.quality import check_data

    check_data(settings_for(), db, fmt, out, strict, typer.echo)


@app.command("export-training")
def export_training(
    to: Annotated[Path, typer.Option("--to", help="the file to write")],
    fmt: Annotated[str, typer.Option("--format", help="parquet (every column) or jsonl (OpenAI fine-tuning)")],
    table: Annotated[str, typer.Option(help="triplets or trajectories")] = "triplets",
    where: Annotated[str | None, typer.Option(help="SQL condition on the table's columns")] = None,
    run: Annotated[str | None, typer.Option(help="rollouts pinned to versions this run published")] = None,
    mode: Annotated[str | None, typer.Option(help="train, val or test")] = None,
    versions: Annotated[str | None, typer.Option(help="resources version N or LOW..HIGH")] = None,
    db: Annotated[Path | None, typer.Option("--db", help="export from this file (no projector may hold it)")] = None,
) -> None:
    """Export triplets or trajectories as Parquet or as OpenAI fine-tuning JSONL; unusable rows are counted."""
    from voltbus.services.projector.training_export import export_training as write
    from voltbus.services.projector.training_export import selection

    clause, params = selection(table, where, run, mode, versions)
    write(settings_for(), to, fmt, table, clause, params, db, say)


@app.command()
def runner(
    agent: Annotated[str, typer.Option("--agent", help="the agent, as module:attr")],
    n: Annotated[
        int | None, typer.Option("-n", help="rollouts run at once (default: VOLTBUS_RUNNER__SLOTS, else 1)", min=1)
    ] = None,
    isolate: Annotated[
        bool | None,
        typer.Option(
            "--isolate/--no-isolate",
            help="run each rollout in its own process, killed at its timeout; --no-isolate: not that, so the "
            "agent host unless VOLTBUS_RUNNER__AGENTS says otherwise (default: VOLTBUS_RUNNER__ISOLATE, else no)",
        ),
    ] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="run agents inside the runner, which holds the bus credentials: for trusted agents only "
            "(default: the agent host, a process with no credentials)",
        ),
    ] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Run a runner: claim rollouts and run the agent on them (SIGTERM finishes or releases them)."""
    from voltbus.services import loop
    from voltbus.services.runner.app import serve_until_signal

    if in_process and isolate:
        raise typer.BadParameter("--in-process and --isolate exclude each other")
    settings = settings_for(nats_url)
    agents = "in-process" if in_process else None
    given = {"slots": n, "isolate": isolate, "agents": agents}  # flags override the settings; absent ones leave them
    settings.runner = settings.runner.model_copy(update={k: v for k, v in given.items() if v is not None})
    loop.run(serve_until_signal(settings, agent))  # on uvloop: less CPU per rollout (BENCHMARKS.md)


@app.command()
def streams(nats_url: NatsUrl = None) -> None:
    """Create the streams if needed and print their state."""
    from voltbus.services.streaminfo import show_streams

    settings = settings_for(nats_url)
    asyncio.run(show_streams(settings.nats, say))


@schemas_app.command("export")
def schemas_export(
    out: Annotated[Path, typer.Option(help="Directory for the JSON Schema files")] = Path("schemas/json"),
) -> None:
    """Write a JSON Schema per event type (commit the result; a test checks it is current)."""
    from voltbus.schemas.catalog import json_schemas

    out.mkdir(parents=True, exist_ok=True)
    files = json_schemas()
    for stale in set(p.name for p in out.glob("*.json")) - set(files):
        (out / stale).unlink()
    for name, content in files.items():
        (out / name).write_bytes(content)
    say(f"wrote {len(files)} schemas to {out}")


@docs_app.command("export")
def docs_export(
    out: Annotated[Path, typer.Option(help="Directory for the Markdown references")] = Path("docs/reference"),
) -> None:
    """Write the CLI, configuration and event references (commit the result; a test checks it is current)."""
    from voltbus.docgen import reference_docs

    out.mkdir(parents=True, exist_ok=True)
    files = reference_docs()
    for name, content in files.items():
        (out / name).write_text(content)
    say(f"wrote {len(files)} references to {out}")


@app.command()
def inference(
    model: Annotated[Path, typer.Option("--model", help="model directory [env: VOLTBUS_INFERENCE__MODEL_DIR]")],
    host: Annotated[str | None, typer.Option(help="Interface to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000)")] = None,
    name: Annotated[str | None, typer.Option(help="Served model name (default: the directory's name)")] = None,
    follow_resources: Annotated[bool, typer.Option(help="Hot-swap to each resources version naming it")] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Run the CPU inference server: an OpenAI-compatible API with token ids, logprobs and hot swap."""
    from voltbus.services.inference.app import run

    settings = settings_for(nats_url)
    updates = {"model_dir": model, "host": host, "port": port, "served_model_name": name}
    updates |= {"follow_resources": True if follow_resources else None}
    settings.inference = settings.inference.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings))


@app.command()
def learner(
    tasks: Annotated[Path, typer.Option("--tasks", help="training tasks, one JSON value per line")],
    model: Annotated[
        Path | None, typer.Option("--model", help="starting model directory [env: VOLTBUS_LEARNER__MODEL_DIR]")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="run to start or continue [env: VOLTBUS_LEARNER__RUN_ID]")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="learner steps (default 20)")] = None,
    val_tasks: Annotated[
        Path | None, typer.Option("--val-tasks", help="validate on these tasks before and after")
    ] = None,
    time_budget_s: Annotated[
        float | None, typer.Option("--time-budget-s", help="stop after this much training")
    ] = None,
    nats_url: NatsUrl = None,
) -> None:
    """Run the GRPO learner: publish versions, enqueue batches, train on their rows, resume after a crash."""
    from voltbus.services.learner.app import load_tasks, run

    settings = settings_for(nats_url)
    updates = {"model_dir": model, "run_id": run_id, "steps": steps, "val_tasks": val_tasks}
    updates["time_budget_s"] = time_budget_s
    settings.learner = settings.learner.model_copy(update={k: v for k, v in updates.items() if v is not None})
    asyncio.run(run(settings, load_tasks(tasks), say))


@app.command()
def train(
    offline: Annotated[bool, typer.Option("--offline", help="train on rows already in the log")] = False,
    model: Annotated[Path | None, typer.Option("--model", help="starting model directory or checkpoint")] = None,
    from_run: Annotated[str | None, typer.Option("--from-run", help="only rollouts this run sampled")] = None,
    mode: Annotated[str, typer.Option(help="rollout mode of the rows ('' for any)")] = "train",
    versions: Annotated[str | None, typer.Option(help="policy versions that sampled the rows: N or LOW..HIGH")] = None,
    since: Annotated[str | None, typer.Option(help="rollouts ended at or after this time (ISO or epoch)")] = None,
    until: Annotated[str | None, typer.Option(help="rollouts ended at or before this time (ISO or epoch)")] = None,
    where: Annotated[str, typer.Option(help="extra SQL condition on trajectories t / rollouts r")] = "TRUE",
    epochs: Annotated[int, typer.Option(help="passes over the selection")] = 1,
    run_id: Annotated[str | None, typer.Option("--run-id", help="id of the new run")] = None,
    seed: Annotated[int, typer.Option(help="seed of the minibatch order")] = 0,
    db: DbOption = None,
    nats_url: NatsUrl = None,
) -> None:
    """Retrain from the log: GRPO on recorded training rows, importance-weighted by their recorded logprobs."""
    from voltbus.services.learner.grpo.offline import Selection, train_offline
    from voltbus.services.projector.client import parse_time

    if not offline:
        raise VoltbusError("online training runs with `voltbus learner` (or `voltbus demo`); pass --offline")
    low, _, high = (versions or "").partition("..")
    selection = Selection(
        run=from_run,
        mode=mode or None,
        low=int(low) if low else None,
        high=int(high or low) if (high or low) else None,
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        where=where,
    )
    settings = settings_for(nats_url)
    updates = {"model_dir": model, "run_id": run_id, "seed": seed}
    settings.learner = settings.learner.model_copy(update={k: v for k, v in updates.items() if v is not None})
    result = asyncio.run(train_offline(settings, selection, epochs, say, db))
    rows, dataset = result["rows"], result["dataset_sha256"]
    say(f"offline run {result['run_id']}: {rows} rows, dataset {dataset}, published {result['published']}")


@model_app.command("init")
def model_init(
    out: Annotated[Path, typer.Option("--out", help="model directory to write")],
    steps: Annotated[int, typer.Option(help="warm-start steps on a+b= (0: random weights)")] = 400,
    seed: Annotated[int, typer.Option(help="seed of the weights and the training data")] = 0,
    threads: Annotated[int, typer.Option(help="torch threads (0: torch's default; 1 is steadier on 2 cores)")] = 1,
) -> None:
    """Write a tiny Llama (about 1 M parameters) with a character tokenizer, warm-started on addition."""
    import torch

    from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir, warm_start, weights_sha256

    torch.set_num_threads(threads or torch.get_num_threads())
    model, tok = build_tiny_model(seed), build_tokenizer()
    if steps > 0:
        warm_start(model, tok, steps=steps, seed=seed, progress=say)
    save_model_dir(model, tok, out)
    say(f"wrote {out} (sha256 {weights_sha256(out)[:12]})")


@app.command()
def up(
    services: Annotated[str | None, typer.Option(help="comma-separated services to start (default: all)")] = None,
    profile: Annotated[list[str] | None, typer.Option(help="also start this compose profile's services")] = None,
    file: Annotated[Path, typer.Option("--file", "-f", help="the compose file")] = Path("docker-compose.yml"),
    data_dir: Annotated[Path | None, typer.Option(help="where named volumes live (default: <data dir>/up)")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="readiness deadline of each service")] = 180.0,
    keep_going: Annotated[bool, typer.Option(help="keep the rest running when a service dies")] = False,
    exit_code_from: Annotated[
        str | None, typer.Option("--exit-code-from", help="stop all when this service exits; its exit code")
    ] = None,
) -> None:
    """Run docker-compose.yml's services as local processes (embedded bus, no Docker); Ctrl-C stops them."""
    import os

    import platformdirs

    from voltbus.services.compose import ComposeError, load_topology
    from voltbus.services.up import run_up, select

    if not file.is_file():
        raise ComposeError(f"no compose file at {file.resolve()} (run from the repository root or pass --file)")
    data_dir = data_dir or Path(platformdirs.user_data_dir("voltbus")) / "up"
    topology = load_topology(file, os.environ, data_dir.resolve())  # its `credentials` job makes the credentials
    chosen = select(topology, services.split(",") if services else None, profile or [])
    if exit_code_from is not None and exit_code_from not in chosen:
        raise ComposeError(f"--exit-code-from {exit_code_from}: not among the services started ({', '.join(chosen)})")
    raise typer.Exit(run_up(chosen, file.resolve().parent, data_dir, timeout_s, keep_going, say, exit_code_from))


from voltbus.cli_backup import register as _register_backup  # noqa: E402

_register_backup(app)

from voltbus.cli_nats import register as _register_nats  # noqa: E402

_register_nats(app)

from voltbus.cli_apo import register as _register_apo  # noqa: E402

_register_apo(app)


def main() -> None:
    """Console entry point: run the app, turning voltbus errors into one line and exit code 1."""
    try:
        app()
    except VoltbusError as exc:
        typer.echo(f"voltbus: error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
