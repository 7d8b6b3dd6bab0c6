"""Agent Lightning's ``runner`` module: ``LitAgentRunner`` (``run_context``, ``step``, ``iter``) on voltbus's runner,
which runs the agent in this process against the store's bus. ``Runner`` is AL's base-class name for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Generic, TypeVar

from voltbus.agent import LitAgent
from voltbus.services.clients.store import Rollout, Store
from voltbus.services.runner.app import Runner as BusRunner
from voltbus.services.settings import Settings
from voltbus.store.lightning import BusStore
from voltbus.tracer import OtelTracer

__all__ = ["LitAgentRunner", "Runner"]

T = TypeVar("T")
STOP_POLL_S = 0.5
"""Longest wait of ``iter`` on Agent Lightning's stop event before it looks again (a thread waits on it)."""


def bus_settings(store: Any) -> Settings:
    """The settings a runner needs to reach the bus (and projector) of ``store``."""
    if isinstance(store, BusStore):
        return store.settings
    if isinstance(store, Store):
        settings = Settings()
        projector = settings.projector.model_copy(update={"url": store.projector_url, "token": store.projector_token})
        return settings.model_copy(update={"nats": store.settings, "projector": projector})
    raise TypeError(
        f"a voltbus runner needs a voltbus store (InMemoryLightningStore, LightningStoreClient(bus_url) or "
        f"voltbus.connect(bus_url)), not {type(store).__name__}"
    )


class LitAgentRunner(Generic[T]):
    """``LitAgentRunner(tracer)``: runs a ``LitAgent`` on tasks of a store, as Agent Lightning's does.

    Each ``step`` or ``iter`` opens voltbus's runner (one slot, the agent in this process) on the store's bus and
    closes it at its end. The tracer is accepted (any of AL's); the runner records with voltbus's own tracer, which
    the agent and the hooks see as ``tracer``. ``poll_interval``, ``interval_jitter``, ``heartbeat_launch_mode``
    and ``heartbeat_include_gpu`` are accepted and ignored (runners wait on the bus; heartbeats run in a thread).
    """

    def __init__(
        self,
        tracer: Any = None,
        max_rollouts: int | None = None,
        poll_interval: float = 5.0,
        heartbeat_interval: float = 10.0,
        interval_jitter: float = 0.5,
        heartbeat_launch_mode: str = "thread",
        heartbeat_include_gpu: bool = False,
    ) -> None:
        self._tracer = tracer if tracer is not None else OtelTracer()
        self._max_rollouts = max_rollouts
        self._heartbeat_interval = heartbeat_interval
        self._agent: LitAgent[T] | None = None
        self._hooks: list[Any] = []
        self._store: Any = None
        self.worker_id: int | None = None

    @property
    def tracer(self) -> Any:
        """The tracer this runner was given."""
        return self._tracer

    def init(self, agent: LitAgent[T], *, hooks: Sequence[Any] | None = None, **_: Any) -> None:
        """Set the agent and the hooks."""
        self._agent, self._hooks = agent, list(hooks or [])

    def init_worker(self, worker_id: int, store: Any, **_: Any) -> None:
        """Set the store (voltbus numbers its workers on the bus: ``worker_id`` is kept, not used as the id)."""
        self.worker_id, self._store = worker_id, store

    def teardown_worker(self, worker_id: int, *_: Any, **__: Any) -> None:
        """Forget the store."""
        self._store = None

    def teardown(self, *_: Any, **__: Any) -> None:
        """Forget the agent and the hooks."""
        self._agent, self._hooks = None, []

    @contextlib.contextmanager
    def run_context(
        self, *, agent: LitAgent[T], store: Any, hooks: Sequence[Any] | None = None, worker_id: int | None = None
    ) -> Iterator[LitAgentRunner[T]]:
        """``init`` and ``init_worker`` for the block, torn down at its end."""
        self.init(agent, hooks=hooks)
        self.init_worker(worker_id or 0, store)
        try:
            yield self
        finally:
            self.teardown_worker(worker_id or 0)
            self.teardown()

    def get_agent(self) -> LitAgent[T]:
        """The agent; ValueError outside ``run_context``/``init``."""
        if self._agent is None:
            raise ValueError("Agent not initialized. Call init() first.")
        return self._agent

    def get_store(self) -> Any:
        """The store; ValueError outside ``run_context``/``init_worker``."""
        if self._store is None:
            raise ValueError("Store not initialized. Call init_worker() first.")
        return self._store

    @contextlib.asynccontextmanager
    async def _runner(self) -> AsyncIterator[BusRunner]:
        settings = bus_settings(self.get_store())
        runner_cfg = settings.runner.model_copy(update={"slots": 1, "heartbeat_s": self._heartbeat_interval})
        async with BusRunner(settings.model_copy(update={"runner": runner_cfg}), self.get_agent(), self._hooks) as r:
            yield r

    async def step(
        self, input: T, *, resources: dict[str, Any] | None = None, mode: str | None = None, event: Any = None
    ) -> Rollout:
        """Run one task now (a new rollout, not queued); the agent's exception propagates; returns the rollout."""
        async with self._runner() as runner:
            return await runner.step(input, resources=resources, mode=mode)

    async def iter(self, *, event: Any = None) -> None:
        """Claim and run the store's queued rollouts until ``event`` is set (or ``max_rollouts`` ran)."""
        async with self._runner() as runner:
            stop = asyncio.Event()
            watcher = asyncio.create_task(_watch(event, stop)) if event is not None else None
            try:
                await runner.run(stop, self._max_rollouts)
            finally:
                if watcher is not None:
                    watcher.cancel()


async def _watch(event: Any, stop: asyncio.Event) -> None:
    """Set ``stop`` once Agent Lightning's ``event`` (a threading or multiprocessing event) is set."""
    while not await asyncio.to_thread(event.wait, STOP_POLL_S):  # a thread's or a process's event
        pass
    stop.set()


Runner = LitAgentRunner
"""Agent Lightning's runner base class; voltbus has one runner."""
