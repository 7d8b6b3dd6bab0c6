"""The algorithms ``Trainer`` runs: ``GRPO`` (the CPU torch learner through the whole system) and
``Baseline`` (the tasks once with fixed resources: evaluation, data collection). Importing this
module never loads torch; ``GRPO.fit`` does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from voltbus.projections.adapter import AdapterSettings
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
    adapter: AdapterSettings | None
    """The live projector's adapter settings (``Trainer(adapter=...)``); None: the defaults."""
    hooks: Sequence[Any]
    """The runner's hooks (``Trainer(hooks=...)``)."""
    max_rollouts: int | None
    """Rollouts per runner in ``Baseline`` (``Trainer(max_rollouts=...)``); None: every task."""


def system(trainer: TrainerView, settings: Settings, agent: Any) -> AbstractAsyncContextManager[Settings]:
    """The whole system but the learner for one ``Trainer`` call: its runners, hooks and adapter, its own group."""
    return local_system(
        settings, agent, trainer.n_runners, run_group(settings), adapter=trainer.adapter, hooks=trainer.hooks
    )


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
        self.validate_before = True
        """Validate on ``val`` before training too (verl's ``trainer.val_before_train``)."""
        self.inspect: Callable[[Session], Awaitable[Any]] | None = None
        """Called with the run's session after the last validation, while the system still runs (its projection
        answers ``session.query``); what it returns is the result's ``inspected``."""

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
            system(trainer, settings, agent) as wired,
        ):
            store = await connect(settings=wired.nats, name="voltbus-learner")
            store.runner_group = wired.runner.group  # the run's rollouts go to the runners of ``local_system`` only
            session = Session(store, run_id, wired.projector)
            try:
                loop = Loop(wired.learner, trainer.initial_resources)
                before = await validate(session, val if self.validate_before else [], loop, False, trainer.say)
                await loop.run(session, train, trainer.say)
                after = await validate(session, val, loop, True, trainer.say)
                inspected = await self.inspect(session) if self.inspect is not None else None
            finally:
                await session.close()
                await store.close()
        self.result = {
            "run_id": run_id,
            "before": before,
            "after": after,
            "steps": loop.curve,
            "namespace": wired.nats.namespace,
            **({"inspected": inspected} if self.inspect is not None else {}),
        }
        return self.result


class Baseline:
    """Run the tasks once with fixed resources (``Trainer(initial_resources=...)``); returns the mean reward."""

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """Evaluate ``train`` (and ``val``) with the trainer's initial resources; at most ``n_runners x
        max_rollouts`` tasks in all (train first) when ``max_rollouts`` is set, as AL's runners stop there."""
        train, val = capped(trainer, train, val)
        async with (
            bus(trainer.settings, trainer.say) as settings,
            system(trainer, settings, agent) as s,
        ):
            store = await connect(settings=s.nats, name="voltbus-baseline")
            store.runner_group = s.runner.group
            session = Session(store, f"baseline-{uuid.uuid4().hex[:8]}", s.projector)
            try:
                published = await store.add_resources(trainer.initial_resources) if trainer.initial_resources else None
                pinned = f"{published.resources_id}:{published.version}" if published else None
                out = {}
                for mode, tasks in (("train", train), ("val", val)):
                    if tasks:
                        out[mode] = await evaluate(session, tasks, mode, pinned)
            finally:
                await session.close()
                await store.close()
        trainer.say(f"baseline: {out}")
        return out


def capped(trainer: TrainerView, train: list[Any], val: list[Any]) -> tuple[list[Any], list[Any]]:
    """The tasks ``Baseline`` runs under ``max_rollouts``: the first ``n_runners x max_rollouts``, train first."""
    if trainer.max_rollouts is None or len(train) + len(val) <= trainer.n_runners * trainer.max_rollouts:
        return train, val
    cap = trainer.n_runners * trainer.max_rollouts
    trainer.say(
        f"max_rollouts={trainer.max_rollouts} x {trainer.n_runners} runners: running {cap} of "
        f"{len(train) + len(val)} tasks"
    )
    return train[:cap], val[: max(0, cap - len(train))]
