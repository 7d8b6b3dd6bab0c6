"""Evaluation: run a set of tasks once with one policy version and read their mean reward back by SQL
(GRPO's validation, ``grpo/validate.py``, and ``Trainer``'s ``Baseline``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voltbus.services.clients.store import EnqueueRolloutRequest

from .session import LearnerError, Session

EVAL_SQL = (Path(__file__).parent / "eval_rewards.sql").read_text()


async def evaluate(session: Session, tasks: Sequence[Any], mode: str, resources_id: str | None) -> dict[str, float]:
    """Run ``tasks`` once in ``mode`` with ``resources_id``; mean reward (0 for a rollout without one)."""
    requests = [EnqueueRolloutRequest(input=t, mode=mode, resources_id=resources_id) for t in tasks]
    rollouts = await session.store.enqueue_many_rollouts(requests)
    ids = [r.rollout_id for r in rollouts]
    done = await session.store.wait_for_rollouts(rollout_ids=ids, timeout=600)
    if len(done) < len(ids):
        raise LearnerError(f"evaluation: {len(ids) - len(done)} of {len(ids)} rollouts did not finish in 600 s")
    [row] = (await session.query(EVAL_SQL, {"rollouts": ids})).to_pylist()
    return {"mean_reward": float(row["mean_reward"] or 0.0), "rollouts": float(row["rollouts"])}
