"""Agent Lightning's ``adapter`` module (and its ``base``, ``triplet``, ``messages`` paths): ``adapt(spans)`` objects
over a rollout's spans, voltbus's ``Span`` or AL's: ``Triplet``s (``TracerTraceToTriplet``, ``LlmProxyTraceToTriplet``)
and OpenAI chat examples (``TraceToMessages``)."""

from __future__ import annotations

from .base import Adapter, TraceAdapter
from .messages import OpenAIMessages, TraceToMessages
from .triplet import LlmProxyTraceToTriplet, RewardMatchPolicy, TracerTraceToTriplet, TraceToTripletBase

__all__ = [
    "Adapter",
    "LlmProxyTraceToTriplet",
    "OpenAIMessages",
    "RewardMatchPolicy",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "TracerTraceToTriplet",
]
