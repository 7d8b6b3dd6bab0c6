"""``Trainer``: Agent Lightning's entry point. ``Trainer(algorithm=GRPO(...), n_runners=8).fit(agent, tasks)``
trains the agent's policy with the whole system (bus, coordinator, projector, CPU inference, gateway,
runners, learner) in this process; ``.dev(agent, tasks)`` runs the tasks once with fixed resources.

Components may be given as instances, classes or import strings (``"voltbus.trainer.GRPO"``).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from voltbus.services.settings import LearnerSettings, Settings

from .algorithms import GRPO, Baseline
from .apo import APO

__all__ = ["APO", "Baseline", "GRPO", "Trainer"]

log = logging.getLogger(__name__)


def _instance(component: Any, default: type | None = None) -> Any:
    """An instance from an instance, a class, or an import string ``"module:attr"`` / ``"module.attr"``."""
    if component is None:
        return default() if default is not None else None
    if isinstance(component, str):
        module, _, attr = component.rpartition(":") if ":" in component else component.rpartition(".")
        component = getattr(importlib.import_module(module), attr)
    return component() if isinstance(component, type) else component


class Trainer:
    """Runs an algorithm on an agent (Agent Lightning's ``Trainer`` shape)."""

    def __init__(
        self,
        algorithm: Any = None,
        n_runners: int = 8,
        initial_resources: dict[str, Any] | None = None,
        settings: Settings | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.algorithm = _instance(algorithm, Baseline)
        self.n_runners = n_runners
        self.initial_resources = dict(initial_resources or {})
        self.settings = settings or Settings()
        self.say = say

    def fit(self, agent: Any, train_dataset: Sequence[Any], val_dataset: Sequence[Any] | None = None) -> Any:
        """Train on ``train_dataset`` (then evaluate on ``val_dataset`` if given); returns the algorithm's result."""
        return asyncio.run(self.algorithm.fit(self, agent, list(train_dataset), list(val_dataset or [])))

    def dev(self, agent: Any, dataset: Sequence[Any]) -> Any:
        """Run every task once with fixed resources (no learning): a dry run of the agent."""
        return asyncio.run(Baseline().fit(self, agent, list(dataset), []))


def learner_settings(**overrides: Any) -> LearnerSettings:
    """Learner settings with keyword overrides (validated)."""
    return LearnerSettings(**overrides)
