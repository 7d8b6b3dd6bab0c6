"""The ``voltbus`` command line: one subcommand per service plus operations commands.

Each command builds Settings once, applies its flags, and calls a service's entry point. Errors a
user can fix are printed as one line (``voltbus: error: ...``) with exit code 1, never a traceback.
The commands live in the modules beside this one (none imports this one); here they are put in order.
"""

from __future__ import annotations

import typer

from voltbus.services.log import one_line_errors

from . import apo, backup, bus, data, enqueue, learn, metrics, ops, serve

app = typer.Typer(
    name="voltbus",
    help="Event-sourced RL and prompt optimization for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
schemas_app = typer.Typer(help="The event contract.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")
model_app = typer.Typer(help="Local models for the CPU path (needs voltbus[learn]).", no_args_is_help=True)
app.add_typer(model_app, name="model")
data_app = typer.Typer(help="Training data: quality checks.", no_args_is_help=True)
app.add_typer(data_app, name="data")
docs_app = typer.Typer(help="The generated references under docs/reference/.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")

# `voltbus --help` lists the commands in this order.
app.command()(ops.check)
app.command()(ops.demo)
app.command()(serve.coordinator)
app.command()(serve.gateway)
app.command()(serve.projector)
app.command()(serve.dashboard)
app.command("store-server")(serve.store_server)
app.command()(data.sql)
app.command()(data.export)
app.command()(data.replay)
app.command()(data.verify)
app.command()(data.reproject)
data_app.command("check")(data.data_check)
app.command("export-training")(data.export_training)
app.command("metrics")(metrics.metrics_command)
app.command()(serve.runner)
app.command("enqueue")(enqueue.enqueue_command)
app.command()(ops.streams)
schemas_app.command("export")(ops.schemas_export)
docs_app.command("export")(ops.docs_export)
app.command()(serve.inference)
app.command()(serve.learner)
app.command()(learn.train)
model_app.command("init")(learn.model_init)
model_app.command("fetch")(learn.model_fetch)
app.command()(ops.up)
app.command("backup")(backup.backup_command)
app.command("restore")(backup.restore_command)
app.add_typer(bus.nats_app, name="nats")
app.command("apo")(apo.apo_command)


def main() -> None:
    """Console entry point: run the app, turning voltbus errors into one line and exit code 1."""
    with one_line_errors():
        app()
