"""The algorithms ``Trainer`` runs: ``GRPO`` (the CPU torch learner through the whole system) and
``Baseline`` (the tasks once with fixed resources: evaluation, data collection). Importing this
module never loads torch; ``GRPO.fit`` does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

from voltbus.services.learner.backend import check_backend
from voltbus.services.learner.evaluate import evaluate
from voltbus.services.learner.grpo.validate import validate
from voltbus.services.learner.session import Session, new_run_id
from voltbus.services.settings import LearnerSettings, Settings
from voltbus.store import connect

from .system import local_system, run_group


class TrainerView(Protocol):
    """What an algorithm's ``fit`` reads of the ``voltbus.trainer.Trainer`` that runs it (which imports the
    algorithms, so they do not import it)."""

    n_runners: int
    initial_resources: dict[str, Any]
    settings: Settings
    say: Callable[[str], None]


@asynccontextmanager
async def bus(settings: Settings, say: Callable[[str], None]) -> AsyncIterator[Settings]:
    """The configured bus if one answers, else an embedded one for the duration."""
    from voltbus.services.ops.embedded import answers, start_embedded

    if await answers(settings):
        yield settings
        return
    server = start_embedded(settings, say)
    try:
        yield settings.model_copy(update={"nats": settings.nats.model_copy(update={"url": server.url})})
    finally:
        server.stop()


class GRPO:
    """GRPO on the CPU model: ``GRPO(model_dir=..., steps=20, tasks_per_step=16, group_size=8, lr=1e-4)``;
    any ``LearnerSettings`` field may be given."""

    def __init__(self, **settings: Any) -> None:
        self.overrides = dict(settings)
        check_backend(LearnerSettings(**self.overrides))  # a bad setting, or verl missing, fails here
        self.result: dict[str, Any] = {}

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """Train; evaluate on ``val`` before and after when given; returns the run id and the evaluations."""
        from voltbus.services.learner.grpo.loop import GRPO as Loop  # torch is needed from here on

        if not train:  # refused before the system starts and the run is registered
            raise ValueError("the training dataset is empty")

        base = trainer.settings.model_copy(deep=True)
        base.learner = base.learner.model_copy(update=self.overrides)
        run_id = base.learner.run_id or new_run_id()
        async with (
            bus(base, trainer.say) as settings,
            local_system(settings, agent, trainer.n_runners, run_group(settings)) as wired,
        ):
            store = await connect(settings=wired.nats, name="voltbus-learner")
            store.runner_group = wired.runner.group  # the run's rollouts go to the runners of ``local_system`` only
            session = Session(store, run_id, wired.projector)
            try:
                loop = Loop(wired.learner, trainer.initial_resources)
                before = await validate(session, val, loop, False, trainer.say)
                await loop.run(session, train, trainer.say)
                after = await validate(session, val, loop, True, trainer.say)
            finally:
                await session.close()
                await store.close()
        self.result = {
            "run_id": run_id,
            "before": before,
            "after": after,
            "steps": loop.curve,
            "namespace": wired.nats.namespace,
        }
        return self.result


class Baseline:
    """Run the tasks once with fixed resources (``Trainer(initial_resources=...)``); returns the mean reward."""

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """Evaluate ``train`` (and ``val``) with the trainer's initial resources."""
        async with (
            bus(trainer.settings, trainer.say) as settings,
            local_system(settings, agent, trainer.n_runners, run_group(settings)) as s,
        ):
            store = await connect(settings=s.nats, name="voltbus-baseline")
            store.runner_group = s.runner.group
            session = Session(store, f"baseline-{uuid.uuid4().hex[:8]}", s.projector)
            try:
                published = await store.add_resources(trainer.initial_resources) if trainer.initial_resources else None
                pinned = f"{published.resources_id}:{published.version}" if published else None
                out = {"train": await evaluate(session, train, "train", pinned)}
                if val:
                    out["val"] = await evaluate(session, val, "val", pinned)
            finally:
                await session.close()
                await store.close()
        trainer.say(f"baseline: {out}")
        return out
