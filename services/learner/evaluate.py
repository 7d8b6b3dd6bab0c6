"""Validation: run a set of tasks once with one policy version and read their mean reward back by SQL.

Both the learner service (``voltbus learner --val-tasks``) and ``Trainer.fit`` (``val_dataset``)
validate this way: before the first step with the starting weights, and after the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voltbus.store import EnqueueRolloutRequest

from .session import LearnerError, Session

if TYPE_CHECKING:
    from .loop import GRPO

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


async def validate(
    session: Session, tasks: Sequence[Any], loop: GRPO, trained: bool, say: Callable[[str], None]
) -> dict[str, float] | None:
    """Validate (mode ``val``) with the run's latest version if ``trained``, else with the starting
    weights (published as a version of the run); None without tasks."""
    if not tasks:
        return None
    latest = await session.store.get_resources_by_id(session.run_id) if trained else None
    if latest is not None:
        resources_id = f"{session.run_id}:{latest.version}"
    else:
        from .policy import initial_weights

        resources_id = await loop.publish(session, *initial_weights(loop.settings))
        await loop.served(resources_id)
    result = await evaluate(session, tasks, "val", resources_id)
    say(f"validation with {resources_id}: mean reward {result['mean_reward']:.3f} over {int(result['rollouts'])}")
    return result
