"""Retraining from the log: GRPO on training rows already recorded, without running any agent.

The selection (a run's batches, a mode, a range of policy versions, a time range, a SQL condition)
is read by SQL from the projector (or a projection file), hashed, and trained on in a fixed order:
advantages once per rollout over the whole selection's task groups, then minibatches of rollouts
shuffled by the seed, each one PPO-clip step whose importance ratios use the logprobs recorded at
sampling time (the policy being trained is not the one that sampled). Same selection and seed: the
same dataset hash and the same updates. The run is recorded like an online one (``RunStarted`` with
the selection and the hash, ``CheckpointSaved`` and ``StepCompleted`` per step, the final version
published under the run's bundle). Under ``torchrun`` rank 0 does all this and the update is data parallel.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from voltbus.services.clients.store import connect
from voltbus.services.settings import Settings, TorchrunEnvironment

from ..backend import check_backend, load_actor, rank_actor
from ..session import LearnerError, Session, new_run_id
from .batch import prepare
from .loop import GRPO
from .objective import group_advantages

SQL = (Path(__file__).parent / "offline_rows.sql").read_text()


@dataclass(frozen=True)
class Selection:
    """Which recorded rows to train on."""

    run: str | None = None
    mode: str | None = "train"
    low: int | None = None
    high: int | None = None
    since: float | None = None
    until: float | None = None
    where: str = "TRUE"

    def query(self) -> tuple[str, dict[str, Any]]:
        """The SQL and its parameters."""
        params = {k: v for k, v in asdict(self).items() if k != "where"}
        return SQL.replace("{where}", self.where or "TRUE"), params


def dataset_hash(records: list[dict[str, Any]]) -> str:
    """SHA-256 of the rows' identities, tokens, logprobs and rewards, in query order."""
    keys = ("rollout_id", "row_index", "task_id", "prompt_ids", "response_ids", "response_mask", "logprobs", "reward")
    return hashlib.sha256(msgspec.json.encode([[r.get(k) for k in keys] for r in records])).hexdigest()


def read_local(db: Path, sql: str, params: dict[str, Any]) -> pa.Table:
    """The rows from a projection file no one is writing."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql(sql, params=params).to_arrow_table()


async def train_offline(
    settings: Settings, selection: Selection, epochs: int, say: Callable[[str], None], db: Path | None = None
) -> dict[str, Any] | None:
    """Train a new run on the selection; returns its id, the dataset hash and the per-step metrics. Started by
    ``torchrun`` with ``WORLD_SIZE`` > 1: rank 0 reads the rows and records the run, and each update is data parallel
    over the ranks (``ranks.py``); the other ranks only follow its updates and return None."""
    check_backend(settings.learner)  # a missing verl or GPU fails before anything is read or recorded
    env = TorchrunEnvironment()
    if env.world_size == 1:
        return await _train(settings, selection, epochs, say, db)
    from . import ranks

    await asyncio.to_thread(ranks.start, env, settings.learner)
    if env.rank > 0:
        say(f"rank {env.rank} of {env.world_size}: following rank 0's offline updates")
        await asyncio.to_thread(ranks.follow, settings.learner, rank_actor)
        return None
    say(f"rank 0 of {env.world_size}: reads the rows and shares each update with {env.world_size - 1} more ranks")
    result = await _train(settings, selection, epochs, say, db)
    ranks.stop()  # not on an error: torchrun ends the other ranks when rank 0 fails
    return result


async def _train(
    settings: Settings, selection: Selection, epochs: int, say: Callable[[str], None], db: Path | None
) -> dict[str, Any]:
    s = settings.learner
    run_id = s.run_id or new_run_id()
    store = await connect(settings=settings.nats, name="voltbus-learner-offline")
    session = Session(store, run_id, settings.projector)
    try:
        sql, params = selection.query()
        table = await (asyncio.to_thread(read_local, db, sql, params) if db else session.query(sql, params))
        records = table.to_pylist()
        if not records:
            raise LearnerError(f"no training rows match the selection {selection}")
        digest = dataset_hash(records)
        rollouts = list(dict.fromkeys(r["rollout_id"] for r in records))
        data = prepare(records, rollouts, version=0, max_staleness=1 << 30)  # recorded rows: no staleness cut
        say(f"offline run {run_id}: {len(data.rows)} rows of {len(rollouts)} rollouts, dataset {digest[:12]}")
        config = {"selection": asdict(selection), "seed": s.seed, "epochs": epochs, "dataset_sha256": digest}
        history = await session.open("grpo-offline", {**s.model_dump(mode="json"), **config})
        if history.completed:
            raise LearnerError(f"run {run_id} already has steps; offline runs are not resumed: use a new run id")
        actor = await asyncio.to_thread(load_actor, s)  # learner.backend: CPU torch or verl
        advantages = group_advantages(data.rewards, data.groups)
        order = list(data.rewards)
        random.Random(s.seed).shuffle(order)
        size = s.tasks_per_step * s.group_size
        batches = [set(order[i : i + size]) for i in range(0, len(order), size)] * epochs
        curve, published = [], None
        for step, chosen in enumerate(batches):
            rows = [r for r in data.rows if r.rollout_id in chosen]
            stats = await asyncio.to_thread(actor.update, rows, advantages)
            weights, sha = await asyncio.to_thread(actor.save, run_id, step)
            await session.checkpoint(step, str(weights.parent), sha)
            if step == len(batches) - 1:
                published = await GRPO(s).publish(session, weights, sha)
            await session.complete_step(step, {**stats, "rollouts_trained": float(len(chosen))}, published)
            curve.append({"step": step, "weights_sha256": sha, **stats})
            say(f"offline step {step} of {len(batches)}: loss {stats['loss']:.4f}, clip {stats['clip_fraction']:.2f}")
        await session.finish("succeeded")
        return {
            "run_id": run_id,
            "dataset_sha256": digest,
            "rows": len(data.rows),
            "steps": curve,
            "published": published,
        }
    finally:
        await session.close()
        await store.close()
