"""Spans made with OpenTelemetry's global API (``trace.get_tracer(...)``) inside an attempt, routed to it.

``route_global_spans()`` makes the process's global tracer provider an SDK one carrying ``ROUTER``
(or adds ``ROUTER`` to the SDK provider already set), as Agent Lightning's tracers install themselves.
``ROUTER`` hands each span to the tracer of the attempt current in the span's context when it starts;
a span started outside any attempt is left to the provider's other processors (none, when ours).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from .otel import current_collector

log = logging.getLogger(__name__)


class AttemptRouter(SpanProcessor):
    """Gives each span to the collector of the attempt current when it started, and its end to the same one."""

    def __init__(self) -> None:
        self.routes: dict[tuple[int, int], SpanProcessor] = {}
        self.lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        collector = current_collector.get()
        if collector is None:
            return  # outside every attempt: recorded nowhere by voltbus
        collector.on_start(span, parent_context)
        with self.lock:
            self.routes[(span.context.trace_id, span.context.span_id)] = collector

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        with self.lock:
            collector = self.routes.pop((ctx.trace_id, ctx.span_id), None) if ctx is not None else None
        if collector is not None:
            collector.on_end(span)

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


ROUTER = AttemptRouter()
"""The one router of this process (the global provider is process-wide, and set once)."""
_installed: list[object] = []
_install_lock = threading.Lock()


def route_global_spans() -> bool:
    """Route the global API's spans to the attempt in context; False (with a warning) where the global
    provider is set to one that takes no span processor. Idempotent."""
    with _install_lock:
        current = trace.get_tracer_provider()
        if any(p is current for p in _installed):
            return True
        if isinstance(current, trace.ProxyTracerProvider):  # none set yet: ours, as Agent Lightning's tracers do
            provider = TracerProvider()
            provider.add_span_processor(ROUTER)
            trace.set_tracer_provider(provider)
            current = trace.get_tracer_provider()
            if current is provider:
                _installed.append(provider)
                return True
        if isinstance(current, TracerProvider):  # the agent's own SDK provider: it keeps its exporters
            current.add_span_processor(ROUTER)
            _installed.append(current)
            return True
        log.warning(
            "the global OpenTelemetry tracer provider is a %s, which takes no span processor: spans made with "
            "opentelemetry.trace.get_tracer() are not recorded",
            type(current).__name__,
        )
        return False
