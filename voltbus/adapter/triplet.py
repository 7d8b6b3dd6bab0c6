"""Agent Lightning's ``adapter.triplet``: spans to ``Triplet``s, computed by the projector's own adapter
(``projections/adapter``) over a rollout's spans (voltbus's ``Span`` or AL's), so a script sees the rows a projection
would."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import msgspec

from voltbus.projections.adapter import AdapterSettings, AttemptInput, SpanRow, TripletRow, adapt
from voltbus.services.clients.store import Triplet

from .base import Adapter

__all__ = ["LlmProxyTraceToTriplet", "RewardMatchPolicy", "TraceToTripletBase", "TracerTraceToTriplet"]


class RewardMatchPolicy(enum.StrEnum):
    """Agent Lightning's reward matching policies (the adapter's ``reward_policy`` values of the same names)."""

    FIRST_SIBLING = "first_sibling"
    FIRST_OCCURRENCE = "first_occurrence"


def _span_row(span: Any) -> SpanRow:
    """A projection-shaped row of one span (voltbus's ``Span`` or Agent Lightning's, read by attribute)."""
    status = getattr(span, "status", None)
    code = getattr(status, "status_code", status)
    return SpanRow(
        seq=span.sequence_id,
        sequence_id=span.sequence_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        name=span.name,
        attributes=dict(span.attributes or {}),
        status_code=getattr(code, "name", code) if code is not None else None,
    )


def _triplet(row: TripletRow) -> Triplet:
    metadata = {
        "rollout_id": row.rollout_id,
        "attempt_id": row.attempt_id,
        "response_id": row.call_id,
        "agent_name": row.agent_name,
        "logprobs": row.logprobs,
        "return_value": row.return_value,
    }
    return Triplet(
        prompt={"token_ids": row.prompt_ids},
        response={"token_ids": row.response_ids},
        reward=row.reward,
        metadata=metadata,
    )


class TraceToTripletBase(Adapter[Sequence[Any], list[Triplet]]):
    """Spans to triplets: one per recorded model call, in order, each attempt's spans adapted on their own."""

    settings: AdapterSettings = AdapterSettings()

    def adapt(self, source: Sequence[Any], /) -> list[Triplet]:
        """The triplets of the spans' model calls, rewards matched by the adapter settings."""
        attempts: dict[tuple[str, str], list[SpanRow]] = {}
        for span in source:
            attempts.setdefault((span.rollout_id, span.attempt_id), []).append(_span_row(span))
        triplets: list[Triplet] = []
        for (rollout_id, attempt_id), rows in attempts.items():
            out = adapt(AttemptInput(rollout_id=rollout_id, attempt_id=attempt_id, spans=rows), self.settings)
            triplets += [_triplet(row) for row in out.triplets]
        return triplets


class TracerTraceToTriplet(TraceToTripletBase):
    """Agent Lightning's constructor: ``agent_match``, ``llm_call_match``, ``exclude_llm_call_in_reward`` and
    ``reward_match`` (a ``RewardMatchPolicy`` or its value) map to the projector's adapter settings;
    ``repair_hierarchy`` is accepted (parents are always repaired); any other adapter setting may be given too."""

    def __init__(
        self,
        repair_hierarchy: bool = True,
        llm_call_match: str | None = None,
        agent_match: str | None = None,
        exclude_llm_call_in_reward: bool = True,
        reward_match: Any = "first_occurrence",
        **settings: Any,
    ) -> None:
        settings.pop("_skip_empty_token_spans", None)
        policy = reward_match.value if isinstance(reward_match, enum.Enum) else str(reward_match)
        wanted = {"agent_match": agent_match, "exclude_calls_in_reward": exclude_llm_call_in_reward, **settings}
        wanted |= {"reward_policy": policy.lower(), **({"llm_call_match": llm_call_match} if llm_call_match else {})}
        self.settings = msgspec.convert(wanted, AdapterSettings)  # a bad value or an unknown setting is refused


class LlmProxyTraceToTriplet(TracerTraceToTriplet):
    """Agent Lightning's adapter of its LLM proxy's spans. voltbus's gateway records model calls as events, which
    the projector merges with the runner's spans by itself; over a list of spans this adapts the recorded calls
    as ``TracerTraceToTriplet`` does."""
