"""Agent Lightning's ``reward`` module (deprecated there for ``emitter``): the ``reward`` decorator and the reward
emitter and readers, the same objects as ``voltbus.emitter``'s."""

from __future__ import annotations

from voltbus.emitter import (
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    reward,
)

__all__ = [
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "reward",
]
