"""What every ``voltbus`` command module shares: settings from the environment with flags on top, the
progress line, and the options several commands take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

NatsUrl = Annotated[str | None, typer.Option("--nats-url", help="NATS URL [env: VOLTBUS_NATS__URL]")]
ProjectorUrl = Annotated[
    str | None,
    typer.Option(
        "--projector-url", help="the projector to query, checked to follow this bus [env: VOLTBUS_PROJECTOR__URL]"
    ),
]
DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file [env: VOLTBUS_PROJECTOR__DB]")]


def settings_for(nats_url: str | None = None, projector_url: str | None = None) -> Settings:
    """Settings from the environment, with command-line flags on top."""
    settings = Settings()
    if nats_url:
        settings.nats.url = nats_url
    if projector_url:
        settings.projector.url = projector_url
    configure_logging(settings.log_level)
    return settings


def projector_checked(settings: Settings, db: Path | None = None) -> Settings:
    """Without ``db``: refuse a projector of another bus or namespace, and say (on stderr) which one answers."""
    if db is None:
        from voltbus.services.projector.identity import check_projector

        typer.echo(f"voltbus: {check_projector(settings)}", err=True)
    return settings


def say(line: str) -> None:
    """Progress output for people."""
    typer.echo(f"voltbus: {line}")
