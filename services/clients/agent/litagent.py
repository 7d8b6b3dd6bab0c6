"""``LitAgent``, the base class of an agent the runner drives (Agent Lightning 0.3's ``litagent/litagent.py``).

It owns the rollout entry points, their train/validation dispatch and the weak links to its trainer and runner.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from voltbus.services.clients.store.types import NamedResources, Rollout
    from voltbus.services.clients.telemetry.tracing import Tracer

T = TypeVar("T")

__all__ = ["LitAgent", "is_v0_1_rollout_api"]

RolloutRawResult = Any
"""What a rollout may return: None, a float reward, or a list of spans (the runner sorts them out)."""


def is_v0_1_rollout_api(func: Callable[..., object]) -> bool:
    """True when ``func`` uses Agent Lightning 0.1's rollout signature, which had a ``rollout_id`` parameter.

    >>> is_v0_1_rollout_api(lambda task, rollout_id, resources: None), is_v0_1_rollout_api(lambda task, llm: None)
    (True, False)
    """
    return "rollout_id" in inspect.signature(func).parameters


class LitAgent(Generic[T]):
    """Base class of an agent: override ``rollout`` (or ``rollout_async``), or the train/validation variants.

    The runner calls ``training_rollout[_async]`` for ``mode == "train"`` and ``validation_rollout[_async]``
    otherwise; by default both delegate to ``rollout[_async]``.
    """

    def __init__(self, *, trained_agents: str | None = None) -> None:
        """Create the agent; ``trained_agents`` is deprecated and only kept for compatibility."""
        if trained_agents is not None:
            warnings.warn(
                "`trained_agents` is deprecated. Configure `agent_match` in adapter instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        self.trained_agents = trained_agents
        self._trainer_ref: weakref.ReferenceType[Any] | None = None
        self._runner_ref: weakref.ReferenceType[Any] | None = None

    def is_async(self) -> bool:
        """True when the subclass overrides ``rollout_async`` or one of its train/validation variants."""
        cls = type(self)
        return (
            cls.training_rollout_async is not LitAgent.training_rollout_async
            or cls.validation_rollout_async is not LitAgent.validation_rollout_async
            or cls.rollout_async is not LitAgent.rollout_async
        )

    def set_trainer(self, trainer: Any) -> None:
        """Attach the trainer, held weakly."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """The trainer; ValueError when it was never set or has been garbage collected."""
        return _deref(self._trainer_ref, "Trainer")

    @property
    def trainer(self) -> Any:
        """Shortcut for ``get_trainer()``."""
        return self.get_trainer()

    def set_runner(self, runner: Any) -> None:
        """Attach the runner, held weakly (the runner calls this in ``init``)."""
        self._runner_ref = weakref.ref(runner)

    def get_runner(self) -> Any:
        """The runner; ValueError when it was never set or has been garbage collected."""
        return _deref(self._runner_ref, "Runner")

    @property
    def runner(self) -> Any:
        """Shortcut for ``get_runner()``."""
        return self.get_runner()

    def get_tracer(self) -> Tracer:
        """The runner's tracer, else the trainer's; the runner's ValueError when neither is attached."""
        runner = self._runner_ref() if self._runner_ref is not None else None
        if runner is not None and hasattr(runner, "tracer"):
            return runner.tracer
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if runner is None and trainer is None:
            self.get_runner()  # raises Agent Lightning's "Runner has not been set ..." error
        return self.get_trainer().tracer

    @property
    def tracer(self) -> Tracer:
        """Shortcut for ``get_tracer()``."""
        return self.get_tracer()

    def on_rollout_start(self, task: Any, runner: Any, tracer: Tracer) -> None:
        """Deprecated no-op; the runner never calls it (use a runner hook instead)."""

    def on_rollout_end(self, task: Any, rollout: Rollout, runner: Any, tracer: Tracer) -> None:
        """Deprecated no-op; the runner never calls it (use a runner hook instead)."""

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task; subclasses override this (or ``rollout_async``)."""
        raise NotImplementedError("Agents must implement the `rollout` method.")

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task asynchronously; subclasses override this (or ``rollout``)."""
        raise NotImplementedError("Agents must implement the `rollout_async` method for async operations.")

    def training_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """One training task; delegates to ``rollout``."""
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """One validation (or test) task; delegates to ``rollout``, as Agent Lightning does."""
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """One training task, asynchronously; delegates to ``rollout_async``."""
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """One validation (or test) task, asynchronously; delegates to ``rollout_async``."""
        return await self.rollout_async(task, resources, rollout)


def _deref(ref: weakref.ReferenceType[Any] | None, what: str) -> Any:
    """The object behind ``ref``, or Agent Lightning's ValueError for an unset or collected reference."""
    if ref is None:
        raise ValueError(f"{what} has not been set for this agent.")
    target = ref()
    if target is None:
        raise ValueError(f"{what} reference is no longer valid (object has been garbage collected).")
    return target
