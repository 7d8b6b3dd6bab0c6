"""What the adapter reads: one attempt's span, model-call and reward rows, in the shape of the
``spans`` / ``model_calls`` / ``rewards`` projection tables, so fixtures, events and DuckDB rows all fit."""

from __future__ import annotations

from typing import Any

import msgspec


class SpanRow(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded span (a ``spans`` row, ``attributes`` decoded)."""

    seq: int
    """Position in the spans stream; breaks ties of ``sequence_id``."""
    seq_index: int = 0
    """Its place among the events of its message (a ``SpanBatch``'s)."""
    sequence_id: int
    """Order within the rollout, independent of clocks."""
    span_id: str
    """The span's id."""
    parent_id: str | None = None
    """Its parent's id; None for a root."""
    name: str
    """Span name, e.g. ``openai.chat.completions.create``."""
    attributes: dict[str, Any] = {}
    """Span attributes."""
    status_code: str | None = None
    """OpenTelemetry status code; ``ERROR`` marks a failed call."""


class CallRow(msgspec.Struct, frozen=True, kw_only=True):
    """One model call recorded by the gateway (a ``model_calls`` row)."""

    seq: int
    """Position in the spans stream (the gateway appends when the call ends)."""
    seq_index: int = 0
    """Its place among the events of its message."""
    call_id: str
    """The gateway's call id; rewards may point at it."""
    resources_id: str | None = None
    """Resources version that served the call."""
    model: str | None = None
    """Model name."""
    response: str | None = None
    """Response body as JSON text; its ``id`` matches the call to a runner-side span."""
    prompt_ids: list[int] | None = None
    """Prompt token ids."""
    response_ids: list[int] | None = None
    """Sampled token ids."""
    logprobs: list[float] | None = None
    """Log-probability of each sampled token."""
    status: str | None = "ok"
    """``ok`` or ``error``."""


class RewardRow(msgspec.Struct, frozen=True, kw_only=True):
    """One ``RewardReported`` event (a ``rewards`` row, ``dimensions`` decoded)."""

    seq: int
    """Position in the spans stream."""
    seq_index: int = 0
    """Its place among the events of its message."""
    event_id: str
    """Event id; the runner derives it from the reward span it copies (see ``rewards.py``)."""
    value: float | None = None
    """Primary scalar reward."""
    dimensions: dict[str, float] = {}
    """Named reward components."""
    primary_key: str | None = None
    """The dimension that is the primary reward."""
    call_id: str | None = None
    """The model call this reward is for; None: the attempt."""


class AttemptInput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the adapter needs about one attempt."""

    rollout_id: str
    """The rollout."""
    attempt_id: str
    """The attempt the rows below belong to."""
    task_id: str | None = None
    """Group id for GRPO: the task the rollout ran (its input's id, or the rollout id)."""
    mode: str | None = None
    """``train``, ``val`` or ``test``."""
    spans: list[SpanRow] = []
    """The attempt's spans, in any order."""
    calls: list[CallRow] = []
    """The attempt's gateway model calls, in any order."""
    rewards: list[RewardRow] = []
    """The attempt's reward events, in any order."""
