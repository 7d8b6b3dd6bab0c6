"""Agent Lightning's ``adapter`` module: ``adapt(spans)`` objects over a rollout's spans (voltbus's ``Span`` or AL's).

``TracerTraceToTriplet`` and ``LlmProxyTraceToTriplet`` give ``Triplet``s (token ids, reward, metadata);
``TraceToMessages`` gives OpenAI chat examples of the recorded calls. The submodules are AL's paths.
"""

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
