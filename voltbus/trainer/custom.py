"""Agent Lightning 0.3's own algorithms inside ``Trainer``: an ``Algorithm`` subclass with ``run(train_dataset,
val_dataset)``, or an ``@algo`` function, runs against the whole system in this process with a store client (AL's
``LightningStore`` methods) on its bus, whose rollouts the trainer's runners serve."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from voltbus.store import Store, connect

from .algorithms import TrainerView, bus, system


class Algorithm:
    """AL's ``Algorithm`` base: implement ``run(train_dataset=None, val_dataset=None)`` (sync or async) with
    ``self.get_store()`` and ``self.get_initial_resources()``; ``Trainer(algorithm=...).fit`` runs it."""

    _trainer: Any = None
    _store: Store | None = None
    _adapter: Any = None
    _llm_proxy: Any = None
    _initial_resources: dict[str, Any] | None = None

    def is_async(self) -> bool:
        """Whether ``run`` is a coroutine function."""
        return inspect.iscoroutinefunction(self.run)

    def set_trainer(self, trainer: Any) -> None:
        """The ``Trainer`` that runs this algorithm."""
        self._trainer = trainer

    def get_trainer(self) -> Any:
        """The ``Trainer`` that runs this algorithm."""
        if self._trainer is None:
            raise ValueError("Trainer has not been set for this algorithm.")
        return self._trainer

    def set_store(self, store: Store) -> None:
        """The store client the algorithm enqueues with and reads from."""
        self._store = store

    def get_store(self) -> Store:
        """The store client (voltbus's, with AL's ``LightningStore`` methods) on the trainer's bus."""
        if self._store is None:
            raise ValueError("Store has not been set for this algorithm.")
        return self._store

    def set_adapter(self, adapter: Any) -> None:
        """The trainer's adapter settings (``Trainer(adapter=...)``)."""
        self._adapter = adapter

    def get_adapter(self) -> Any:
        """The trainer's adapter settings; the training tables are the projector's (``voltbus sql``)."""
        if self._adapter is None:
            raise ValueError("Adapter has not been set for this algorithm.")
        return self._adapter

    def set_llm_proxy(self, llm_proxy: Any) -> None:
        """Kept for AL's API: voltbus's gateway is the proxy."""
        self._llm_proxy = llm_proxy

    def get_llm_proxy(self) -> Any:
        """None: voltbus's gateway records model calls; no proxy object is handed to algorithms."""
        return self._llm_proxy

    def set_initial_resources(self, resources: dict[str, Any]) -> None:
        """The trainer's ``initial_resources``."""
        self._initial_resources = resources

    def get_initial_resources(self) -> dict[str, Any] | None:
        """The trainer's ``initial_resources`` (None when it has none)."""
        return self._initial_resources

    def run(self, train_dataset: Any = None, val_dataset: Any = None) -> Any:
        """The algorithm: subclasses implement it."""
        raise NotImplementedError("Subclasses must implement run().")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> Any:
        """Run ``run`` with a store client on the bus of a whole system serving ``agent``; its return value."""
        async with bus(trainer.settings, trainer.say) as settings, system(trainer, settings, agent) as s:
            store = await connect(
                settings=s.nats, projector_url=s.projector.url, projector_token=s.projector.token, name="voltbus-algo"
            )
            store.runner_group = s.runner.group  # the trainer's runners serve what the algorithm enqueues
            self.set_store(store)
            self.set_trainer(trainer)
            self.set_adapter(trainer.adapter)
            if trainer.initial_resources:
                self.set_initial_resources(trainer.initial_resources)
            datasets = {"train_dataset": train or None, "val_dataset": val or None}
            try:
                if self.is_async():
                    return await self.run(**datasets)
                return await asyncio.to_thread(self.run, **datasets)  # the runners share this loop: never block it
            finally:
                self._store = None
                await store.close()


class FastAlgorithm(Algorithm):
    """AL's marker for algorithms ``Trainer.dev()`` may run (instead of ``Baseline``)."""


class FunctionalAlgorithm(Algorithm):
    """An algorithm from a function (``@algo``): each of ``store``, ``train_dataset``, ``val_dataset``,
    ``initial_resources``, ``adapter``, ``llm_proxy`` its signature names is passed."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.params = inspect.signature(func).parameters
        self.__name__ = getattr(func, "__name__", type(self).__name__)
        self.__doc__ = func.__doc__

    def is_async(self) -> bool:
        """Whether the function is a coroutine function."""
        return inspect.iscoroutinefunction(self.func)

    def run(self, train_dataset: Any = None, val_dataset: Any = None) -> Any:
        """Call the function with what its signature asks for."""
        offered = {
            "store": lambda: self.get_store(),
            "adapter": lambda: self._adapter,
            "llm_proxy": lambda: self.get_llm_proxy(),
            "initial_resources": lambda: self.get_initial_resources(),
            "train_dataset": lambda: train_dataset,
            "val_dataset": lambda: val_dataset,
        }
        return self.func(**{name: make() for name, make in offered.items() if name in self.params})


def algo(func: Callable[..., Any]) -> FunctionalAlgorithm:
    """AL's ``@algo``: a function becomes an algorithm ``Trainer`` runs."""
    return FunctionalAlgorithm(func)
