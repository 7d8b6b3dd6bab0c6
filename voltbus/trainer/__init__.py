"""``Trainer``: Agent Lightning's entry point. ``Trainer(algorithm=GRPO(...), n_runners=8).fit(agent, tasks)``
trains the agent's policy with the whole system (bus, coordinator, projector, CPU inference, gateway,
runners, learner) in this process; ``.dev(agent, tasks)`` runs the tasks once with fixed resources.

Components may be given as instances, classes, import strings (``"voltbus.trainer.GRPO"``) or AL's
``{"type": ..., **kwargs}`` dicts; Agent Lightning 0.3's other arguments are resolved in ``compat``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from voltbus.services.settings import LearnerSettings, Settings

from . import compat
from .algorithms import GRPO, Baseline
from .apo import APO
from .custom import Algorithm, FastAlgorithm, algo
from .verl import VERL

__all__ = ["APO", "Algorithm", "Baseline", "FastAlgorithm", "GRPO", "Trainer", "VERL", "algo"]

log = logging.getLogger(__name__)


def _instance(component: Any, default: type | None = None) -> Any:
    """An instance from an instance, a class, an import string ``"module:attr"`` / ``"module.attr"``, or a dict
    ``{"type": <one of those>, **keyword arguments}``."""
    if component is None:
        return default() if default is not None else None
    kwargs: dict[str, Any] = {}
    if isinstance(component, Mapping):
        if "type" not in component:
            raise ValueError(f"a component given as a dict needs a 'type' key: {dict(component)!r}")
        kwargs = {k: v for k, v in component.items() if k != "type"}
        component = component["type"]
    if isinstance(component, str):
        module, _, attr = component.rpartition(":") if ":" in component else component.rpartition(".")
        component = getattr(importlib.import_module(module), attr)
    return component(**kwargs) if isinstance(component, type) else component


def _algorithm(component: Any) -> Any:
    """The algorithm instance, or a precise error for one voltbus cannot run."""
    algorithm = _instance(component, Baseline)
    if not inspect.iscoroutinefunction(getattr(algorithm, "fit", None)):
        raise TypeError(
            f"Trainer(algorithm={type(algorithm).__name__}): voltbus runs GRPO, APO, VERL, Baseline, a subclass of "
            "voltbus.algorithm.Algorithm, an @algo function, or any object with `async fit(trainer, agent, train, val)`"
        )
    return algorithm


def _tasks(dataset: Any, what: str) -> list[Any]:
    """AL's ``Dataset`` (``__len__`` + ``__getitem__``) or any iterable, as a list."""
    if dataset is None:
        return []
    if isinstance(dataset, str | bytes):
        raise TypeError(f"{what} is a string: pass the tasks themselves (a list, or a Dataset); voltbus has no fit_v0")
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__") and not isinstance(dataset, Mapping):
        return [dataset[i] for i in range(len(dataset))]
    return list(dataset)


class Trainer:
    """Runs an algorithm on an agent (Agent Lightning's ``Trainer``, with its 0.3 arguments)."""

    def __init__(
        self,
        algorithm: Any = None,
        n_runners: int | None = None,
        initial_resources: dict[str, Any] | None = None,
        settings: Settings | None = None,
        say: Callable[[str], None] = print,
        *,
        n_workers: int | None = None,
        max_rollouts: int | None = None,
        max_tasks: int | None = None,
        adapter: Any = None,
        triplet_exporter: Any = None,
        tracer: Any = None,
        store: Any = None,
        runner: Any = None,
        strategy: Any = None,
        llm_proxy: Any = None,
        hooks: Any = None,
        port: int | None = None,
        daemon: bool = True,
        dev: bool = False,
    ) -> None:
        self.algorithm = _algorithm(algorithm)
        self.n_runners = compat.runner_count(n_runners, n_workers, strategy)
        self.n_workers = self.n_runners
        self.max_rollouts = compat.rollout_cap(max_rollouts, max_tasks)
        self.max_tasks = self.max_rollouts
        if adapter is not None and triplet_exporter is not None:
            compat.warn_unused("triplet_exporter", "adapter is given and wins (triplet_exporter is its old name)")
        self.adapter = compat.adapter_settings(adapter if adapter is not None else triplet_exporter)
        self.triplet_exporter = self.adapter
        self.initial_resources = dict(initial_resources or {})
        self.settings = compat.with_bus(settings or Settings(), store, port)
        self.port = port
        self.hooks = compat.normalized_hooks(hooks)
        compat.check_runner(runner)
        self.store, self.runner, self.tracer, self.strategy, self.llm_proxy = store, runner, tracer, strategy, llm_proxy
        given = {"tracer": tracer, "llm_proxy": llm_proxy, "strategy": strategy, "daemon": not daemon, "dev": dev}
        for name, value in given.items():
            if value is not None and value is not False:
                compat.warn_unused(name, compat.NO_EFFECT[name])
        if self.max_rollouts is not None and not isinstance(self.algorithm, Baseline):
            compat.warn_unused("max_rollouts", f"{type(self.algorithm).__name__} decides how many rollouts run; "
                               "it caps Trainer.dev() and Baseline (n_runners x max_rollouts tasks)")  # fmt: skip
        self.say = say

    def fit(self, agent: Any, train_dataset: Any = None, val_dataset: Any = None) -> Any:
        """Train on ``train_dataset`` (then evaluate on ``val_dataset`` if given); returns the algorithm's result."""
        self._bind(agent)
        train, val = _tasks(train_dataset, "train_dataset"), _tasks(val_dataset, "val_dataset")
        return asyncio.run(self.algorithm.fit(self, agent, train, val))

    def dev(self, agent: Any, train_dataset: Any = None, *, val_dataset: Any = None) -> Any:
        """Run every task once with fixed resources (no learning): a dry run of the agent (or the trainer's
        algorithm when it is a ``FastAlgorithm``, as in AL)."""
        self._bind(agent)
        train, val = _tasks(train_dataset, "train_dataset"), _tasks(val_dataset, "val_dataset")
        if not train and not val:
            raise ValueError("Trainer.dev: no tasks (give train_dataset, val_dataset, or both)")
        fast = self.algorithm if isinstance(self.algorithm, FastAlgorithm) else Baseline()  # AL's rule
        return asyncio.run(fast.fit(self, agent, train, val))

    def _bind(self, agent: Any) -> None:
        if callable(getattr(agent, "set_trainer", None)):  # AL's LitAgent.get_trainer() works in the agent
            agent.set_trainer(self)


def learner_settings(**overrides: Any) -> LearnerSettings:
    """Learner settings with keyword overrides (validated)."""
    return LearnerSettings(**overrides)
