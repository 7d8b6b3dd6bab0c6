"""The stream unions: which events travel on the control stream, the spans stream, or either."""

from __future__ import annotations

from .gateway import GatewayEvent
from .resources import ResourcesPublished
from .rollouts import RolloutEvent
from .spans import SpanEvent
from .training import TrainingEvent
from .workers import WorkerStatusReported

ControlEvent = RolloutEvent | ResourcesPublished | TrainingEvent | WorkerStatusReported | GatewayEvent
"""Every event on the control stream (the source of truth)."""

AnyEvent = ControlEvent | SpanEvent
"""Every event voltbus writes."""
