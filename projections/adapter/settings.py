"""Adapter settings: which calls become training data and how rewards reach them, with a stable id.

Every training row records the ``settings_id`` of the settings and the ``ADAPTER_VERSION`` of the code
that produced it, so two projections of the same log can always be told apart.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import msgspec

ADAPTER_VERSION = 1
"""Bump when the adapter's output for the same input and settings changes."""

RewardPolicy = Literal["first_occurrence", "first_sibling", "final_to_last", "per_call"]
"""How rewards find their model call (see ``rewards.py``)."""

Aggregation = Literal["call", "trajectory"]
"""``call``: one trajectory row per model call; ``trajectory``: stitched while prompts extend the context."""

Length = Annotated[int, msgspec.Meta(ge=1)]


class AdapterSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Rules that turn one attempt's spans, model calls and rewards into training rows."""

    agent_match: str | None = None
    """Regex searched in agent names; only calls under a matching agent are trained. None: every call."""
    llm_call_match: str = r"openai\.(chat\.)?completions?"
    """Regex searched in span names to find runner-side model call spans."""
    reward_policy: RewardPolicy = "first_occurrence"
    """How rewards without a ``call_id`` are matched to calls."""
    gamma: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 1.0
    """Discount of later rewards in each call's return; 1.0 sums them."""
    aggregation: Aggregation = "trajectory"
    """Rows of the ``trajectories`` table: one per call, or stitched by exact token prefix."""
    exclude_calls_in_reward: bool = True
    """Calls made inside a reward span (an LLM judge) are not trained on (counted)."""
    max_prompt_length: Length | None = None
    """Rows whose prompt is longer are flagged ``overlong_prompt`` (kept whole, for the learner to drop)."""
    max_response_length: Length | None = None
    """Longer responses (with observations) are cut to this length and flagged ``truncated``."""


_encoder = msgspec.json.Encoder(order="deterministic")


def settings_id(settings: AdapterSettings) -> str:
    """A short stable id of the settings' values (same values, same id).

    >>> settings_id(AdapterSettings()) == settings_id(AdapterSettings(gamma=1.0))
    True
    >>> settings_id(AdapterSettings()) == settings_id(AdapterSettings(reward_policy="per_call"))
    False
    >>> len(settings_id(AdapterSettings()))
    12
    """
    return hashlib.blake2b(_encoder.encode(settings), digest_size=6).hexdigest()


def parse_settings(text: str | bytes) -> AdapterSettings:
    """Settings from JSON text; unknown keys are an error (a typo must not silently mean the default).

    >>> parse_settings('{"reward_policy": "final_to_last", "gamma": 0.9}').gamma
    0.9
    """
    return msgspec.json.decode(text, type=AdapterSettings)
