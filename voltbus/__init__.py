"""voltbus: event-sourced reinforcement learning and prompt optimization for AI agents.

Agent code written for Agent Lightning 0.3 runs after replacing ``import agentlightning as agl``
with ``import voltbus as agl``: the decorators, LitAgent, resources, emitters and store types below
keep its names and meaning.
"""

from __future__ import annotations

from voltbus.agent import (
    DummyTracer,
    FunctionalLitAgent,
    LitAgent,
    OperationContext,
    SpanCore,
    clear_active_tracer,
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_active_tracer,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    llm_rollout,
    operation,
    prompt_rollout,
    rollout,
    semconv,
    set_active_tracer,
)
from voltbus.schemas.resources import LLM, GenericResource, PromptTemplate, ProxyLLM
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.store import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Store,
    Triplet,
    Worker,
    connect,
)

SpanCoreFields = SpanCore
"""Agent Lightning's name for the core fields of a span."""

__all__ = [
    "APO",
    "Algorithm",
    "Attempt",
    "AttemptedRollout",
    "Baseline",
    "DummyTracer",
    "EnqueueRolloutRequest",
    "FastAlgorithm",
    "FunctionalLitAgent",
    "GRPO",
    "GenericResource",
    "LLM",
    "LitAgent",
    "NamedResources",
    "OperationContext",
    "PaginatedResult",
    "PromptTemplate",
    "ProxyLLM",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "Span",
    "SpanCore",
    "SpanCoreFields",
    "Store",
    "Trainer",
    "Triplet",
    "VERL",
    "Worker",
    "algo",
    "clear_active_tracer",
    "connect",
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

_TRAINER_NAMES = {"APO", "Algorithm", "Baseline", "FastAlgorithm", "GRPO", "Trainer", "VERL", "algo"}


def __getattr__(name: str) -> object:
    """``agl.Trainer`` and its algorithms, as Agent Lightning exports them, imported on first use (the
    trainer brings the services' settings and clients, which agent code alone never needs)."""
    if name in _TRAINER_NAMES:
        import voltbus.trainer

        return getattr(voltbus.trainer, name)
    raise AttributeError(f"module 'voltbus' has no attribute {name!r}")
