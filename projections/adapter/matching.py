"""Reward matching: which call each reward belongs to, under each policy, and discounted returns.

A reward naming a ``call_id`` goes to that call under every policy except ``final_to_last``. The
others are placed by the policy:

- ``first_occurrence`` (Agent Lightning 0.3's default): to the latest earlier call that holds no
  reward yet, so a second reward in a row back-fills the call before;
- ``first_sibling``: the same, among earlier calls with the same parent span only;
- ``final_to_last`` (Agent Lightning 1.0): only the attempt's last reward counts, on its last call;
- ``per_call``: only rewards naming their call count.

A call holds at most one reward. A reward with no call to go to is ``unmatched``; one the policy
ignores (or a second reward for an already rewarded call) is ``unused``. Both are counted.
"""

from __future__ import annotations

import msgspec

from .calls import Call
from .rewards import Reward
from .settings import RewardPolicy


class Matched(msgspec.Struct, frozen=True, kw_only=True):
    """Rewards by call position, and the rewards that found no call."""

    given: dict[int, Reward]
    """Index into the calls list -> its reward."""
    unmatched: int = 0
    """Rewards with no call to go to (before any call, or naming an unknown call)."""
    unused: int = 0
    """Rewards the policy does not use."""


def match_rewards(calls: list[Call], rewards: list[Reward], policy: RewardPolicy) -> Matched:
    """Match ``rewards`` (in order) to ``calls`` (in order) under ``policy``."""
    if policy == "final_to_last":
        if not calls:
            return Matched(given={}, unmatched=len(rewards))
        return Matched(given={len(calls) - 1: rewards[-1]} if rewards else {}, unused=max(0, len(rewards) - 1))
    index = {c.call_id: i for i, c in enumerate(calls)}
    given: dict[int, Reward] = {}
    unmatched = unused = 0
    for reward in (r for r in rewards if r.call_id is not None):
        i = index.get(reward.call_id or "")
        if i is None:
            unmatched += 1
        elif i in given:
            unused += 1
        else:
            given[i] = reward
    loose = [r for r in rewards if r.call_id is None]
    if policy == "per_call":
        return Matched(given=given, unmatched=unmatched, unused=unused + len(loose))
    for reward in loose:
        i = _latest_free(calls, given, reward, siblings=policy == "first_sibling")
        if i is None:
            unmatched += 1
        else:
            given[i] = reward
    return Matched(given=given, unmatched=unmatched, unused=unused)


def _latest_free(calls: list[Call], given: dict[int, Reward], reward: Reward, *, siblings: bool) -> int | None:
    for i in range(len(calls) - 1, -1, -1):
        call = calls[i]
        if call.key < reward.key and i not in given and (not siblings or call.parent == reward.parent):
            return i
    return None


def discounted(values: list[float | None], gamma: float) -> list[float | None]:
    """Each position's return: its value plus ``gamma`` times the next return; None where nothing follows.

    >>> discounted([None, 1.0, None, 2.0], 0.5)
    [0.75, 1.5, 1.0, 2.0]
    >>> discounted([1.0, None], 1.0)
    [1.0, None]
    """
    out: list[float | None] = []
    running: float | None = None
    for value in reversed(values):
        if value is not None or running is not None:
            running = (value or 0.0) + gamma * (running or 0.0)
        out.append(running)
    return out[::-1]
