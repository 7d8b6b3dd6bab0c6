"""The learner service: connect to the bus, open (or resume) a run, and train on a task file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voltbus.services.settings import Settings
from voltbus.store import connect

from .session import LearnerError, Session, new_run_id


def load_tasks(path: Path) -> list[Any]:
    """Tasks from a JSON Lines file (one JSON value per line; blank lines skipped)."""
    if not path.is_file():
        raise LearnerError(f"task file {path} not found")
    tasks = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                tasks.append(json.loads(line))
            except ValueError as exc:
                raise LearnerError(f"{path}:{n}: not JSON ({exc})") from None
    return tasks


async def run(settings: Settings, tasks: list[Any], say: Callable[[str], None]) -> str:
    """Train (or continue) the run named in the settings; returns its id."""
    from .loop import GRPO  # torch from here on

    run_id = settings.learner.run_id or new_run_id()
    say(f"run {run_id} (continue it with --run-id {run_id}); projector {settings.projector.url}")
    store = await connect(settings=settings.nats, name="voltbus-learner")
    session = Session(store, run_id, settings.projector.url)
    try:
        await GRPO(settings.learner).run(session, tasks, say)
    finally:
        await session.close()
        await store.close()
    return run_id
