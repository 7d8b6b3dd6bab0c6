"""voltbus: event-sourced reinforcement learning and prompt optimization for AI agents.

Agent code written for Agent Lightning 0.3 runs after replacing ``import agentlightning as agl``
with ``import voltbus as agl``: the decorators, LitAgent, resources, emitters and store types below
keep its names and meaning.
"""

from __future__ import annotations

from voltbus.adapter import (
    Adapter,
    LlmProxyTraceToTriplet,
    TraceAdapter,
    TracerTraceToTriplet,
    TraceToMessages,
    TraceToTripletBase,
)
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
from voltbus.env_var import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from voltbus.logging import configure_logger, setup_logging, setup_module_logging
from voltbus.schemas.resources import LLM, GenericResource, PromptTemplate, ProxyLLM
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.store import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    InMemoryLightningStore,
    LightningStore,
    LightningStoreClient,
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
from voltbus.types import (
    AttemptStatus,
    Dataset,
    Hook,
    Resource,
    ResourceUnion,
    RolloutMode,
    RolloutRawResult,
    RolloutStatus,
    TaskInput,
    WorkerStatus,
)

SpanCoreFields = SpanCore
"""Agent Lightning's name for the core fields of a span."""

__all__ = [
    "APO",
    "Adapter",
    "AgentOpsTracer",
    "Algorithm",
    "Attempt",
    "AttemptStatus",
    "AttemptedRollout",
    "Baseline",
    "Dataset",
    "DummyTracer",
    "EnqueueRolloutRequest",
    "FastAlgorithm",
    "FunctionalLitAgent",
    "GRPO",
    "GenericResource",
    "Hook",
    "InMemoryLightningStore",
    "LLM",
    "LightningEnvVar",
    "LightningStore",
    "LightningStoreClient",
    "LitAgent",
    "LitAgentRunner",
    "LlmProxyTraceToTriplet",
    "NamedResources",
    "OperationContext",
    "OtelTracer",
    "PaginatedResult",
    "PromptTemplate",
    "ProxyLLM",
    "Resource",
    "ResourceUnion",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutRawResult",
    "RolloutStatus",
    "Runner",
    "Span",
    "SpanCore",
    "SpanCoreFields",
    "Store",
    "TaskInput",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "Tracer",
    "TracerTraceToTriplet",
    "Trainer",
    "Triplet",
    "VERL",
    "Worker",
    "WorkerStatus",
    "algo",
    "clear_active_tracer",
    "configure_logger",
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
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
    "rollout",
    "semconv",
    "set_active_tracer",
    "setup_logging",
    "setup_module_logging",
]

_TRAINER_NAMES = {"APO", "Algorithm", "Baseline", "FastAlgorithm", "GRPO", "Trainer", "VERL", "algo"}
_LAZY_NAMES = {
    "AgentOpsTracer": "voltbus.tracer",
    "LitAgentRunner": "voltbus.runner",
    "OtelTracer": "voltbus.tracer",
    "Runner": "voltbus.runner",
    "Tracer": "voltbus.tracer",
}
"""Agent Lightning's runner and tracers, imported on first use (they bring the runner service and OpenTelemetry's
SDK, which agent code alone never needs)."""


def __getattr__(name: str) -> object:
    """``agl.Trainer`` and its algorithms, as Agent Lightning exports them, imported on first use (the
    trainer brings the services' settings and clients, which agent code alone never needs)."""
    if name in _LAZY_NAMES:
        import importlib

        return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    if name in _TRAINER_NAMES:
        import voltbus.trainer

        return getattr(voltbus.trainer, name)
    raise AttributeError(f"module 'voltbus' has no attribute {name!r}")
