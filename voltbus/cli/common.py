"""What every ``voltbus`` command module shares: settings from the environment with flags on top, the
progress line, and the options several commands take."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from voltbus.services.log import configure_logging
from voltbus.services.settings import Settings

NatsUrl = Annotated[str | None, typer.Option("--nats-url", help="NATS URL [env: VOLTBUS_NATS__URL]")]
DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file [env: VOLTBUS_PROJECTOR__DB]")]


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
