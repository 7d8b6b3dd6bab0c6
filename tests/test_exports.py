"""The public ``voltbus`` package: a sorted ``__all__`` whose names all resolve, with Agent Lightning's names."""

from __future__ import annotations

import pytest

import voltbus

AGENT_LIGHTNING_NAMES = {
    "rollout",
    "llm_rollout",
    "prompt_rollout",
    "LitAgent",
    "LLM",
    "ProxyLLM",
    "PromptTemplate",
    "emit_reward",
    "emit_annotation",
    "emit_message",
    "emit_object",
    "emit_exception",
    "find_final_reward",
    "get_reward_value",
    "NamedResources",
    "Rollout",
    "Attempt",
    "AttemptedRollout",
    "RolloutConfig",
    "Span",
    "Triplet",
    "setup_logging",
    "Dataset",
    "Hook",
    "OtelTracer",
    "AgentOpsTracer",
    "LitAgentRunner",
    "LightningStore",
    "InMemoryLightningStore",
    "LightningStoreClient",
    "TraceToMessages",
    "LlmProxyTraceToTriplet",
    "TracerTraceToTriplet",
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
}


def test_all_is_sorted_resolves_and_covers_agent_lightning() -> None:
    assert voltbus.__all__ == sorted(voltbus.__all__)
    assert [n for n in voltbus.__all__ if not hasattr(voltbus, n)] == []
    assert AGENT_LIGHTNING_NAMES - set(voltbus.__all__) == set()


def test_the_sdk_facades_re_export_their_implementation() -> None:
    import voltbus.agent
    import voltbus.services.clients.store
    import voltbus.store

    for facade in (voltbus.agent, voltbus.store):
        assert facade.__all__ == sorted(facade.__all__)
        assert [n for n in facade.__all__ if not hasattr(facade, n)] == []
    client = voltbus.services.clients.store
    lightning = {"InMemoryLightningStore", "LightningStore", "LightningStoreClient"}  # Agent Lightning's store classes
    assert set(voltbus.store.__all__) == set(client.__all__) | lightning
    assert all(getattr(voltbus.store, n) is getattr(client, n) for n in client.__all__)
    assert set(voltbus.agent.__all__) <= set(voltbus.__all__)


def test_the_model_facade_re_exports_its_implementation() -> None:
    pytest.importorskip("torch")
    import voltbus.model
    import voltbus.services.clients.model as model

    assert voltbus.model.__all__ == model.__all__
    assert all(getattr(voltbus.model, n) is getattr(model, n) for n in model.__all__)
