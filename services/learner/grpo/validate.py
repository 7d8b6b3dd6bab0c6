"""Validation: both the learner service (``voltbus learner --val-tasks``) and ``Trainer.fit``
(``val_dataset``) run the tasks before the first step with the starting weights, and after the last one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..evaluate import evaluate
from ..session import Session

if TYPE_CHECKING:
    from .loop import GRPO


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
