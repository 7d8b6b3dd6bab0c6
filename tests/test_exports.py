"""The public ``voltbus`` package: a sorted ``__all__`` whose names all resolve, with Agent Lightning's names."""

from __future__ import annotations

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
}


def test_all_is_sorted_resolves_and_covers_agent_lightning() -> None:
    assert voltbus.__all__ == sorted(voltbus.__all__)
    assert [n for n in voltbus.__all__ if not hasattr(voltbus, n)] == []
    assert AGENT_LIGHTNING_NAMES - set(voltbus.__all__) == set()
