"""Rows the adapter produces: one triplet per model call, stitched trajectories, and a per-attempt summary.

Column names match the ``triplets`` / ``trajectories`` / ``training_attempts`` tables. A triplet's key
is (rollout, attempt, call, ``choice_index``); only choice 0 exists until model calls carry several.
"""

from __future__ import annotations

import msgspec


class TripletRow(msgspec.Struct, frozen=True, kw_only=True):
    """One model call: (prompt ids, response ids, reward) with logprobs and flags."""

    rollout_id: str
    attempt_id: str
    call_index: int
    """Position among the attempt's selected calls (0-based, in sequence order)."""
    call_id: str
    """Gateway call id, or the span id of a call only the runner saw."""
    choice_index: int = 0
    """Which choice of the call (always 0 for now)."""
    source: str
    """``gateway``, ``span`` or ``both``."""
    agent_name: str | None
    task_id: str | None
    """Group id for GRPO."""
    mode: str | None
    resources_id: str | None
    """Resources version that generated the response."""
    model: str | None
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    """One per response token; None when missing or misaligned."""
    reward: float | None
    """The reward matched to this call (its primary value)."""
    return_value: float | None
    """Discounted sum of this and later calls' rewards; None when no reward is at or after it."""
    dimensions: dict[str, float]
    """Discounted return of each reward dimension."""
    no_token_ids: bool
    no_logprobs: bool
    call_failed: bool
    truncated: bool
    overlong_prompt: bool
    reward_missing: bool
    """Nothing to learn from: ``return_value`` is None."""
    reward_not_numeric: bool
    """The matched reward had no finite primary value."""
    settings_id: str
    adapter_version: int


class TrajectoryRow(msgspec.Struct, frozen=True, kw_only=True):
    """Consecutive calls of one attempt as one sequence: observations masked 0, responses masked 1."""

    rollout_id: str
    attempt_id: str
    row_index: int
    """Position among the attempt's rows."""
    task_id: str | None
    mode: str | None
    call_ids: list[str]
    """The calls stitched into the row, in order."""
    call_resources: list[str | None]
    """Resources version of each call, aligned with ``call_ids``."""
    resources_ids: list[str]
    """Distinct versions in the row, in order of first use."""
    mixed_versions: bool
    """More than one version generated the row's tokens."""
    prompt_ids: list[int]
    """The first call's prompt."""
    response_ids: list[int]
    """Responses and the observation tokens between them."""
    response_mask: list[int]
    """1 for sampled tokens, 0 for observations."""
    logprobs: list[float] | None
    """Sampled tokens' logprobs, 0.0 on observations; None when any call lacks them."""
    reward: float | None
    """Return at the row's first call."""
    call_rewards: list[float | None]
    """The reward matched to each call, aligned with ``call_ids``."""
    dimensions: dict[str, float]
    """Return of each reward dimension at the row's first call."""
    after_mismatch: bool
    """The row began because a prompt did not extend the previous row's context."""
    no_logprobs: bool
    truncated: bool
    overlong_prompt: bool
    reward_missing: bool
    reward_not_numeric: bool
    settings_id: str
    adapter_version: int


class AttemptSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What the adapter did with one attempt: every call and reward it did not train on is counted here."""

    rollout_id: str
    attempt_id: str
    task_id: str | None
    mode: str | None
    spans: int
    calls: int
    """Calls found (any scope)."""
    selected: int
    outside_agent: int
    other_agent: int
    in_reward: int
    nested: int
    gateway_only: int
    span_only: int
    paired: int
    """Calls seen by both the runner and the gateway."""
    failed: int
    no_token_ids: int
    rewards: int
    rewards_unmatched: int
    rewards_unused: int
    rewards_not_numeric: int
    reward_copies_dropped: int
    prefix_mismatches: int
    triplets: int
    trajectories: int
    duplicate_spans: int
    orphans: int
    cycles_broken: int
    resources_ids: list[str]
    settings_id: str
    adapter_version: int


class AdapterOutput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything produced for one attempt."""

    triplets: list[TripletRow]
    trajectories: list[TrajectoryRow]
    summary: AttemptSummary
