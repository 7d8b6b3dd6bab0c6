"""The agent-side SDK: Agent Lightning's LitAgent, decorators, emitters and tracing, on voltbus.

A façade: the implementation is in ``voltbus.services.clients`` (``agent`` and ``telemetry``).
"""

from __future__ import annotations

from voltbus.services.clients.agent.decorators import FunctionalLitAgent, llm_rollout, prompt_rollout, rollout
from voltbus.services.clients.agent.litagent import LitAgent
from voltbus.services.clients.telemetry import semconv
from voltbus.services.clients.telemetry.emitters import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)
from voltbus.services.clients.telemetry.operations import OperationContext, operation
from voltbus.services.clients.telemetry.tracing import (
    DummyTracer,
    SpanCore,
    clear_active_tracer,
    get_active_tracer,
    set_active_tracer,
)

__all__ = [
    "DummyTracer",
    "FunctionalLitAgent",
    "LitAgent",
    "OperationContext",
    "SpanCore",
    "clear_active_tracer",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_active_tracer",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "llm_rollout",
    "operation",
    "prompt_rollout",
    "rollout",
    "semconv",
    "set_active_tracer",
]
