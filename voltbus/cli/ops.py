"""``voltbus`` operations commands: check a bus, run the demo, show the streams, run docker-compose.yml
locally (``up``), and write the generated schemas and references."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from voltbus.services.log import configure_logging

from .common import NatsUrl, say, settings_for


def check(
    nats_url: NatsUrl = None,
    rollouts: Annotated[int, typer.Option(help="Rollouts to enqueue")] = 1000,
    spans: Annotated[int, typer.Option(help="Spans to publish")] = 5000,
    namespace: Annotated[str, typer.Option(help="Namespace the check writes to")] = "vbcheck",
) -> None:
    """Self-check a running bus: append, conflict, deduplicate, publish spans, replay."""
    from voltbus.services.ops.selfcheck import run_selfcheck

    settings = settings_for(nats_url)
    settings.nats.namespace = namespace
    asyncio.run(run_selfcheck(settings.nats, rollouts, spans, say))
    say("self-check passed")


def demo(
    steps: Annotated[int, typer.Option(help="most GRPO steps")] = 200,
    budget_s: Annotated[float, typer.Option("--budget-s", help="stop after this many seconds of training")] = 270,
    tasks_per_step: Annotated[int, typer.Option(help="distinct tasks per step")] = 16,
    group_size: Annotated[int, typer.Option(help="rollouts per task (the GRPO group)")] = 8,
) -> None:
    """The main job on embedded defaults: train the arith_rl example's CPU policy through the whole system."""
    from .demo import run_demo

    settings = settings_for()
    if settings.log_level.upper() == "INFO":
        configure_logging("WARNING")  # keep the demo's output to its own progress lines
    run_demo(settings, steps, budget_s, tasks_per_step, group_size, say)


def streams(nats_url: NatsUrl = None) -> None:
    """Create the streams if needed and print their state."""
    from voltbus.services.ops.streaminfo import show_streams

    settings = settings_for(nats_url)
    asyncio.run(show_streams(settings.nats, say))


def up(
    services: Annotated[str | None, typer.Option(help="comma-separated services to start (default: all)")] = None,
    profile: Annotated[list[str] | None, typer.Option(help="also start this compose profile's services")] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="the compose file (default: ./docker-compose.yml, else the repository's)"),
    ] = None,
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

    from voltbus.services.ops.compose import ComposeError, load_topology
    from voltbus.services.ops.up import run_up, select

    file = file or compose_file()
    if not file.is_file():
        raise ComposeError(f"no compose file at {file.resolve()} (pass --file)")
    data_dir = data_dir or Path(platformdirs.user_data_dir("voltbus")) / "up"
    topology = load_topology(file, os.environ, data_dir.resolve())  # its `credentials` job makes the credentials
    chosen = select(topology, services.split(",") if services else None, profile or [])
    if exit_code_from is not None and exit_code_from not in chosen:
        raise ComposeError(f"--exit-code-from {exit_code_from}: not among the services started ({', '.join(chosen)})")
    raise typer.Exit(run_up(chosen, file.resolve().parent, data_dir, timeout_s, keep_going, say, exit_code_from))


def compose_file() -> Path:
    """``./docker-compose.yml`` if there is one, else the repository's (next to this package): ``voltbus up`` works
    from any folder, its services running in the compose file's folder."""
    here = Path("docker-compose.yml")
    return here if here.is_file() else Path(__file__).resolve().parents[2] / "docker-compose.yml"


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


def docs_export(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Directory for the Markdown references")] = Path("docs/reference"),
) -> None:
    """Write the CLI, configuration and event references (commit the result; a test checks it is current)."""
    from voltbus.services.ops.docgen import reference_docs

    out.mkdir(parents=True, exist_ok=True)
    files = reference_docs(ctx.find_root().command)  # the whole `voltbus` tree, without importing it back
    for name, content in files.items():
        (out / name).write_text(content)
    say(f"wrote {len(files)} references to {out}")
