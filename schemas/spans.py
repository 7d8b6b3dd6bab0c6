"""Telemetry events of an attempt: spans, model calls, rewards and heartbeats (the spans stream).

Span fields follow Agent Lightning's OpenTelemetry-shaped ``Span`` (``types/tracer.py``).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from .base import Attributes, Event, Id, Json, Timestamp
from .rollouts import ErrorInfo, SequenceId

TraceId = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
"""An OpenTelemetry trace id: 32 lower-case hex digits."""

SpanId = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{16}$")]
"""An OpenTelemetry span id: 16 lower-case hex digits."""

TokenCount = Annotated[int, msgspec.Meta(ge=0)]
"""A number of tokens."""


class SpanStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of a span (Agent Lightning's ``TraceStatus``)."""

    status_code: Literal["UNSET", "OK", "ERROR"] = "UNSET"
    """OpenTelemetry status code."""
    description: str | None = None
    """Error description, usually set with ``ERROR``."""


class SpanEventInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A timestamped annotation inside a span (an OpenTelemetry span event)."""

    name: str
    """Event name, e.g. ``exception``."""
    timestamp: Timestamp | None = None
    """When it happened, if recorded."""
    attributes: Attributes = {}
    """Event attributes."""


class SpanRecorded(Event, frozen=True, kw_only=True):
    """One finished (or zero-duration) span of an attempt: a tool call, a reward, an annotation."""

    rollout_id: Id
    """The span's rollout."""
    attempt_id: Id
    """The span's attempt."""
    sequence_id: SequenceId
    """Order of the span within its rollout, across attempts; independent of clocks."""
    trace_id: TraceId
    """OpenTelemetry trace id."""
    span_id: SpanId
    """OpenTelemetry span id."""
    parent_id: SpanId | None = None
    """Parent span id; None for a root span."""
    name: str
    """Span name, e.g. ``agentlightning.reward`` or ``openai.chat``."""
    start_time: Timestamp
    """When the span started."""
    end_time: Timestamp | None = None
    """When it ended; None if it never ended."""
    attributes: Attributes = {}
    """Span attributes."""
    events: list[SpanEventInfo] = []
    """Span events, in recording order."""
    status: SpanStatus = SpanStatus()
    """Span outcome."""
    resource_attributes: Attributes = {}
    """Attributes of the OpenTelemetry resource that produced the span (service name, host)."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage of one model call, as the OpenAI API reports it."""

    prompt_tokens: TokenCount = 0
    """Tokens in the prompt."""
    completion_tokens: TokenCount = 0
    """Tokens generated."""
    total_tokens: TokenCount = 0
    """Prompt plus completion tokens."""


class SampledChoice(msgspec.Struct, frozen=True, kw_only=True):
    """One choice of a multi-choice response (``n`` > 1): what the engine sampled for it."""

    index: Annotated[int, msgspec.Meta(ge=0)]
    """The choice's index in the response."""
    response_ids: list[int] = []
    """Token ids sampled for this choice."""
    logprobs: list[float] = []
    """Log-probability of each sampled token; aligned with ``response_ids``."""
    finish_reason: str | None = None
    """Why the engine stopped this choice."""


class ModelCalled(Event, frozen=True, kw_only=True):
    """The gateway served one model call of an attempt, with the exact tokens and logprobs sampled."""

    rollout_id: Id
    """The calling rollout."""
    attempt_id: Id
    """The calling attempt."""
    call_id: Id
    """Id of this call; rewards may point at it."""
    resources_id: Id | None = None
    """The resources version (policy weights) that served the call."""
    model: str
    """Model name the engine answered with."""
    request: Json
    """The request body as sent upstream (OpenAI chat or completions JSON)."""
    response: Json
    """The response body (the assembled one for a streamed call); JSON null on an error."""
    prompt_ids: list[int] = []
    """Token ids of the prompt, as the engine tokenized it."""
    response_ids: list[int] = []
    """Token ids the engine sampled."""
    logprobs: list[float] = []
    """Log-probability of each sampled token; aligned with ``response_ids``."""
    latency_s: Annotated[float, msgspec.Meta(ge=0)]
    """Wall time of the call, in seconds."""
    usage: Usage = Usage()
    """Token counts."""
    status: Literal["ok", "error"] = "ok"
    """Whether the upstream call succeeded."""
    error: ErrorInfo | None = None
    """What failed, when ``status`` is ``error``."""
    at: Timestamp
    """When the call started."""
    finish_reason: str | None = None
    """Why the engine stopped (first choice), e.g. ``stop`` or ``length``."""
    http_status: int | None = None
    """HTTP status the engine answered with; None when no answer came (transport error, timeout)."""
    upstream: str | None = None
    """Base URL of the engine that served the call."""
    retries: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Tries made after the first one."""
    rewritten: list[str] = []
    """Request fields the gateway set or changed before forwarding, e.g. ``logprobs``."""
    streamed: bool = False
    """Whether the call was streamed (``response`` is then assembled from the chunks)."""
    choices: list[SampledChoice] = []
    """Every choice's token ids and logprobs when the response has more than one choice (``n`` > 1);
    empty for a single choice, which the fields above describe. ``choices[0]`` equals those fields."""
    mode: str | None = None
    """The rollout mode the call was served in (``train``, ``val``, ``test``), when known."""


class RewardReported(Event, frozen=True, kw_only=True):
    """A reward for an attempt, or for one model call of it: a scalar and/or named dimensions."""

    rollout_id: Id
    """The rewarded rollout."""
    attempt_id: Id
    """The rewarded attempt."""
    value: float | None = None
    """The primary scalar reward; None when only dimensions were given."""
    dimensions: dict[str, float] = {}
    """Named reward components, e.g. ``{"correct": 1.0, "format": 0.5}``."""
    primary_key: str | None = None
    """The dimension that is the primary reward, when ``value`` comes from ``dimensions``."""
    call_id: Id | None = None
    """The model call this reward is for; None rewards the whole attempt."""
    at: Timestamp
    """When the reward was reported."""


class AttemptHeartbeatSent(Event, frozen=True, kw_only=True):
    """A worker said an attempt is still alive; the coordinator uses it for unresponsiveness."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The live attempt."""
    worker_id: Id
    """The worker running it."""
    at: Timestamp
    """When the heartbeat was sent."""


SpanItem = SpanRecorded | ModelCalled | RewardReported | AttemptHeartbeatSent
"""One telemetry event: what a ``SpanBatch`` holds."""


class SpanBatch(Event, frozen=True, kw_only=True):
    """Several telemetry events of one shard subject stored as one message: a runner's flush of a rollout's
    spans costs one publish, one acknowledgement and one delivery instead of one per span. Its id is derived
    from the ids of its events in order, so the same batch published again is stored once."""

    events: Annotated[list[SpanItem], msgspec.Meta(min_length=1)]
    """The events, in the order they were published."""


SpanEvent = SpanItem | SpanBatch
"""Every event on the spans stream."""
SPAN_TYPES: tuple[type[Event], ...] = typing.get_args(SpanEvent)
"""The classes of ``SpanEvent``: what goes on the spans stream (every other event goes on the control stream)."""


def items_of(event: SpanEvent) -> Sequence[SpanItem]:
    """The telemetry events a spans-stream message holds: a batch's events, or the event itself.

    >>> beat = AttemptHeartbeatSent(event_id="e", rollout_id="r", attempt_id="a", worker_id="w", at=1)
    >>> items_of(beat) == (beat,), items_of(SpanBatch(event_id="b", events=[beat, beat])) == [beat, beat]
    (True, True)
    """
    return event.events if isinstance(event, SpanBatch) else (event,)
