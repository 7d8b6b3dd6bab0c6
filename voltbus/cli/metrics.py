"""``voltbus metrics``: one run's reward curves and step metrics written to TensorBoard, MLflow or Weights &
Biases (offline), replayed from the log and, with ``--follow``, kept up to date until the run finishes."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from .common import NatsUrl, say, settings_for


class To(StrEnum):
    """Where the metrics go."""

    tensorboard = "tensorboard"
    mlflow = "mlflow"
    wandb = "wandb"


def metrics_command(
    to: Annotated[To, typer.Option("--to", help="tensorboard, mlflow or wandb (offline)")],
    run: Annotated[str, typer.Option("--run", help="the run id")],
    out: Annotated[
        str | None,
        typer.Option(help="where to write (default voltbus-metrics/<to>); for mlflow also a tracking URI"),
    ] = None,
    project: Annotated[str, typer.Option(help="the MLflow experiment or W&B project")] = "voltbus",
    follow: Annotated[bool, typer.Option(help="after the stored steps, write new ones until the run finishes")] = False,
    nats_url: NatsUrl = None,
) -> None:
    """Write a run's config and step metrics (reward_mean, staleness, loss, ...) to TensorBoard, MLflow or W&B."""
    from voltbus.services.ops.metric_sinks import open_sink
    from voltbus.services.ops.run_metrics import export_run

    target = out or str(Path("voltbus-metrics") / to.value)
    done = asyncio.run(
        export_run(settings_for(nats_url), run, lambda: open_sink(to.value, target, project, run), follow, say)
    )
    say(f"{done.line()}; {to.value} at {target}")
