"""``voltbus enqueue``: put a dataset in the queue for runners started separately (``voltbus runner``), as an
Agent Lightning algorithm's ``store.enqueue_rollout`` loop does; prints the rollout ids, and with ``--wait``
follows them to their end."""

from __future__ import annotations

import asyncio
import enum
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import NatsUrl, settings_for

CHUNK = 500
"""Rollouts written per pipelined append (a progress line after each)."""


class Mode(enum.StrEnum):
    """The rollout mode."""

    train = "train"
    val = "val"
    test = "test"


def enqueue_command(
    tasks: Annotated[Path, typer.Option("--tasks", help="the dataset: JSON Lines (one task a line), or a .json array")],
    mode: Annotated[Mode, typer.Option("--mode", help="rollout mode")] = Mode.train,
    resources: Annotated[
        str | None,
        typer.Option("--resources", help="resources id the rollouts run with (NAME or NAME:VERSION); default: latest"),
    ] = None,
    wait: Annotated[
        float | None, typer.Option("--wait", help="then wait up to this many seconds for the rollouts to end")
    ] = None,
    nats_url: NatsUrl = None,
) -> None:
    """Queue one rollout per task for runners started separately; prints each rollout id on stdout."""
    from voltbus.schemas.errors import InvalidCommand
    from voltbus.services.learner.app import load_tasks
    from voltbus.services.learner.session import LearnerError

    try:
        loaded = load_tasks(tasks)
    except LearnerError as exc:
        raise InvalidCommand(str(exc)) from None
    if not loaded:
        raise InvalidCommand(f"{tasks}: the dataset holds no task")
    if wait is not None and wait <= 0:
        raise InvalidCommand("--wait takes a number of seconds above 0")
    settings = settings_for(nats_url)
    asyncio.run(_enqueue(settings, loaded, mode.value, resources, wait))


async def _enqueue(settings: Any, tasks: list[Any], mode: str, resources: str | None, wait: float | None) -> None:
    from voltbus.schemas.errors import InvalidCommand
    from voltbus.store import EnqueueRolloutRequest, connect

    store = await connect(settings=settings.nats, name="voltbus-enqueue")
    store.runner_group = settings.runner.group  # VOLTBUS_RUNNER__GROUP: the runners that serve them
    try:
        if resources is not None and await store.get_resources_by_id(resources) is None:
            raise InvalidCommand(f"--resources {resources}: no such resources on this bus (namespace "
                                 f"{settings.nats.namespace!r})")  # fmt: skip
        ids: list[str] = []
        for start in range(0, len(tasks), CHUNK):
            chunk = tasks[start : start + CHUNK]
            batch = [EnqueueRolloutRequest(input=t, mode=mode, resources_id=resources) for t in chunk]
            for rollout in await store.enqueue_many_rollouts(batch):
                ids.append(rollout.rollout_id)
                typer.echo(rollout.rollout_id)
            typer.echo(f"voltbus: enqueued {len(ids)}/{len(tasks)}", err=True)
        group = f" of runner group {store.runner_group!r}" if store.runner_group else ""
        typer.echo(f"voltbus: {len(ids)} {mode} rollouts queued for the runners{group}", err=True)
        if wait is not None:
            await _follow(store, ids, wait)
    finally:
        await store.close()


async def _follow(store: Any, ids: list[str], wait: float) -> None:
    """Report the rollouts that ended until all have, or ``wait`` seconds have passed."""
    from voltbus.schemas.errors import VoltbusError

    deadline, ended = time.monotonic() + wait, 0
    while True:
        left = deadline - time.monotonic()
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=max(0.0, min(left, 5.0)))
        if len(done) != ended or len(done) == len(ids):
            ended = len(done)
            statuses: dict[str, int] = {}
            for rollout in done:
                statuses[rollout.status] = statuses.get(rollout.status, 0) + 1
            typer.echo(f"voltbus: {ended}/{len(ids)} ended {statuses}", err=True)
        if ended == len(ids):
            return
        if left <= 0:
            raise VoltbusError(f"{len(ids) - ended} of {len(ids)} rollouts had not ended after {wait:g} s: "
                               "are runners serving this bus, namespace and group?")  # fmt: skip
