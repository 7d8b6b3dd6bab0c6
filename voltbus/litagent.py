"""Agent Lightning's ``litagent`` module: ``LitAgent`` and the ``rollout`` decorators (``voltbus.agent``'s)."""

from __future__ import annotations

from voltbus.agent import FunctionalLitAgent, LitAgent, llm_rollout, prompt_rollout, rollout

__all__ = ["FunctionalLitAgent", "LitAgent", "llm_rollout", "prompt_rollout", "rollout"]
