"""The learner service: connect to the bus, open (or resume) a run, and train on a task file with GRPO
(``grpo/``, imported in ``run``: the service's one choice of algorithm)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voltbus.services.clients.store import connect
from voltbus.services.settings import Settings, TorchrunEnvironment

from .backend import check_backend, rank_actor
from .session import LearnerError, Session, new_run_id


def load_tasks(path: Path) -> list[Any]:
    """Tasks from a JSON Lines file (one JSON value per line; blank lines skipped), or from a ``.json`` file
    holding one JSON array of tasks."""
    if not path.is_file():
        raise LearnerError(f"task file {path} not found")
    if path.suffix == ".json":
        try:
            found = json.loads(path.read_text())
        except ValueError as exc:
            raise LearnerError(f"{path}: not JSON ({exc})") from None
        if not isinstance(found, list):
            kind = type(found).__name__
            raise LearnerError(f"{path}: a .json task file holds a JSON array of tasks, not a {kind} (or use .jsonl)")
        return found
    tasks = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                tasks.append(json.loads(line))
            except ValueError as exc:
                raise LearnerError(f"{path}:{n}: not JSON ({exc})") from None
    return tasks


def refuse_early(settings: Settings, tasks: list[Any]) -> None:
    """Refuse, before the run is registered or anything connects, an empty dataset and a backend this machine cannot
    run."""
    if not tasks:
        raise LearnerError("the training dataset is empty: the task file holds no task")
    check_backend(settings.learner)


def main(settings: Settings, tasks: list[Any], say: Callable[[str], None]) -> str:
    """The learner: in this process (or this one of ``torchrun``'s), or with ``ray.ranks`` > 0 on that many Ray
    actors (``raylaunch.py``: each runs ``rank``, as torchrun's processes run this module)."""
    if not settings.ray.ranks:
        return asyncio.run(run(settings, tasks, say))
    from functools import partial

    from .raylaunch import run_ranks

    refuse_early(settings, tasks)
    return run_ranks(settings.ray, partial(rank, settings, tasks), say)[0]


def rank(settings: Settings, tasks: list[Any]) -> str:
    """One of the learner's ranks on a Ray actor, whose variables say which (``RANK``, ``WORLD_SIZE``, ...)."""
    return asyncio.run(run(settings, tasks, lambda line: print(line, flush=True)))


async def run(settings: Settings, tasks: list[Any], say: Callable[[str], None]) -> str:
    """Train (or continue) the run named in the settings, validating before and after when asked;
    returns its id. A run that already finished is reported and left as it is. Started by ``torchrun`` with
    ``WORLD_SIZE`` > 1: the update is data parallel over the ranks (``ranked``)."""
    refuse_early(settings, tasks)
    env = TorchrunEnvironment()
    if env.world_size > 1:
        return await ranked(settings, env, tasks, say)
    return await train(settings, tasks, say)


async def ranked(settings: Settings, env: TorchrunEnvironment, tasks: list[Any], say: Callable[[str], None]) -> str:
    """One of ``torchrun``'s ranks (docs/learning.md "Several devices"): rank 0 trains as one learner does, sharing
    each update with the others; the others only follow its updates (they never touch the bus)."""
    from .grpo import ranks

    await asyncio.to_thread(ranks.start, env, settings.learner)
    if env.rank > 0:
        say(f"rank {env.rank} of {env.world_size}: following rank 0's updates")
        await asyncio.to_thread(ranks.follow, settings.learner, rank_actor)
        return settings.learner.run_id or ""
    say(f"rank 0 of {env.world_size}: each update is shared with {env.world_size - 1} more ranks")
    run_id = await train(settings, tasks, say)
    ranks.stop()  # not on an error: torchrun ends the other ranks when rank 0 fails
    return run_id


async def train(settings: Settings, tasks: list[Any], say: Callable[[str], None]) -> str:
    """The run on this process (rank 0 of several, or the only one)."""
    from .grpo.loop import GRPO
    from .grpo.validate import validate

    s = settings.learner
    run_id = s.run_id or new_run_id()
    val = load_tasks(s.val_tasks) if s.val_tasks else []
    say(f"run {run_id} (continue it with --run-id {run_id}); projector {settings.projector.url}")
    store = await connect(settings=settings.nats, name="voltbus-learner")
    session = Session(store, run_id, settings.projector)
    try:
        history = await session.history()
        if history.finished is not None:
            say(f"run {run_id} already {history.finished} after {history.next_step} steps; nothing to do "
                "(start another with --run-id, or VB_RUN_ID under compose)")  # fmt: skip
            return run_id
        loop = GRPO(s)
        before = await validate(session, val, loop, False, say) if not history.started else None
        await loop.run(session, tasks, say)
        after = await validate(session, val, loop, True, say)
        say(outcome(run_id, loop.curve, before, after))
    finally:
        await session.close()
        await store.close()
    return run_id


def outcome(run_id: str, curve: list[dict[str, float]], before: dict | None, after: dict | None) -> str:
    """The run's one-line summary: sampled reward over the first and last steps, validation before -> after.

    >>> outcome("r", [{"reward_mean": 0.5}, {"reward_mean": 0.7}], {"mean_reward": 0.4}, {"mean_reward": 0.9})
    'run r finished: 2 steps; sampled reward 0.50 (first 1 steps) -> 0.70 (last 1); validation 0.40 -> 0.90'
    """
    parts = [f"run {run_id} finished: {len(curve)} steps"]
    if curve:
        rewards = [m["reward_mean"] for m in curve]
        k = max(1, min(5, len(rewards) // 3))
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        parts.append(f"sampled reward {first:.2f} (first {k} steps) -> {last:.2f} (last {k})")
    if after is not None:
        start = f"{before['mean_reward']:.2f}" if before is not None else "(resumed run)"
        parts.append(f"validation {start} -> {after['mean_reward']:.2f}")
    return "; ".join(parts)
