"""Agent Lightning's ``tracer.agentops``: ``AgentOpsTracer``, accepted with its arguments and recording as
``OtelTracer`` does; AgentOps is neither needed nor used (the runner's own instrumentation records OpenAI calls)."""

from __future__ import annotations

from typing import Any

from .otel import OtelTracer

__all__ = ["AgentOpsTracer"]


class AgentOpsTracer(OtelTracer):
    """Agent Lightning's ``AgentOpsTracer(agentops_managed=True, instrument_managed=True, daemon=True)``: the
    arguments are accepted and ignored; OpenAI client calls are recorded by voltbus's runner without AgentOps."""

    def __init__(
        self, *, agentops_managed: bool = True, instrument_managed: bool = True, daemon: bool = True, **_: Any
    ) -> None:
        super().__init__()
        self.agentops_managed = agentops_managed
        self.instrument_managed = instrument_managed
        self.daemon = daemon
