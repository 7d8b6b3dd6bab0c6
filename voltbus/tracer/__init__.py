"""Agent Lightning's ``tracer`` module: ``OtelTracer`` and ``AgentOpsTracer`` (voltbus's runner tracer under their
names), ``DummyTracer``, the ``Tracer`` protocol and the active-tracer functions."""

from __future__ import annotations

from voltbus.agent import DummyTracer, clear_active_tracer, get_active_tracer, set_active_tracer
from voltbus.services.clients.telemetry.tracing import Tracer

from .agentops import AgentOpsTracer
from .otel import OtelTracer

__all__ = [
    "AgentOpsTracer",
    "DummyTracer",
    "OtelTracer",
    "Tracer",
    "clear_active_tracer",
    "get_active_tracer",
    "set_active_tracer",
]
