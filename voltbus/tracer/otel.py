"""Agent Lightning's ``tracer.otel``: ``OtelTracer``, voltbus's runner tracer (``LogTracer``) under AL's name and
life-cycle calls. Spans of the attempt in context go to the log; a runner records with its own tracer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from voltbus.services.clients.agent.global_spans import route_global_spans
from voltbus.services.clients.agent.otel import LogTracer, current_attempt
from voltbus.services.clients.store import Span
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, get_active_tracer, set_active_tracer

__all__ = ["OtelTracer"]


class OtelTracer(LogTracer):
    """Agent Lightning's ``OtelTracer()``: built without a store (``init_worker`` or ``trace_context`` gives one).

    Given to ``LitAgentRunner`` (or ``Trainer``) it is accepted, and the runner records with its own tracer of the
    same class. Used alone, ``trace_context(store=, rollout_id=, attempt_id=)`` records the spans made inside it
    (emitters, OpenTelemetry's global API) for that attempt and stores them when the block ends.
    """

    def __init__(self, *_: Any, **__: Any) -> None:
        super().__init__(store=None)
        self._last: tuple[str, str] | None = None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Agent Lightning's set-up call: nothing to set up."""

    def init_worker(self, worker_id: int, store: Any = None, *args: Any, **kwargs: Any) -> None:
        """Bind the store spans are written to."""
        if store is not None:
            self.store = store

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Agent Lightning's per-worker tear-down: nothing to do."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Agent Lightning's tear-down: nothing to do (``shutdown`` stops the provider)."""

    @contextlib.contextmanager
    def lifespan(self, store: Any = None) -> Iterator[OtelTracer]:
        """``init`` and ``init_worker(0, store)`` for the block."""
        self.init_worker(0, store)
        yield self

    @contextlib.asynccontextmanager
    async def trace_context(
        self,
        name: str | None = None,
        *,
        store: Any = None,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
    ) -> AsyncIterator[OtelTracer]:
        """Record the block's spans for ``rollout_id``/``attempt_id`` (this tracer active for the emitters), then
        store them (when a store is bound and a rollout named)."""
        self.init_worker(0, store)
        owner = (rollout_id or "rollout-local", attempt_id or "attempt-local")
        previous = get_active_tracer()
        set_active_tracer(self)
        route_global_spans()
        try:
            with self.attempt(*owner):
                yield self
        finally:
            if previous is not None:
                set_active_tracer(previous)
            else:
                clear_active_tracer()
            self._last = owner
        if self.store is not None and rollout_id is not None:
            await self.flush(rollout_id)

    def get_last_trace(self) -> list[Span]:
        """The current attempt's stored spans; outside one, those of the last ``trace_context``."""
        if current_attempt.get() is None and self._last is not None:
            return self.trace_of(*self._last)
        return super().get_last_trace()
